//! Bodies kept only in the log (`LogOptions::bodies_in_log`): the writer reports where each
//! body landed, the engine keeps that place, and the body reads back byte for byte — after
//! the write, after compaction moved it into a snapshot, and after its file was unlinked.

use std::fs;
use std::path::Path;
use std::time::{Duration, Instant};

use bytes::Bytes;
use jobyard_engine::{Body, Change, EngineCore, JobId, LogRef, Millis, QueueId};
use jobyard_storage::{body_ref, recover_placed, FsyncMode, Log, LogOptions};

const T0: Millis = 1_700_000_000_000;

fn open(dir: &Path, fsync: FsyncMode) -> Log {
    open_with_segments(dir, fsync, 4096)
}

fn open_with_segments(dir: &Path, fsync: FsyncMode, segment_bytes: u64) -> Log {
    let options = LogOptions {
        fsync,
        segment_bytes,
        bodies_in_log: true,
    };
    Log::open(dir, 1, options, Box::new(|_| {})).expect("open log")
}

fn body_of(id: JobId) -> Vec<u8> {
    format!("body of job {id} ")
        .repeat(1 + id as usize % 7)
        .into_bytes()
}

/// Puts `n` durable jobs, 20 to a write (segments are cut between writes), and waits
/// until their records are written.
fn put_jobs(e: &mut EngineCore, log: &Log, q: QueueId, n: u64) -> Vec<JobId> {
    let mut ids = Vec::new();
    for _ in 0..n.div_ceil(20) {
        for _ in 0..20 {
            let body = Bytes::from(body_of(e.next_id()));
            ids.push(e.put(q, 0, 0, 60, body, true, T0).id);
        }
        let lsn = log.append(e.take_changes());
        wait_written(log, lsn);
    }
    ids.truncate(n as usize);
    ids
}

fn wait_written(log: &Log, lsn: u64) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !log.write_through(lsn) && log.durable() < lsn {
        assert!(Instant::now() < deadline, "never written");
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Hands every place the log reported to the engine (what the broker does at each lock).
fn learn_places(e: &mut EngineCore, log: &Log) -> usize {
    let found = log.take_located();
    for &(id, at) in &found.moved {
        e.body_moved(id, at);
    }
    let count = found.moved.len() + found.written.len();
    e.bodies_written(found.written);
    count
}

fn place(e: &EngineCore, id: JobId) -> LogRef {
    match e.job(id).expect("live job").body {
        Body::Log(at) => at,
        Body::Mem(_) => panic!("job {id}'s body is still in memory"),
    }
}

fn assert_bodies_read_back(e: &EngineCore, log: &Log, ids: &[JobId]) {
    for &id in ids {
        let read = log.read_body(place(e, id)).expect("body reads back");
        assert_eq!(read, body_of(id), "body of job {id}");
    }
}

#[test]
fn written_bodies_leave_memory_and_read_back_exactly() {
    for fsync in [FsyncMode::Never, FsyncMode::Always] {
        let dir = tempfile::tempdir().expect("tempdir");
        let log = open(dir.path(), fsync);
        let mut e = EngineCore::new();
        let q = e.queue_id_or_create(b"q");
        // 4 KiB segments: the bodies spread over several files.
        let ids = put_jobs(&mut e, &log, q, 300);
        assert_eq!(learn_places(&mut e, &log), ids.len());
        assert!(log.current_segment() > 2, "several segments were written");
        assert_bodies_read_back(&e, &log, &ids);
        log.close();
    }
}

#[test]
fn a_body_too_long_for_a_reference_stays_in_memory() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = open(dir.path(), FsyncMode::Never);
    let mut e = EngineCore::new();
    let q = e.queue_id_or_create(b"q");
    let big = Bytes::from(vec![7u8; 70_000]);
    let id = e.put(q, 0, 0, 60, big.clone(), true, T0).id;
    let lsn = log.append(e.take_changes());
    wait_written(&log, lsn);
    assert_eq!(learn_places(&mut e, &log), 0);
    assert_eq!(e.job(id).expect("live").body.in_memory(), Some(&big[..]));
}

#[test]
fn a_place_reported_for_another_body_length_is_ignored() {
    let mut e = EngineCore::new();
    let q = e.queue_id_or_create(b"q");
    let id = e.put(q, 0, 0, 60, Bytes::from_static(b"abc"), true, T0).id;
    e.body_written(id, LogRef::new(16, 4).expect("fits"));
    assert_eq!(e.job(id).expect("live").body.in_memory(), Some(&b"abc"[..]));
    let memory_only = e.put(q, 0, 0, 60, Bytes::from_static(b"xyz"), false, T0).id;
    e.body_written(memory_only, LogRef::new(16, 3).expect("fits"));
    assert!(e.job(memory_only).expect("live").body.in_memory().is_some());
}

#[test]
fn an_unlinked_segment_stays_readable_through_its_open_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = open(dir.path(), FsyncMode::Never);
    let mut e = EngineCore::new();
    let q = e.queue_id_or_create(b"q");
    let ids = put_jobs(&mut e, &log, q, 50);
    learn_places(&mut e, &log);
    // As compaction does once a snapshot replaces it, while a reader may hold its place.
    fs::remove_file(dir.path().join("seg-0000000001.log")).expect("unlink segment 1");
    assert_bodies_read_back(&e, &log, &ids);
}

#[test]
fn a_place_in_no_known_file_is_an_error_not_a_wrong_body() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = open(dir.path(), FsyncMode::Never);
    let nowhere = LogRef::new(4000 << 32, 10).expect("fits");
    let err = log.read_body(nowhere).expect_err("no such file");
    assert_eq!(err.kind(), std::io::ErrorKind::NotFound);
    // Past the end of a real file: the read fails rather than returning short bytes.
    let past_end = LogRef::new(1 << 20, 10).expect("fits");
    assert!(log.read_body(past_end).is_err());
}

#[test]
fn compaction_moves_bodies_into_the_snapshot_and_the_engine_learns_where() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = open(dir.path(), FsyncMode::Never);
    let mut e = EngineCore::new();
    let q = e.queue_id_or_create(b"q");
    let ids = put_jobs(&mut e, &log, q, 200);
    learn_places(&mut e, &log);
    let before: Vec<LogRef> = ids.iter().map(|&id| place(&e, id)).collect();

    compact_deleting(&mut e, &log, ids[0]);
    let seg1 = dir.path().join("seg-0000000001.log");
    assert!(!seg1.exists(), "compaction deleted the old segments");
    assert!(learn_places(&mut e, &log) >= ids.len() - 1);
    let live = &ids[1..];
    for (&id, old) in ids.iter().zip(&before).skip(1) {
        assert_ne!(
            place(&e, id),
            *old,
            "job {id} has its place in the snapshot"
        );
    }
    assert_bodies_read_back(&e, &log, live);
    // The old files are forgotten: their places no longer read.
    assert!(log.read_body(before[1]).is_err());
}

#[test]
fn after_a_restart_bodies_are_read_where_recovery_found_them() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = open(dir.path(), FsyncMode::Never);
    let mut e = EngineCore::new();
    let q = e.queue_id_or_create(b"q");
    let ids = put_jobs(&mut e, &log, q, 100);
    log.close();
    drop(log);

    let mut r = EngineCore::new();
    // As the broker does: each job is rebuilt holding only its body's place.
    let report = recover_placed(dir.path(), false, |change, place| {
        let at = match (&change, place) {
            (Change::Put { body, .. }, Some((file, offset))) => {
                Some(body_ref(file, offset, body.len()).expect("fits"))
            }
            _ => None,
        };
        r.replay_placed(change, at);
    })
    .expect("recovers");
    let options = LogOptions {
        fsync: FsyncMode::Never,
        segment_bytes: 4096,
        bodies_in_log: true,
    };
    let log = Log::open_after_recovery(
        dir.path(),
        report.next_segment,
        options,
        Box::new(|_| {}),
        &report.files,
    )
    .expect("reopen");
    assert!(report.files.len() > 2, "bodies in several files");
    assert_bodies_read_back(&r, &log, &ids);
}

/// Reads every body back in id order (a drain), returning the `pread`s it took.
fn drain_reads(e: &EngineCore, log: &Log, ids: &[JobId]) -> u64 {
    let (_, before) = log.body_read_stats();
    assert_bodies_read_back(e, log, ids);
    log.body_read_stats().1 - before
}

#[test]
fn a_backlog_handed_out_in_order_is_read_a_window_at_a_time() {
    for fsync in [FsyncMode::Never, FsyncMode::Always] {
        let dir = tempfile::tempdir().expect("tempdir");
        let log = open_with_segments(dir.path(), fsync, 1 << 20);
        let mut e = EngineCore::new();
        let q = e.queue_id_or_create(b"q");
        let ids = put_jobs(&mut e, &log, q, 2000);
        learn_places(&mut e, &log);
        let preads = drain_reads(&e, &log, &ids);
        // ~2000 bodies of ~150 bytes with their records: some 400 KB, 64 KiB a read.
        assert!(preads <= 20, "{preads} reads for {} bodies", ids.len());
        // Out of order: at most a read per body (the windows still hold the last run's
        // tail), and each still right.
        let scattered: Vec<JobId> = ids.iter().rev().step_by(37).copied().collect();
        assert!(drain_reads(&e, &log, &scattered) <= scattered.len() as u64);
        log.close();
    }
}

#[test]
fn a_window_read_before_compaction_never_serves_the_moved_bodies_old_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = open_with_segments(dir.path(), FsyncMode::Never, 64 << 10);
    let mut e = EngineCore::new();
    let q = e.queue_id_or_create(b"q");
    let ids = put_jobs(&mut e, &log, q, 1000);
    learn_places(&mut e, &log);
    let before: Vec<LogRef> = ids.iter().map(|&id| place(&e, id)).collect();
    // A run is being read from the first segment: its window holds the next bodies too.
    drain_reads(&e, &log, &ids[..50]);

    compact_deleting(&mut e, &log, ids[0]);
    assert!(learn_places(&mut e, &log) >= ids.len() - 1);
    // The old file is let go with its windows: the place inside the window read before
    // compaction no longer reads, and every body is read from the snapshot, a window at
    // a time.
    assert!(log.read_body(before[60]).is_err());
    let preads = drain_reads(&e, &log, &ids[1..]);
    assert!(preads <= 10, "{preads} reads after compaction");
}

fn kept_in_memory(e: &EngineCore, ids: &[JobId]) -> Vec<bool> {
    ids.iter()
        .map(|&id| e.job(id).expect("live").body.in_memory().is_some())
        .collect()
}

#[test]
fn written_bodies_stay_in_memory_within_the_budget_and_then_read_back() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = open_with_segments(dir.path(), FsyncMode::Never, 1 << 20);
    let mut e = EngineCore::new();
    // About 40 of these bodies (16 to 112 bytes, and 32 bytes of bookkeeping each).
    e.set_hot_body_budget(4096);
    let q = e.queue_id_or_create(b"q");
    // One turn learns all 300: past the budget, the oldest go at once.
    let ids = put_jobs(&mut e, &log, q, 300);
    learn_places(&mut e, &log);
    let in_memory = kept_in_memory(&e, &ids);
    let kept = in_memory.iter().filter(|&&m| m).count();
    assert!((20..=60).contains(&kept), "{kept} bodies kept");
    assert!(
        in_memory[..ids.len() - kept].iter().all(|&m| !m),
        "the newest are kept"
    );
    assert!(in_memory[ids.len() - kept..].iter().all(|&m| m));
    assert_bodies_read_back(&e, &log, &ids[..ids.len() - kept]);
    for &id in &ids[ids.len() - kept..] {
        let body = e.job(id).expect("live").body.in_memory().expect("kept");
        assert_eq!(body, &body_of(id)[..]);
    }
    // A turn that learns of nothing new changes nothing.
    assert_eq!(learn_places(&mut e, &log), 0);
    assert_eq!(
        kept_in_memory(&e, &ids).iter().filter(|&&m| m).count(),
        kept
    );
    // The dropped bodies wait for the caller to free them outside its lock.
    let mut dropped = Vec::new();
    e.move_dropped_bodies(&mut dropped);
    assert_eq!(dropped.len(), ids.len() - kept);
    assert_eq!(
        &dropped[0][..],
        &body_of(ids[0])[..],
        "the oldest went first"
    );
    dropped.clear();
    e.move_dropped_bodies(&mut dropped);
    assert!(dropped.is_empty(), "handed over once");
    // A small turn keeps its own bodies and, with fewer than the floor in all, the newest
    // earlier ones the budget still has room for.
    let newer = put_jobs(&mut e, &log, q, 20);
    learn_places(&mut e, &log);
    assert!(kept_in_memory(&e, &newer).iter().all(|&m| m));
    let still = kept_in_memory(&e, &ids);
    let still_kept = still.iter().filter(|&&m| m).count();
    assert!(
        still_kept < kept,
        "the budget made room for the newer bodies"
    );
    assert!(
        still[ids.len() - still_kept..].iter().all(|&m| m),
        "the newest earlier ones stay"
    );
    e.move_dropped_bodies(&mut dropped);
    assert_eq!(dropped.len(), kept - still_kept);
    dropped.clear();
    // Newer bodies past the budget push the earlier ones out.
    let more = put_jobs(&mut e, &log, q, 100);
    learn_places(&mut e, &log);
    assert!(kept_in_memory(&e, &ids).iter().all(|&m| !m));
    assert!(kept_in_memory(&e, &newer).iter().all(|&m| !m));
    assert!(kept_in_memory(&e, &more).last() == Some(&true));
    assert_bodies_read_back(&e, &log, &ids);
    assert_bodies_read_back(&e, &log, &newer);
}

#[test]
fn a_hot_body_moved_by_compaction_keeps_its_new_place_when_it_leaves_the_budget() {
    let mut e = EngineCore::new();
    e.set_hot_body_budget(1000);
    let q = e.queue_id_or_create(b"q");
    let id = e.put(q, 0, 0, 60, Bytes::from_static(b"abc"), true, T0).id;
    let written = LogRef::new(16, 3).expect("fits");
    let moved = LogRef::new(5 << 32 | 16, 3).expect("fits");
    e.body_written(id, written);
    assert!(e.job(id).expect("live").body.in_memory().is_some(), "kept");
    e.body_moved(id, moved);
    assert_eq!(e.job(id).expect("live").body, Body::Log(moved));
    // Later turns drop the body the written place was kept for: the moved place stays.
    for _ in 0..100 {
        let other = e.put(q, 0, 0, 60, Bytes::from_static(b"xyz"), true, T0).id;
        e.body_written(other, LogRef::new(4096, 3).expect("fits"));
    }
    assert!(
        e.hot_bodies() <= 1000 / 35,
        "within the budget: {} kept",
        e.hot_bodies()
    );
    assert_eq!(e.job(id).expect("live").body, Body::Log(moved));
}

/// What the broker's compaction does, with `first` deleted as it starts: jobs a chunk at a
/// time, bodies only in the log read back outside the engine lock; returns once the
/// snapshot is written. The cut is taken by the writer's next batch: the delete's record
/// starts the new segment.
fn compact_deleting(e: &mut EngineCore, log: &Log, first: JobId) {
    let feed = log.begin_snapshot(e.next_id()).expect("snapshot starts");
    assert!(e.delete(0, first));
    let lsn = log.append(e.take_changes());
    wait_written(log, lsn);
    for chunk in e.snapshot_order().chunks(64) {
        let (mut jobs, in_log) = e.snapshot_of_split(chunk);
        for (i, at) in in_log {
            if let Change::Put { body, .. } = &mut jobs[i] {
                *body = log.read_body(at).expect("old place reads").into();
            }
        }
        assert!(feed.send(jobs));
    }
    feed.finish();
    let deadline = Instant::now() + Duration::from_secs(20);
    while log.snapshot_running() {
        assert!(Instant::now() < deadline, "snapshot never finished");
        std::thread::sleep(Duration::from_millis(1));
    }
}

#[test]
fn two_lists_of_places_go_round_between_the_writer_and_the_engine() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = open_with_segments(dir.path(), FsyncMode::Never, 1 << 20);
    let mut e = EngineCore::new();
    let q = e.queue_id_or_create(b"q");
    let mut lists = Vec::new();
    for _ in 0..4 {
        put_jobs(&mut e, &log, q, 20); // one write
        let mut found = log.take_located();
        assert_eq!(found.written.len(), 20);
        lists.push(found.written.as_ptr());
        e.bodies_written(found.written.drain(..));
        log.give_back_located(found.written);
    }
    // The first two writes made the two lists; from then on each write reuses the one the
    // engine gave back two writes before.
    assert_ne!(lists[0], lists[1], "both lists are alive at once");
    assert_eq!(lists[2], lists[0]);
    assert_eq!(lists[3], lists[1]);
    log.close();
}
