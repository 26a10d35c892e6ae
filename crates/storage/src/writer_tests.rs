//! Who writes and syncs a batch in `always` mode: the waiter itself when no batch is being
//! written, the writer thread (one batch for everything pending) when one is.

use std::time::{Duration, Instant};

use super::*;

fn open_always(dir: &Path) -> Log {
    let options = LogOptions {
        fsync: FsyncMode::Always,
        ..LogOptions::default()
    };
    Log::open(dir, 1, options, Box::new(|_| {})).expect("open log")
}

fn delete(id: u64) -> std::iter::Once<Change> {
    std::iter::once(Change::Delete { id })
}

fn synced_batches(log: &Log) -> u64 {
    log.stats().synced_batches.load(Ordering::Relaxed)
}

/// Waits, bounded, for the writer thread to make `lsn` durable (no timing is asserted:
/// the bound only keeps a broken writer from hanging the test run).
fn wait_for_writer(log: &Log, lsn: Lsn) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while log.durable() < lsn {
        assert!(Instant::now() < deadline, "lsn {lsn} never became durable");
        std::thread::sleep(Duration::from_millis(1));
    }
}

#[test]
fn a_lone_append_is_synced_by_its_waiter_before_it_is_durable() {
    let dir = tempfile::tempdir().unwrap();
    let log = open_always(dir.path());
    // The writer thread, woken by each append, may now and then get to the batch first
    // (then the waiter waits for it, as under load); the waiter must win most of the time.
    let mut by_waiter = 0;
    for id in 1..=20 {
        let before = synced_batches(&log);
        let lsn = log.append(delete(id));
        if log.write_through(lsn) {
            by_waiter += 1;
            assert!(log.durable() >= lsn);
            assert!(synced_batches(&log) > before, "durable only through a sync");
        } else {
            wait_for_writer(&log, lsn);
        }
    }
    assert!(by_waiter > 0, "no lone append was synced by its waiter");
    assert_eq!(log.records_written(), 20);
    let batches = log.stats().batches.load(Ordering::Relaxed);
    assert_eq!(synced_batches(&log), batches, "every batch was synced");
    // Already durable: nothing more is written or synced.
    assert!(log.write_through(20));
    assert_eq!(synced_batches(&log), batches);
}

#[test]
fn appends_made_while_a_batch_is_written_share_the_next_sync() {
    let dir = tempfile::tempdir().unwrap();
    let log = open_always(dir.path());
    // Stands for a batch being written and synced by someone else.
    let busy = log.shared.writer.lock().unwrap();
    let first = log.append(delete(1));
    let second = log.append(delete(2));
    let third = log.append(delete(3));
    for lsn in [first, second, third] {
        assert!(!log.write_through(lsn), "a busy writer is never waited for");
    }
    assert_eq!(log.durable(), 0, "nothing is durable before its sync");
    drop(busy);
    wait_for_writer(&log, third);
    assert_eq!(synced_batches(&log), 1, "the three appends shared one sync");
    assert_eq!(log.stats().batches.load(Ordering::Relaxed), 1);
    assert_eq!(log.records_written(), 3);
}

#[test]
fn records_nobody_waits_for_are_still_synced_by_the_writer_thread() {
    let dir = tempfile::tempdir().unwrap();
    let log = open_always(dir.path());
    let lsn = log.append(delete(1));
    wait_for_writer(&log, lsn);
    assert_eq!(synced_batches(&log), 1);
}
