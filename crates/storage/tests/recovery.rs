//! The durable log end to end: real files in a temporary directory, a real writer thread,
//! and recovery into a fresh engine compared with the engine that wrote the log.

use std::collections::BTreeMap;
use std::fs::{self, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use jobyard_engine::{EngineCore, JobId, JobState, Lease, Millis, QueueId};
use jobyard_storage::{
    disk_bytes, encode_change, recover, Change, DirLock, FsyncMode, Log, LogOptions, Lsn,
    RecoveryError, RecoveryReport,
};

const T0: Millis = 1_700_000_000_000;
const SEC: Millis = 1000;
/// Segment and snapshot headers are 16 bytes; records start after them.
const HEADER_LEN: u64 = 16;
/// A segment with a successor ends with a record naming it: frame header, type, sequence.
const SEGMENT_END_RECORD: u64 = 8 + 1 + 8;

// ----- helpers ----------------------------------------------------------------------------

fn options(fsync: FsyncMode) -> LogOptions {
    LogOptions {
        fsync,
        ..LogOptions::default()
    }
}

fn open(dir: &Path, first_segment: u64, options: LogOptions) -> Log {
    Log::open(dir, first_segment, options, Box::new(|_| {})).expect("open log")
}

/// Waits (bounded) until everything up to `lsn` is durable, the way the server waits: in
/// `interval`/`never` modes the waiter writes the records itself (the writer thread only
/// sweeps once per interval, which may be an hour), in `always` mode it waits for the
/// writer thread's sync.
fn wait_durable(log: &Log, lsn: Lsn) {
    if log.write_through(lsn) {
        assert!(log.durable() >= lsn);
        return;
    }
    let deadline = Instant::now() + Duration::from_secs(20);
    while log.durable() < lsn {
        assert!(Instant::now() < deadline, "lsn {lsn} never became durable");
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Waits (bounded) until a requested snapshot is written and old files are gone.
fn wait_snapshot(log: &Log) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while log.snapshot_running() {
        assert!(Instant::now() < deadline, "snapshot never finished");
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Rebuilds an engine from `dir` as the server does at start-up.
fn recover_engine(
    dir: &Path,
    salvage: bool,
) -> Result<(EngineCore, RecoveryReport), RecoveryError> {
    let mut engine = EngineCore::new();
    let report = recover(dir, salvage, |change| engine.replay(change))?;
    engine.raise_next_id(report.next_id);
    Ok((engine, report))
}

fn recover_ok(dir: &Path) -> (EngineCore, RecoveryReport) {
    match recover_engine(dir, false) {
        Ok(r) => r,
        Err(e) => panic!("recovery failed: {e}"),
    }
}

/// Sends the engine's pending changes to the log, as a transaction commit does.
fn commit(engine: &mut EngineCore, log: &Log) -> Lsn {
    log.append(engine.take_changes())
}

fn q(engine: &mut EngineCore, name: &str) -> QueueId {
    let q = engine.queue_id_or_create(name.as_bytes());
    engine.pin(q);
    q
}

fn put(engine: &mut EngineCore, queue: QueueId, pri: u32, delay: u32, body: &str) -> JobId {
    engine
        .put(
            queue,
            pri,
            delay,
            60,
            Bytes::copy_from_slice(body.as_bytes()),
            true,
            T0,
        )
        .id
}

/// Queue name, state, priority, ttr, ready time if delayed, body.
type DurableJob = (Vec<u8>, JobState, u32, u32, Millis, Vec<u8>);

/// What must survive a restart: queue, state (reserved shown as ready), priority, ttr,
/// ready time of delayed jobs, body, and the burial order of each queue.
#[derive(Debug, PartialEq, Eq)]
struct View {
    jobs: BTreeMap<JobId, DurableJob>,
    buried: BTreeMap<Vec<u8>, Vec<JobId>>,
}

fn view(e: &EngineCore, max_id: JobId) -> View {
    let mut jobs = BTreeMap::new();
    let mut buried: BTreeMap<Vec<u8>, Vec<(u64, JobId)>> = BTreeMap::new();
    for j in (0..=max_id)
        .filter_map(|id| e.job(id))
        .filter(|j| j.durable)
    {
        let name = e.queue(j.queue).name.to_vec();
        let state = match j.state {
            JobState::Reserved => JobState::Ready,
            s => s,
        };
        let due = if state == JobState::Delayed { j.due } else { 0 };
        if state == JobState::Buried {
            buried
                .entry(name.clone())
                .or_default()
                .push((j.buried_seq(), j.id));
        }
        jobs.insert(
            j.id,
            (
                name,
                state,
                j.pri,
                j.ttr,
                due,
                j.body.in_memory().expect("in memory").to_vec(),
            ),
        );
    }
    let buried = buried
        .into_iter()
        .map(|(q, mut v)| {
            v.sort();
            (q, v.into_iter().map(|(_, id)| id).collect())
        })
        .collect();
    View { jobs, buried }
}

/// An engine that did a bit of everything, with every change committed to `log` one
/// operation at a time. Returns the engine and the changes in log order.
fn busy(log: &Log) -> (EngineCore, Vec<Change>) {
    let mut e = EngineCore::new();
    let mut all = Vec::new();
    let mut step = |e: &mut EngineCore| {
        let changes: Vec<Change> = e.take_changes().collect();
        all.extend(changes.iter().cloned());
        log.append(changes.into_iter());
    };
    let a = q(&mut e, "alpha");
    let b = q(&mut e, "beta");
    let mut ids = Vec::new();
    for i in 0..10u32 {
        let queue = if i % 2 == 0 { a } else { b };
        ids.push(put(&mut e, queue, i % 3, 0, &format!("body {i}\r\n\0")));
        step(&mut e);
    }
    put(&mut e, b, 5, 30, "delayed");
    step(&mut e);
    e.put(a, 0, 0, 60, Bytes::from_static(b"volatile"), false, T0);
    step(&mut e);
    for &i in &[6usize, 1, 8] {
        assert!(e.reserve_job(1, ids[i], Lease::JobTtr, T0));
        assert!(e.bury(1, ids[i], 100 + i as u32));
        step(&mut e);
    }
    assert!(e.reserve_job(2, ids[2], Lease::JobTtr, T0));
    assert!(e.release(2, ids[2], 77, 10, T0));
    step(&mut e);
    assert!(e.reserve_job(2, ids[4], Lease::JobTtr, T0));
    assert!(e.release(2, ids[4], 55, 0, T0));
    step(&mut e);
    assert!(e.kick_job(ids[1], T0));
    step(&mut e);
    assert!(e.delete(3, ids[0]));
    step(&mut e);
    assert!(e.reserve_job(3, ids[5], Lease::JobTtr, T0)); // stays reserved
    step(&mut e);
    let last = put(&mut e, a, 1, 0, "deleted at once");
    step(&mut e);
    assert!(e.delete(3, last));
    step(&mut e);
    (e, all)
}

fn segment(dir: &Path, seq: u64) -> PathBuf {
    dir.join(format!("seg-{seq:010}.log"))
}

fn snapshot(dir: &Path, seq: u64) -> PathBuf {
    dir.join(format!("snap-{seq:010}.snap"))
}

fn file_names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n != "lock")
        .collect();
    names.sort();
    names
}

/// The size of each change's record on disk.
fn record_sizes(changes: &[Change]) -> Vec<u64> {
    changes
        .iter()
        .map(|c| {
            let mut buf = Vec::new();
            encode_change(c, &mut buf);
            buf.len() as u64
        })
        .collect()
}

fn simple_put(id: JobId, body: &str) -> Change {
    Change::Put {
        id,
        queue: Bytes::from_static(b"q"),
        pri: 1,
        ttr: 60,
        delay: 0,
        created: T0,
        state: jobyard_engine::PutState::Ready,
        unique: None,
        attrs: None,
        attempt: 0,
        body: Bytes::copy_from_slice(body.as_bytes()),
    }
}

/// Writes `changes` into segment `seq` through a real log, closed afterwards.
fn write_segment(dir: &Path, seq: u64, changes: &[Change]) {
    let log = open(dir, seq, LogOptions::default());
    let lsn = log.append(changes.iter().cloned());
    wait_durable(&log, lsn);
    log.close();
}

fn ids_of(e: &EngineCore, max: JobId) -> Vec<JobId> {
    (0..=max).filter(|&id| e.job(id).is_some()).collect()
}

// ----- a plain restart --------------------------------------------------------------------

#[test]
fn an_empty_directory_recovers_to_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let (e, report) = recover_ok(dir.path());
    assert_eq!(e.job_count(), 0);
    assert_eq!(report.next_segment, 1);
    assert_eq!(report.next_id, 1);
    assert_eq!(report.records, 0);
    assert_eq!(report.snapshot, None);
    assert!(report.torn_tail.is_none());
    assert!(report.salvaged.is_empty());
}

#[test]
fn what_was_appended_and_closed_recovers_to_the_same_state() {
    let dir = tempfile::tempdir().unwrap();
    let log = open(dir.path(), 1, LogOptions::default());
    let (e, changes) = busy(&log);
    log.close();
    assert_eq!(log.durable(), changes.len() as Lsn);
    assert_eq!(log.records_written(), changes.len() as u64);

    let (r, report) = recover_ok(dir.path());
    let max = e.next_id();
    assert_eq!(view(&r, max), view(&e, max));
    assert!(!view(&e, max).buried.is_empty());
    assert_eq!(report.records, changes.len() as u64);
    assert_eq!(report.next_segment, 2);
    assert_eq!(report.snapshot, None);
    assert!(report.torn_tail.is_none());
    assert!(report.salvaged.is_empty());
    // Without a snapshot, ids continue above the highest id in the log; the last job was
    // put and deleted, so that is the original's next id too.
    assert_eq!(r.next_id(), e.next_id());
    // The reserved job is ready again, the volatile one is gone.
    assert_eq!(r.counts().reserved, 0);
    assert_eq!(r.job_count(), e.job_count() - 1);
}

#[test]
fn each_restart_starts_a_new_segment_and_sees_everything_before() {
    let dir = tempfile::tempdir().unwrap();
    let mut e = EngineCore::new();
    let queue = q(&mut e, "q");
    let mut next_segment = 1;
    for round in 0..3 {
        let log = open(dir.path(), next_segment, LogOptions::default());
        put(&mut e, queue, round, 0, &format!("round {round}"));
        let lsn = commit(&mut e, &log);
        wait_durable(&log, lsn);
        log.close();
        let (r, report) = recover_ok(dir.path());
        assert_eq!(view(&r, 10), view(&e, 10));
        assert_eq!(report.next_segment, next_segment + 1);
        next_segment = report.next_segment;
    }
    assert_eq!(
        file_names(dir.path()),
        [
            "seg-0000000001.log",
            "seg-0000000002.log",
            "seg-0000000003.log"
        ]
    );
}

#[test]
fn a_delay_that_ran_out_while_down_is_ready_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let log = open(dir.path(), 1, LogOptions::default());
    let mut e = EngineCore::new();
    let queue = q(&mut e, "q");
    let id = put(&mut e, queue, 1, 5, "later");
    commit(&mut e, &log);
    log.close();
    let (mut r, _) = recover_ok(dir.path());
    assert_eq!(r.job(id).unwrap().state, JobState::Delayed);
    assert_eq!(r.job(id).unwrap().due, T0 + 5 * SEC);
    assert_eq!(r.next_deadline(), Some(T0 + 5 * SEC));
    r.tick(T0 + 3600 * SEC);
    assert_eq!(r.job(id).unwrap().state, JobState::Ready);
}

#[test]
fn small_segments_roll_over_and_recover_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let log = open(
        dir.path(),
        1,
        LogOptions {
            fsync: FsyncMode::Never,
            segment_bytes: 300,
            bodies_in_log: false,
        },
    );
    let mut e = EngineCore::new();
    let queue = q(&mut e, "q");
    for i in 0..40 {
        let id = put(
            &mut e,
            queue,
            i % 5,
            0,
            "a body of some forty bytes, give or take",
        );
        if i % 3 == 0 {
            assert!(e.delete(0, id));
        }
        let lsn = commit(&mut e, &log);
        wait_durable(&log, lsn);
    }
    log.close();
    let segments = file_names(dir.path()).len() as u64;
    assert!(segments > 3, "only {segments} segments");
    assert_eq!(log.current_segment(), segments);
    let (r, report) = recover_ok(dir.path());
    assert_eq!(view(&r, 100), view(&e, 100));
    assert_eq!(report.next_segment, segments + 1);
    assert!(disk_bytes(dir.path()) > 0);
}

// ----- group commit and fsync modes -------------------------------------------------------

#[test]
fn concurrent_appends_share_writes_and_every_lsn_becomes_durable() {
    const THREADS: u64 = 8;
    const EACH: u64 = 150;
    let dir = tempfile::tempdir().unwrap();
    let calls = Arc::new(AtomicU64::new(0));
    let seen = Arc::new(Mutex::new(Vec::<Lsn>::new()));
    let log = {
        let (calls, seen) = (calls.clone(), seen.clone());
        Log::open(
            dir.path(),
            1,
            options(FsyncMode::Always),
            Box::new(move |lsn| {
                calls.fetch_add(1, Ordering::Relaxed);
                seen.lock().unwrap().push(lsn);
            }),
        )
        .unwrap()
    };
    let lsns: Vec<Lsn> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..THREADS)
            .map(|t| {
                let log = &log;
                s.spawn(move || {
                    let mut mine = Vec::new();
                    for i in 0..EACH {
                        let id = 1 + t * EACH + i;
                        let lsn = log.append(std::iter::once(simple_put(id, "x")));
                        // As a connection does: wait until the record is safe, then reply.
                        wait_durable(log, lsn);
                        assert!(log.durable() >= lsn);
                        mine.push(lsn);
                    }
                    mine
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().unwrap())
            .collect()
    });
    let total = THREADS * EACH;
    let mut sorted = lsns.clone();
    sorted.sort();
    sorted.dedup();
    assert_eq!(sorted.len() as u64, total, "every append got its own lsn");
    assert_eq!(*sorted.last().unwrap(), total);
    assert_eq!(log.durable(), total);
    assert_eq!(log.records_written(), total);
    let seen = seen.lock().unwrap().clone();
    assert!(calls.load(Ordering::Relaxed) >= 1);
    assert!(
        seen.windows(2).all(|w| w[0] <= w[1]),
        "durable never goes back"
    );
    assert_eq!(seen.last().copied(), Some(total));
    assert!(seen.len() as u64 <= total, "at most one write per append");
    log.close();

    let (r, report) = recover_ok(dir.path());
    assert_eq!(report.records, total);
    assert_eq!(r.job_count() as u64, total);
    assert_eq!(r.next_id(), total + 1);
}

#[test]
fn an_append_of_several_changes_returns_the_lsn_of_the_last() {
    let dir = tempfile::tempdir().unwrap();
    let log = open(dir.path(), 1, LogOptions::default());
    assert_eq!(log.append(std::iter::empty()), 0);
    assert_eq!(
        log.append((1..=3).map(|id| simple_put(id, "three at once"))),
        3
    );
    assert_eq!(log.append(std::iter::once(simple_put(4, "one"))), 4);
    wait_durable(&log, 4);
    log.close();
}

#[test]
fn every_fsync_mode_recovers_everything_after_close() {
    for mode in [
        FsyncMode::Always,
        FsyncMode::Interval(Duration::from_millis(10)),
        FsyncMode::Interval(Duration::from_secs(3600)),
        FsyncMode::Never,
    ] {
        let dir = tempfile::tempdir().unwrap();
        let log = open(dir.path(), 1, options(mode));
        let (e, changes) = busy(&log);
        // In every mode a record is acknowledged once it is written, before close.
        wait_durable(&log, changes.len() as Lsn);
        log.close();
        let (r, report) = recover_ok(dir.path());
        assert_eq!(view(&r, 100), view(&e, 100), "{mode:?}");
        assert_eq!(report.records, changes.len() as u64, "{mode:?}");
    }
}

#[test]
fn records_are_on_disk_once_durable_even_without_close() {
    // A process crash (not a power loss) after the acknowledgement loses nothing, whatever
    // the fsync mode: the data has been written to the file.
    for mode in [
        FsyncMode::Always,
        FsyncMode::Interval(Duration::from_secs(3600)),
        FsyncMode::Never,
    ] {
        let dir = tempfile::tempdir().unwrap();
        let log = open(dir.path(), 1, options(mode));
        let lsn = log.append((1..=5).map(|id| simple_put(id, "acked")));
        wait_durable(&log, lsn);
        let copy = tempfile::tempdir().unwrap();
        fs::copy(segment(dir.path(), 1), segment(copy.path(), 1)).unwrap();
        let (r, _) = recover_ok(copy.path());
        assert_eq!(r.job_count(), 5, "{mode:?}");
        log.close();
    }
}

#[test]
fn appends_after_close_are_not_written() {
    let dir = tempfile::tempdir().unwrap();
    let log = open(dir.path(), 1, LogOptions::default());
    log.append(std::iter::once(simple_put(1, "kept")));
    log.close();
    log.close(); // twice is harmless
    log.append(std::iter::once(simple_put(2, "too late")));
    drop(log);
    let (r, _) = recover_ok(dir.path());
    assert_eq!(ids_of(&r, 10), [1]);
}

// ----- torn tails -------------------------------------------------------------------------

/// A closed log of five puts in segment 1; returns the changes.
fn five_puts(dir: &Path) -> Vec<Change> {
    let changes: Vec<Change> = (1..=5)
        .map(|id| simple_put(id, &format!("body of job {id}")))
        .collect();
    write_segment(dir, 1, &changes);
    changes
}

#[test]
fn a_record_cut_off_at_the_end_is_dropped_and_the_file_truncated() {
    let dir = tempfile::tempdir().unwrap();
    let changes = five_puts(dir.path());
    let sizes = record_sizes(&changes);
    let path = segment(dir.path(), 1);
    let full = fs::metadata(&path).unwrap().len();
    assert_eq!(full, HEADER_LEN + sizes.iter().sum::<u64>());
    let last_start = full - sizes[4];
    for cut in [1, 7, 8, 9, sizes[4] - 1] {
        let file = OpenOptions::new().write(true).open(&path).unwrap();
        file.set_len(last_start + cut).unwrap();
        drop(file);

        let (r, report) = recover_ok(dir.path());
        assert_eq!(ids_of(&r, 10), [1, 2, 3, 4], "cut {cut}");
        assert_eq!(report.torn_tail, Some((path.clone(), last_start, cut)));
        assert_eq!(report.records, 4);
        assert!(report.salvaged.is_empty());
        assert_eq!(fs::metadata(&path).unwrap().len(), last_start);
        // A second start finds a clean log.
        let (r, report) = recover_ok(dir.path());
        assert_eq!(ids_of(&r, 10), [1, 2, 3, 4]);
        assert!(report.torn_tail.is_none());
        // Put the record back for the next cut.
        fs::remove_file(&path).unwrap();
        five_puts(dir.path());
    }
}

#[test]
fn zeros_after_the_last_record_are_cut_without_a_torn_tail() {
    // What `always` mode leaves after a crash: zeros written ahead of the records.
    let dir = tempfile::tempdir().unwrap();
    five_puts(dir.path());
    let path = segment(dir.path(), 1);
    let good = fs::metadata(&path).unwrap().len();
    let mut f = OpenOptions::new().append(true).open(&path).unwrap();
    f.write_all(&[0u8; 4096]).unwrap();
    drop(f);
    let (r, report) = recover_ok(dir.path());
    assert_eq!(r.job_count(), 5);
    assert!(report.torn_tail.is_none(), "{:?}", report.torn_tail);
    assert_eq!(fs::metadata(&path).unwrap().len(), good);
}

#[test]
fn a_record_torn_inside_the_zeros_is_still_a_torn_tail() {
    let dir = tempfile::tempdir().unwrap();
    five_puts(dir.path());
    let path = segment(dir.path(), 1);
    let good = fs::metadata(&path).unwrap().len();
    // The first page of a record reached the disk, the rest of the zero-filled space not.
    let mut torn = Vec::new();
    encode_change(&simple_put(6, &"x".repeat(200)), &mut torn);
    torn.truncate(100);
    torn.resize(4096, 0);
    let mut f = OpenOptions::new().append(true).open(&path).unwrap();
    f.write_all(&torn).unwrap();
    drop(f);
    let (r, report) = recover_ok(dir.path());
    assert_eq!(r.job_count(), 5);
    assert_eq!(report.torn_tail, Some((path.clone(), good, 4096)));
    assert_eq!(fs::metadata(&path).unwrap().len(), good);
}

#[test]
fn in_always_mode_the_newest_segment_is_filled_ahead_and_cut_back_at_close() {
    let dir = tempfile::tempdir().unwrap();
    let log = open(dir.path(), 1, options(FsyncMode::Always));
    let changes: Vec<Change> = (1..=5).map(|id| simple_put(id, "acked")).collect();
    let records: u64 = record_sizes(&changes).iter().sum();
    let lsn = log.append(changes.into_iter());
    wait_durable(&log, lsn);
    let path = segment(dir.path(), 1);
    let ahead = fs::metadata(&path).unwrap().len();
    assert!(
        ahead > HEADER_LEN + records,
        "{ahead} bytes: no zeros ahead of {records} bytes of records"
    );
    // A crash now: the copy recovers every acknowledged record and no torn tail.
    let copy = tempfile::tempdir().unwrap();
    fs::copy(&path, segment(copy.path(), 1)).unwrap();
    let (r, report) = recover_ok(copy.path());
    assert_eq!(r.job_count(), 5);
    assert!(report.torn_tail.is_none());
    log.close();
    assert_eq!(fs::metadata(&path).unwrap().len(), HEADER_LEN + records);
}

#[test]
fn in_always_mode_only_the_newest_segment_ends_in_zeros() {
    // Older segments are read strictly (zeros there are damage), so rolling over must cut
    // them first. Not closed: what a crash leaves must recover without salvage.
    let dir = tempfile::tempdir().unwrap();
    let log = open(
        dir.path(),
        1,
        LogOptions {
            fsync: FsyncMode::Always,
            segment_bytes: 300,
            bodies_in_log: false,
        },
    );
    let puts: Vec<Change> = (1..=20)
        .map(|id| simple_put(id, "a body of forty bytes or so....."))
        .collect();
    // The writer rolls over after a batch is durable, when the segment has reached its
    // size; each put here is its own batch. Where the last roll-over leaves the newest
    // segment is known in advance, so the test waits for exactly that segment: a check of
    // "no successor yet" alone can run just before a roll-over that is still due.
    let mut expected = 1;
    let mut len = HEADER_LEN;
    for size in record_sizes(&puts) {
        len += size;
        if len >= 300 {
            expected += 1;
            len = HEADER_LEN;
        }
    }
    for put in puts {
        let lsn = log.append(std::iter::once(put));
        wait_durable(&log, lsn);
    }
    let deadline = Instant::now() + Duration::from_secs(20);
    while log.current_segment() != expected {
        assert!(
            log.current_segment() < expected && Instant::now() < deadline,
            "the roll-overs did not end at segment {expected}: {}",
            log.current_segment()
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    let newest = expected;
    assert!(!segment(dir.path(), newest + 1).exists());
    assert!(newest > 3, "only {newest} segments");
    let copy = tempfile::tempdir().unwrap();
    for seq in 1..=newest {
        fs::copy(segment(dir.path(), seq), segment(copy.path(), seq)).unwrap();
    }
    let (r, report) = recover_ok(copy.path());
    assert_eq!(r.job_count(), 20);
    assert!(report.torn_tail.is_none());
    log.close();
}

#[test]
fn garbage_after_the_last_record_is_a_torn_tail() {
    let dir = tempfile::tempdir().unwrap();
    five_puts(dir.path());
    let path = segment(dir.path(), 1);
    let good = fs::metadata(&path).unwrap().len();
    // A plausible header (a length that fits) with a wrong checksum, then noise.
    let mut junk = Vec::new();
    junk.extend_from_slice(&20u32.to_le_bytes());
    junk.extend_from_slice(&0xdead_beefu32.to_le_bytes());
    let mut x: u32 = 12345;
    for _ in 0..500 {
        x = x.wrapping_mul(1_103_515_245).wrapping_add(12345);
        junk.push((x >> 16) as u8);
    }
    let mut f = OpenOptions::new().append(true).open(&path).unwrap();
    f.write_all(&junk).unwrap();
    drop(f);
    let (r, report) = recover_ok(dir.path());
    assert_eq!(r.job_count(), 5);
    assert_eq!(
        report.torn_tail,
        Some((path.clone(), good, junk.len() as u64))
    );
    assert_eq!(fs::metadata(&path).unwrap().len(), good);
    assert!(recover_ok(dir.path()).1.torn_tail.is_none());
}

#[test]
fn a_newest_segment_an_older_version_left_without_its_header_is_removed() {
    // Older versions created segments in place, so a crash could leave one without its
    // whole header. Its predecessor does not name it (no end record): that is the sign.
    let dir = tempfile::tempdir().unwrap();
    five_puts(dir.path());
    let torn = segment(dir.path(), 2);
    fs::write(&torn, b"JYLO").unwrap();
    let (r, report) = recover_ok(dir.path());
    assert_eq!(r.job_count(), 5);
    assert_eq!(report.torn_tail, Some((torn.clone(), 0, 4)));
    assert!(!torn.exists());
    // Its number is used again, so the segments stay without a gap.
    assert_eq!(report.next_segment, 2);
    // Starting the log there works, and the next recovery is clean.
    let log = open(dir.path(), report.next_segment, LogOptions::default());
    let lsn = log.append(std::iter::once(simple_put(6, "after")));
    wait_durable(&log, lsn);
    log.close();
    let (r, report) = recover_ok(dir.path());
    assert_eq!(r.job_count(), 6);
    assert!(report.torn_tail.is_none());
}

// ----- damage in the middle ---------------------------------------------------------------

#[test]
fn damage_followed_by_good_records_is_an_error_naming_file_and_offset() {
    let dir = tempfile::tempdir().unwrap();
    let changes = five_puts(dir.path());
    let sizes = record_sizes(&changes);
    let path = segment(dir.path(), 1);
    let second = HEADER_LEN + sizes[0];
    let mut data = fs::read(&path).unwrap();
    data[(second + 20) as usize] ^= 0x40; // inside the second record's payload
    fs::write(&path, &data).unwrap();

    let err = recover_engine(dir.path(), false).expect_err("corruption must stop recovery");
    match &err {
        RecoveryError::Corrupt {
            path: p, offset, ..
        } => {
            assert_eq!(p, &path);
            assert_eq!(*offset, second);
        }
        other => panic!("expected Corrupt, got {other:?}"),
    }
    let msg = err.to_string();
    assert!(msg.contains(&path.display().to_string()), "{msg}");
    assert!(msg.contains(&format!("offset {second}")), "{msg}");
    assert!(msg.contains("--salvage"), "{msg}");
    // Nothing was truncated or deleted.
    assert_eq!(fs::read(&path).unwrap(), data);

    let (r, report) = recover_engine(dir.path(), true).expect("salvage recovers");
    assert_eq!(ids_of(&r, 10), [1, 3, 4, 5]);
    assert_eq!(report.salvaged, vec![(path.clone(), second, sizes[1])]);
    assert!(report.torn_tail.is_none());
    assert_eq!(report.records, 4);
    assert_eq!(r.next_id(), 6);
}

#[test]
fn a_damaged_length_is_caught_too() {
    let dir = tempfile::tempdir().unwrap();
    let changes = five_puts(dir.path());
    let sizes = record_sizes(&changes);
    let path = segment(dir.path(), 1);
    let third = HEADER_LEN + sizes[0] + sizes[1];
    let mut data = fs::read(&path).unwrap();
    // An impossible length (0) and a huge one.
    for len in [0u32, u32::MAX] {
        data[third as usize..third as usize + 4].copy_from_slice(&len.to_le_bytes());
        fs::write(&path, &data).unwrap();
        match recover_engine(dir.path(), false) {
            Err(RecoveryError::Corrupt { offset, .. }) => assert_eq!(offset, third),
            other => panic!("length {len}: expected Corrupt, got {other:?}"),
        }
        let (r, report) = recover_engine(dir.path(), true).unwrap();
        assert_eq!(ids_of(&r, 10), [1, 2, 4, 5]);
        assert_eq!(report.salvaged, vec![(path.clone(), third, sizes[2])]);
    }
}

#[test]
fn damage_in_an_older_segment_is_an_error_even_at_its_end() {
    let dir = tempfile::tempdir().unwrap();
    let changes = five_puts(dir.path());
    write_segment(dir.path(), 2, &[simple_put(6, "in segment two")]);
    let sizes = record_sizes(&changes);
    let path = segment(dir.path(), 1);
    // Segment 1 ends with the record naming segment 2; drop it to cut the last put.
    let full = fs::metadata(&path).unwrap().len() - SEGMENT_END_RECORD;
    // Cut the last record of segment 1: that is not a crash tail, as segment 2 follows.
    let file = OpenOptions::new().write(true).open(&path).unwrap();
    file.set_len(full - 3).unwrap();
    drop(file);
    match recover_engine(dir.path(), false) {
        Err(RecoveryError::Corrupt {
            path: p, offset, ..
        }) => {
            assert_eq!(p, path);
            assert_eq!(offset, full - sizes[4]);
        }
        other => panic!("expected Corrupt, got {other:?}"),
    }
    // Not truncated.
    assert_eq!(fs::metadata(&path).unwrap().len(), full - 3);
    let (r, report) = recover_engine(dir.path(), true).unwrap();
    assert_eq!(ids_of(&r, 10), [1, 2, 3, 4, 6]);
    assert_eq!(
        report.salvaged,
        vec![(path.clone(), full - sizes[4], sizes[4] - 3)]
    );
    assert!(report.torn_tail.is_none());
}

#[test]
fn zeros_at_the_end_of_an_older_segment_are_an_error() {
    let dir = tempfile::tempdir().unwrap();
    five_puts(dir.path());
    write_segment(dir.path(), 2, &[simple_put(6, "in segment two")]);
    let path = segment(dir.path(), 1);
    let full = fs::metadata(&path).unwrap().len();
    let mut f = OpenOptions::new().append(true).open(&path).unwrap();
    f.write_all(&[0u8; 64]).unwrap();
    drop(f);
    match recover_engine(dir.path(), false) {
        Err(RecoveryError::Corrupt {
            path: p, offset, ..
        }) => {
            assert_eq!(p, path);
            assert_eq!(offset, full);
        }
        other => panic!("expected Corrupt, got {other:?}"),
    }
}

#[test]
fn a_bad_segment_header_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    five_puts(dir.path());
    write_segment(dir.path(), 2, &[simple_put(6, "x")]);
    let path = segment(dir.path(), 1);
    let mut data = fs::read(&path).unwrap();
    data[0] = b'X';
    fs::write(&path, &data).unwrap();
    match recover_engine(dir.path(), false) {
        Err(RecoveryError::Corrupt {
            path: p, offset, ..
        }) => {
            assert_eq!(p, path);
            assert_eq!(offset, 0);
        }
        other => panic!("expected Corrupt, got {other:?}"),
    }
    // Salvage skips the header, says so, and reads the records after it.
    let (r, report) = recover_engine(dir.path(), true).unwrap();
    assert_eq!(ids_of(&r, 10), [1, 2, 3, 4, 5, 6]);
    assert_eq!(report.salvaged, vec![(path.clone(), 0, HEADER_LEN)]);

    // A segment whose header names another sequence number is not trusted either.
    let dir = tempfile::tempdir().unwrap();
    five_puts(dir.path());
    write_segment(dir.path(), 2, &[simple_put(6, "x")]);
    fs::copy(segment(dir.path(), 2), segment(dir.path(), 1)).unwrap();
    assert!(matches!(
        recover_engine(dir.path(), false),
        Err(RecoveryError::Corrupt { offset: 0, .. })
    ));
}

// ----- snapshots --------------------------------------------------------------------------

#[test]
fn a_snapshot_replaces_older_segments_and_recovers_the_same_state() {
    let dir = tempfile::tempdir().unwrap();
    let log = open(dir.path(), 1, LogOptions::default());
    let (mut e, _) = busy(&log);
    assert!(log.request_snapshot(e.snapshot(), e.next_id()));
    // Appends keep flowing into the new segment meanwhile.
    let a = e.queue_id(b"alpha").unwrap();
    let after = put(&mut e, a, 3, 0, "after the snapshot");
    commit(&mut e, &log);
    let some = e.peek_ready(a).unwrap().id;
    assert!(e.reserve_job(9, some, Lease::JobTtr, T0));
    assert!(e.bury(9, some, 1));
    let lsn = commit(&mut e, &log);
    wait_durable(&log, lsn);
    wait_snapshot(&log);
    assert_eq!(log.current_segment(), 2);
    assert_eq!(log.oldest_segment(), 2);
    assert_eq!(
        file_names(dir.path()),
        ["seg-0000000002.log", "snap-0000000002.snap"]
    );
    log.close();

    let (r, report) = recover_ok(dir.path());
    assert_eq!(report.snapshot, Some(2));
    assert_eq!(report.next_segment, 3);
    assert_eq!(report.next_id, e.next_id() - 1);
    assert_eq!(view(&r, 100), view(&e, 100));
    assert_eq!(
        r.job(after).unwrap().body.in_memory(),
        Some(&b"after the snapshot"[..])
    );
    assert!(report.torn_tail.is_none());
}

#[test]
fn ids_continue_after_a_snapshot_even_when_every_job_was_deleted() {
    let dir = tempfile::tempdir().unwrap();
    let log = open(dir.path(), 1, LogOptions::default());
    let mut e = EngineCore::new();
    let queue = q(&mut e, "q");
    for _ in 0..7 {
        let id = put(&mut e, queue, 1, 0, "short-lived");
        assert!(e.delete(0, id));
    }
    commit(&mut e, &log);
    assert_eq!(e.next_id(), 8);
    assert!(log.request_snapshot(e.snapshot(), e.next_id()));
    wait_snapshot(&log);
    log.close();
    let (mut r, report) = recover_ok(dir.path());
    assert_eq!(r.job_count(), 0);
    assert_eq!(report.next_id, 8);
    assert_eq!(report.snapshot, Some(2));
    let queue = q(&mut r, "q");
    assert_eq!(put(&mut r, queue, 1, 0, "next"), 8);
}

#[test]
fn a_second_snapshot_replaces_the_first() {
    let dir = tempfile::tempdir().unwrap();
    let log = open(dir.path(), 1, LogOptions::default());
    let mut e = EngineCore::new();
    let queue = q(&mut e, "q");
    for round in 0..3 {
        put(&mut e, queue, round, 0, "j");
        commit(&mut e, &log);
        assert!(log.request_snapshot(e.snapshot(), e.next_id()));
        wait_snapshot(&log);
    }
    put(&mut e, queue, 9, 0, "last");
    let lsn = commit(&mut e, &log);
    wait_durable(&log, lsn);
    log.close();
    assert_eq!(
        file_names(dir.path()),
        ["seg-0000000004.log", "snap-0000000004.snap"]
    );
    let (r, report) = recover_ok(dir.path());
    assert_eq!(report.snapshot, Some(4));
    assert_eq!(view(&r, 10), view(&e, 10));
}

#[test]
fn leftover_tmp_files_are_removed() {
    let dir = tempfile::tempdir().unwrap();
    five_puts(dir.path());
    let tmp = dir.path().join("snap-0000000002.snap.tmp");
    fs::write(&tmp, b"JYSNAP01 half a snapshot").unwrap();
    let unrelated = dir.path().join("notes.txt");
    fs::write(&unrelated, b"not ours").unwrap();
    let (r, report) = recover_ok(dir.path());
    assert_eq!(r.job_count(), 5);
    assert_eq!(report.snapshot, None);
    assert!(!tmp.exists());
    assert!(
        unrelated.exists(),
        "files jobyard does not own are left alone"
    );
}

#[test]
fn segments_and_snapshots_older_than_the_newest_snapshot_are_removed_at_recovery() {
    // A crash after snapshot 3 was renamed into place but before the older files were
    // deleted leaves them behind. They must be neither replayed nor kept.
    let dir = tempfile::tempdir().unwrap();
    let log = open(dir.path(), 1, LogOptions::default());
    let mut e = EngineCore::new();
    let queue = q(&mut e, "q");
    let gone = put(&mut e, queue, 1, 0, "deleted before the snapshot");
    let kept = put(&mut e, queue, 1, 0, "kept");
    commit(&mut e, &log);
    assert!(log.request_snapshot(e.snapshot(), e.next_id()));
    wait_snapshot(&log);
    let old_snapshot = fs::read(snapshot(dir.path(), 2)).unwrap();
    let old_segment = fs::read(segment(dir.path(), 2)).unwrap();
    assert!(e.delete(0, gone));
    commit(&mut e, &log);
    assert!(log.request_snapshot(e.snapshot(), e.next_id()));
    wait_snapshot(&log);
    log.close();
    // Put the obsolete files back, plus an older segment that replays `gone` again.
    fs::write(snapshot(dir.path(), 2), &old_snapshot).unwrap();
    fs::write(segment(dir.path(), 2), &old_segment).unwrap();
    write_segment(dir.path(), 1, &[simple_put(gone, "stale")]);
    assert_eq!(file_names(dir.path()).len(), 5);

    let (r, report) = recover_ok(dir.path());
    assert_eq!(report.snapshot, Some(3));
    assert_eq!(ids_of(&r, 10), [kept]);
    assert_eq!(
        file_names(dir.path()),
        ["seg-0000000003.log", "snap-0000000003.snap"]
    );
}

#[test]
fn a_damaged_snapshot_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let log = open(dir.path(), 1, LogOptions::default());
    let mut e = EngineCore::new();
    let queue = q(&mut e, "q");
    for i in 0..5 {
        put(&mut e, queue, i, 0, "in the snapshot");
    }
    commit(&mut e, &log);
    assert!(log.request_snapshot(e.snapshot(), e.next_id()));
    wait_snapshot(&log);
    log.close();
    let path = snapshot(dir.path(), 2);
    let good = fs::read(&path).unwrap();

    // A flipped byte inside a record.
    let mut data = good.clone();
    data[HEADER_LEN as usize + 8 + 30] ^= 1;
    fs::write(&path, &data).unwrap();
    match recover_engine(dir.path(), false) {
        Err(RecoveryError::Corrupt { path: p, .. }) => assert_eq!(p, path),
        other => panic!("expected Corrupt, got {other:?}"),
    }
    let (r, report) = recover_engine(dir.path(), true).unwrap();
    assert_eq!(r.job_count(), 4);
    assert_eq!(report.salvaged.len(), 1);

    // No end marker (cut short): an error; salvage reads the whole records it still has.
    fs::write(&path, &good[..good.len() - 5]).unwrap();
    assert!(matches!(
        recover_engine(dir.path(), false),
        Err(RecoveryError::Corrupt { .. })
    ));
    let (r, report) = recover_engine(dir.path(), true).unwrap();
    assert_eq!(r.job_count(), 5);
    assert_eq!(report.salvaged.len(), 1, "the broken end is reported");

    // A damaged header: an error, and salvage skips it and reads the records.
    let mut data = good.clone();
    data[3] ^= 0xff;
    fs::write(&path, &data).unwrap();
    match recover_engine(dir.path(), false) {
        Err(RecoveryError::Corrupt {
            path: p, offset, ..
        }) => {
            assert_eq!((p, offset), (path.clone(), 0))
        }
        other => panic!("expected Corrupt, got {other:?}"),
    }
    let (r, report) = recover_engine(dir.path(), true).unwrap();
    assert_eq!(r.job_count(), 5);
    assert_eq!(report.salvaged, vec![(path.clone(), 0, HEADER_LEN + 8)]);

    // Restored, it recovers.
    fs::write(&path, &good).unwrap();
    let (r, _) = recover_ok(dir.path());
    assert_eq!(view(&r, 10), view(&e, 10));
}

#[test]
fn disk_bytes_counts_segments_and_snapshots() {
    let dir = tempfile::tempdir().unwrap();
    assert_eq!(disk_bytes(dir.path()), 0);
    five_puts(dir.path());
    let seg = fs::metadata(segment(dir.path(), 1)).unwrap().len();
    fs::write(dir.path().join("unrelated"), [0u8; 1000]).unwrap();
    assert_eq!(disk_bytes(dir.path()), seg);
}

// ----- the directory lock -----------------------------------------------------------------

#[test]
fn only_one_holder_of_a_directory_lock_at_a_time() {
    let dir = tempfile::tempdir().unwrap();
    let other = tempfile::tempdir().unwrap();
    let first = DirLock::acquire(dir.path()).unwrap();
    let err = DirLock::acquire(dir.path()).expect_err("second lock");
    assert_eq!(err.kind(), std::io::ErrorKind::WouldBlock);
    // Another directory is independent.
    let _elsewhere = DirLock::acquire(other.path()).unwrap();
    // Still held from another thread's point of view.
    let path = dir.path().to_path_buf();
    assert!(std::thread::spawn(move || DirLock::acquire(&path).is_err())
        .join()
        .unwrap());
    drop(first);
    let again = DirLock::acquire(dir.path()).unwrap();
    // The lock file does not disturb recovery.
    let (e, _) = recover_ok(dir.path());
    assert_eq!(e.job_count(), 0);
    drop(again);
}

// ----- record encoding limits -------------------------------------------------------------

#[test]
fn long_queue_names_and_unique_keys_survive_a_restart() {
    // Gearman function names are only bounded by the packet size (64 MiB by default), so a
    // queue name, like a unique key, can be longer than a u16 length can say.
    let long_name = vec![b'f'; 70_000];
    let sizes = [0usize, 1, 200, 65_533, 65_534, 65_535, 65_536, 70_000];
    let mut changes = Vec::new();
    for (i, &n) in sizes.iter().enumerate() {
        changes.push(Change::Put {
            id: i as JobId + 1,
            queue: Bytes::from(vec![b'q'; n.max(1)]),
            pri: 1,
            ttr: 1,
            delay: 0,
            created: T0,
            state: jobyard_engine::PutState::Ready,
            unique: Some(Bytes::from(vec![b'u'; n])),
            attrs: None,
            attempt: 0,
            body: Bytes::from_static(b"b"),
        });
    }
    changes.push(Change::Put {
        id: 100,
        queue: Bytes::from(long_name.clone()),
        pri: 1,
        ttr: 1,
        delay: 0,
        created: T0,
        state: jobyard_engine::PutState::Buried,
        unique: None,
        attrs: None,
        attempt: 0,
        body: Bytes::from_static(b"b"),
    });
    for change in &changes {
        let mut frame = Vec::new();
        encode_change(change, &mut frame);
        assert_eq!(
            jobyard_storage::decode_change(&frame[8..]).as_ref(),
            Ok(change),
            "round trip"
        );
    }
    let dir = tempfile::tempdir().unwrap();
    write_segment(dir.path(), 1, &changes);
    let (r, report) = recover_ok(dir.path());
    assert_eq!(report.records, changes.len() as u64);
    assert!(report.torn_tail.is_none());
    let q = r
        .queue_id(&long_name)
        .expect("the long-named queue is back");
    assert_eq!(r.peek_buried(q).unwrap().id, 100);
    for (i, &n) in sizes.iter().enumerate() {
        let q = r.queue_id(&vec![b'q'; n.max(1)]).unwrap();
        assert_eq!(
            r.find_unique(q, &vec![b'u'; n]),
            Some(i as JobId + 1),
            "size {n}"
        );
    }
}

#[test]
fn a_torn_multi_megabyte_record_is_dropped_in_linear_time() {
    // Looking for a readable record after damage tries every offset. It used to checksum
    // first, so every offset whose length field fit cost a CRC over the rest of the file:
    // this 32 MiB torn body took about a minute in a debug build (8 MiB: 2 s; cubic).
    let mut body = Vec::with_capacity(32 << 20);
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    while body.len() < (32 << 20) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        body.extend_from_slice(&x.to_le_bytes());
    }
    let mut big = simple_put(2, "");
    if let Change::Put { body: b, .. } = &mut big {
        *b = Bytes::from(body);
    }
    let dir = tempfile::tempdir().unwrap();
    write_segment(dir.path(), 1, &[simple_put(1, "first"), big]);
    let path = segment(dir.path(), 1);
    let len = fs::metadata(&path).unwrap().len();
    let file = OpenOptions::new().write(true).open(&path).unwrap();
    file.set_len(len - 100).unwrap();
    drop(file);
    let started = Instant::now();
    let (r, report) = recover_ok(dir.path());
    let took = started.elapsed();
    assert_eq!(ids_of(&r, 5), [1]);
    let (_, offset, _) = report.torn_tail.expect("torn tail");
    assert_eq!(fs::metadata(&path).unwrap().len(), offset);
    assert!(took < Duration::from_secs(20), "recovery took {took:?}");
}

// ----- snapshots taken while the engine keeps changing ------------------------------------

/// A small deterministic generator (xorshift64*), so a failing seed repeats.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) % n
    }
}

/// One random durable operation: put (sometimes delayed), delete, reserve, release (with
/// or without delay), bury, kick a queue or one job.
fn random_op(e: &mut EngineCore, rng: &mut Rng, queues: &[QueueId], n: u64) {
    const CONN: u64 = 7;
    let id = 1 + rng.below(e.next_id().max(2) - 1);
    let queue = queues[rng.below(queues.len() as u64) as usize];
    let pri = rng.below(4) as u32;
    match rng.below(8) {
        0 | 1 => {
            let delay = if rng.below(3) == 0 { 30 } else { 0 };
            put(e, queue, pri, delay, &format!("job {n}"));
        }
        2 => {
            e.delete(CONN, id);
        }
        3 => {
            e.reserve_job(CONN, id, Lease::JobTtr, T0);
        }
        4 => {
            let delay = if rng.below(2) == 0 { 20 } else { 0 };
            e.release(CONN, id, pri, delay, T0);
        }
        5 => {
            if e.reserve_job(CONN, id, Lease::JobTtr, T0) {
                e.bury(CONN, id, pri);
            }
        }
        6 => {
            e.kick(queue, 1 + rng.below(3), T0);
        }
        _ => {
            e.kick_job(id, T0);
        }
    }
}

/// The server copies a large engine into a snapshot a chunk at a time, letting commands
/// change jobs between chunks. Whatever states the copied jobs were in, recovery (the
/// snapshot, then every record after the cut) must rebuild exactly the final state.
#[test]
fn a_snapshot_copied_in_chunks_while_jobs_change_recovers_the_final_state() {
    for seed in 1..=40u64 {
        let dir = tempfile::tempdir().unwrap();
        let log = open(dir.path(), 1, options(FsyncMode::Never));
        let mut e = EngineCore::new();
        let queues = [q(&mut e, "a"), q(&mut e, "b"), q(&mut e, "c")];
        let mut rng = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
        for n in 0..300 {
            random_op(&mut e, &mut rng, &queues, n);
        }
        commit(&mut e, &log);

        let feed = log
            .begin_snapshot(e.next_id())
            .expect("no snapshot running");
        let order = e.snapshot_order();
        for chunk in order.chunks(1 + rng.below(16) as usize) {
            for n in 0..rng.below(6) {
                random_op(&mut e, &mut rng, &queues, 1000 + n);
            }
            commit(&mut e, &log);
            assert!(feed.send(e.snapshot_of(chunk)));
        }
        feed.finish();
        for n in 0..50 {
            random_op(&mut e, &mut rng, &queues, 2000 + n);
        }
        let lsn = commit(&mut e, &log);
        wait_durable(&log, lsn);
        wait_snapshot(&log);
        log.close();

        let (r, report) = recover_ok(dir.path());
        assert_eq!(report.snapshot, Some(2), "seed {seed}");
        assert_eq!(view(&r, e.next_id()), view(&e, e.next_id()), "seed {seed}");
        assert_eq!(r.next_id(), e.next_id(), "seed {seed}");
    }
}

#[test]
fn an_abandoned_snapshot_leaves_the_log_whole() {
    let dir = tempfile::tempdir().unwrap();
    let log = open(dir.path(), 1, LogOptions::default());
    let (mut e, _) = busy(&log);
    let feed = log.begin_snapshot(e.next_id()).unwrap();
    assert!(log.begin_snapshot(e.next_id()).is_none(), "one at a time");
    assert!(feed.send(e.snapshot_of(&e.snapshot_order()[..3])));
    drop(feed); // the feeder gave up before finishing
    let a = e.queue_id(b"alpha").unwrap();
    put(&mut e, a, 1, 0, "after");
    let lsn = commit(&mut e, &log);
    wait_durable(&log, lsn);
    wait_snapshot(&log);
    log.close();
    assert!(
        !file_names(dir.path()).iter().any(|f| f.contains("snap")),
        "no snapshot file, not even a temporary one: {:?}",
        file_names(dir.path())
    );
    let (r, report) = recover_ok(dir.path());
    assert_eq!(report.snapshot, None);
    assert_eq!(view(&r, 100), view(&e, 100));
}

/// In `never` mode the writer thread stops waking on its timer once it has found nothing
/// to do twice in a row; a record appended after that, which nobody waits for, must still be
/// written: the append wakes the dozing writer.
#[test]
fn never_mode_writes_a_record_nobody_waits_for_after_an_idle_spell() {
    let dir = tempfile::tempdir().unwrap();
    let log = open(dir.path(), 1, options(FsyncMode::Never));
    let mut engine = EngineCore::new();
    let tube = q(&mut engine, "idle");
    let first = put(&mut engine, tube, 1, 0, "before");
    wait_durable(&log, commit(&mut engine, &log));
    // At this write rate the writer sweeps once a second; the first sweep starts the
    // writeback, the next two find nothing to do, and it dozes.
    std::thread::sleep(Duration::from_millis(3500));
    let second = put(&mut engine, tube, 1, 0, "after");
    let lsn = commit(&mut engine, &log);
    let deadline = Instant::now() + Duration::from_secs(20);
    while log.durable() < lsn {
        assert!(
            Instant::now() < deadline,
            "the dozing writer never wrote the record"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    log.close();
    let (recovered, _) = recover_ok(dir.path());
    assert_eq!(ids_of(&recovered, second), vec![first, second]);
}
