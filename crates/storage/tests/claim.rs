//! `Log::append_claiming`: a lone transaction written and synced by its own caller while
//! the writer thread is idle, and everything else still going through the writer thread's
//! group commit. Real files, a real writer thread; write batches counted, never timed.

use std::path::Path;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use bytes::Bytes;
use jobyard_engine::JobId;
use jobyard_storage::{recover, sync_stats, Change, FsyncMode, Log, LogOptions, Lsn};

fn open(dir: &Path, fsync: FsyncMode) -> Log {
    let options = LogOptions {
        fsync,
        ..LogOptions::default()
    };
    Log::open(dir, 1, options, Box::new(|_| {})).expect("open log")
}

fn put(id: JobId) -> Change {
    Change::Put {
        id,
        queue: Bytes::from_static(b"q"),
        pri: 1,
        ttr: 60,
        delay: 0,
        created: 1_700_000_000_000,
        state: jobyard_engine::PutState::Ready,
        unique: None,
        attrs: None,
        attempt: 0,
        body: Bytes::from_static(b"body"),
    }
}

/// Waits (bounded) for the writer thread to make `lsn` durable.
fn wait_durable(log: &Log, lsn: Lsn) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while log.durable() < lsn {
        assert!(Instant::now() < deadline, "lsn {lsn} never became durable");
        std::thread::sleep(Duration::from_millis(1));
    }
}

fn batches(log: &Log) -> u64 {
    log.stats().batches.load(Ordering::Relaxed)
}

/// The process's fsyncs of a log (other tests' logs count too: compare with `>`).
fn fsyncs() -> u64 {
    sync_stats().fsyncs.load(Ordering::Relaxed)
}

fn recovered_puts(dir: &Path) -> Vec<JobId> {
    let mut ids = Vec::new();
    recover(dir, false, |change| {
        if let Change::Put { id, .. } = change {
            ids.push(id);
        }
    })
    .expect("recover");
    ids
}

/// Attempts allowed for a claim to stay the caller's. A claim only spares waking the
/// writer thread: if the thread is still going round its loop after an earlier batch (or
/// just started), it takes the claimed records over, and the attempt goes its way.
const ATTEMPTS: u64 = 200;

/// Between attempts: a log that wrote many batches within a few ms is busy and claims
/// nothing (`claim::BUSY_BATCHES`); attempts this far apart keep it quiet.
const PAUSE: Duration = Duration::from_millis(3);

#[test]
fn a_lone_claimed_append_is_synced_by_its_caller_alone() {
    let dir = tempfile::tempdir().unwrap();
    let log = open(dir.path(), FsyncMode::Always);

    let mut synced_inline = None;
    for id in 1..=ATTEMPTS {
        let claim = log.append_claiming([put(id)].into_iter());
        let lsn = claim.lsn();
        let (batches_before, syncs_before) = (batches(&log), fsyncs());
        if claim.sync() {
            // Acknowledgeable at once, after one write and one sync of its own.
            assert!(log.durable() >= lsn);
            assert_eq!(batches(&log), batches_before + 1);
            assert!(fsyncs() > syncs_before);
            synced_inline = Some(id);
            break;
        }
        wait_durable(&log, lsn);
        std::thread::sleep(PAUSE);
    }
    let last = synced_inline.expect("no claim was ever synced by its caller");

    drop(log);
    assert_eq!(recovered_puts(dir.path()), (1..=last).collect::<Vec<_>>());
}

#[test]
fn an_append_behind_a_claim_takes_both_to_the_writer_thread_in_one_batch() {
    let dir = tempfile::tempdir().unwrap();
    let log = open(dir.path(), FsyncMode::Always);

    let mut shared = false;
    for attempt in 0..ATTEMPTS {
        let batches_before = batches(&log);
        let claim = log.append_claiming([put(attempt * 2 + 1)].into_iter());
        let claimed = claim.is_claimed();
        let second = log.append([put(attempt * 2 + 2)].into_iter());
        // The claim is no longer the caller's: it must not write the writer's batch.
        assert!(!claim.sync());
        wait_durable(&log, second);
        if claimed && batches(&log) == batches_before + 1 {
            shared = true;
            break;
        }
        std::thread::sleep(PAUSE);
    }
    assert!(shared, "two transactions never shared one write and sync");
}

#[test]
fn a_second_claim_while_one_is_open_is_not_claimed_and_shares_the_batch() {
    let dir = tempfile::tempdir().unwrap();
    let log = open(dir.path(), FsyncMode::Always);

    let mut shared = false;
    for attempt in 0..ATTEMPTS {
        let batches_before = batches(&log);
        let first = log.append_claiming([put(attempt * 2 + 1)].into_iter());
        let second = log.append_claiming([put(attempt * 2 + 2)].into_iter());
        assert!(!second.is_claimed(), "only a lone transaction is claimed");
        let (claimed, lsn) = (first.is_claimed(), second.lsn());
        assert!(!second.sync());
        assert!(!first.sync());
        wait_durable(&log, lsn);
        if claimed && batches(&log) == batches_before + 1 {
            shared = true;
            break;
        }
        std::thread::sleep(PAUSE);
    }
    assert!(shared, "two transactions never shared one write and sync");
}

#[test]
fn a_claim_dropped_unsynced_is_written_by_the_writer_thread() {
    let dir = tempfile::tempdir().unwrap();
    let log = open(dir.path(), FsyncMode::Always);

    let claim = log.append_claiming([put(1)].into_iter());
    let lsn = claim.lsn();
    drop(claim);
    wait_durable(&log, lsn);
    drop(log);
    assert_eq!(recovered_puts(dir.path()), vec![1]);
}

#[test]
fn nothing_is_claimed_when_replies_need_no_fsync() {
    for mode in [
        FsyncMode::Never,
        FsyncMode::Interval(Duration::from_secs(1)),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let log = open(dir.path(), mode);
        let claim = log.append_claiming([put(1)].into_iter());
        assert!(!claim.is_claimed(), "{mode:?}");
        let lsn = claim.lsn();
        assert!(!claim.sync());
        assert!(log.write_through(lsn));
        assert!(log.durable() >= lsn);
    }
}
