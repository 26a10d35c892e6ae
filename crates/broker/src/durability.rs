//! Keeping the log proportional to the live data.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use jobyard_engine::{Change, JobId, LogRef};

use crate::Broker;

/// When to replace old log files with a snapshot.
#[derive(Clone, Copy, Debug)]
pub struct Compaction {
    /// Never compact a log smaller than this.
    pub min_bytes: u64,
    /// Compact when the files on disk exceed the live data by this factor.
    pub ratio: f64,
    /// How often to check.
    pub every: Duration,
}

impl Default for Compaction {
    fn default() -> Self {
        Compaction {
            min_bytes: 64 << 20,
            ratio: 1.5,
            every: Duration::from_secs(1),
        }
    }
}

/// Checks the log's size now and then, and snapshots the engine when it pays off.
pub(crate) async fn compact_when_needed(broker: Arc<Broker>) {
    let Some(log) = broker.log.as_ref() else {
        return;
    };
    // A log in PostgreSQL keeps its own count; segment files are measured on disk.
    let dir = match (log.stored_bytes(), broker.data_dir.clone()) {
        (Some(_), _) => None,
        (None, Some(dir)) => Some(dir),
        (None, None) => return,
    };
    let policy = broker.compaction;
    let mut checked_at = None;
    loop {
        tokio::time::sleep(policy.every).await;
        if log.snapshot_running() {
            continue;
        }
        // The files only grow when records are written: an idle log needs no look at the
        // disk (which costs a hand-off to the blocking pool).
        let written = log.records_written();
        if checked_at.replace(written) == Some(written) {
            continue;
        }
        let disk = match dir.clone() {
            Some(dir) => tokio::task::spawn_blocking(move || jobyard_storage::disk_bytes(&dir))
                .await
                .unwrap_or(0),
            None => log.stored_bytes().unwrap_or(0),
        };
        // The cut and the order of jobs are taken under the lock; the copy is not.
        let started = {
            let mut txn = broker.lock();
            let engine = txn.engine_core();
            let live = engine.live_bytes();
            if disk < policy.min_bytes || (disk as f64) < live as f64 * policy.ratio {
                None
            } else {
                log.begin_snapshot(engine.next_id())
                    .map(|feed| (feed, engine.snapshot_order(), live))
            }
        };
        let Some((feed, order, live)) = started else {
            continue;
        };
        broker
            .metrics()
            .compaction
            .runs
            .fetch_add(1, Ordering::Relaxed);
        tracing::info!(
            "compacting the log: {disk} bytes on disk for ~{live} live bytes ({} jobs)",
            order.len()
        );
        let broker = broker.clone();
        let _ = tokio::task::spawn_blocking(move || feed_snapshot(&broker, feed, &order)).await;
    }
}

/// Jobs copied per turn of the engine lock: small enough that commands waiting for the
/// lock are held up for well under a millisecond, large enough to keep the copy cheap.
pub(crate) const SNAPSHOT_CHUNK: usize = 512;
/// Pause between chunks, in which connections get the lock.
const SNAPSHOT_PAUSE: Duration = Duration::from_millis(1);

/// Fills in the bodies only the log holds, read outside the engine lock. False (logged)
/// if one cannot be read: the snapshot must not lose a body.
fn read_bodies(broker: &Broker, jobs: &mut [Change], in_log: &[(usize, LogRef)]) -> bool {
    let Some(log) = broker.log.as_ref() else {
        return in_log.is_empty();
    };
    for &(i, at) in in_log {
        match (log.read_body(at), &mut jobs[i]) {
            (Ok(read), Change::Put { body, .. }) => *body = read.into(),
            (Err(e), _) => {
                tracing::error!("compaction cannot read a body back from the log: {e}");
                return false;
            }
            _ => {}
        }
    }
    true
}

/// Copies the jobs into the snapshot a chunk at a time, taking the engine lock once per
/// chunk, so a large queue never stops the server for the whole copy (the log's snapshot
/// is "fuzzy": see `Log::begin_snapshot`).
fn feed_snapshot(broker: &Broker, feed: jobyard_storage::SnapshotFeed, order: &[JobId]) {
    for chunk in order.chunks(SNAPSHOT_CHUNK) {
        if broker.stopping.load(Ordering::Acquire) {
            return; // dropping the feed abandons the snapshot
        }
        let started = std::time::Instant::now();
        let (mut jobs, in_log) = broker.lock().engine_core().snapshot_of_split(chunk);
        let us = started.elapsed().as_micros() as u64;
        if !read_bodies(broker, &mut jobs, &in_log) {
            return; // dropping the feed abandons the snapshot; the log keeps its files
        }
        let m = &broker.metrics().compaction;
        m.max_pause_us.fetch_max(us, Ordering::Relaxed);
        m.pause_us_total.fetch_add(us, Ordering::Relaxed);
        if !feed.send(jobs) {
            return;
        }
        // The engine's mutex is not fair: re-locked at once, it starved the connections
        // woken by the unlock for most of the copy (waits of 100+ ms measured with 600k
        // jobs). A short pause lets them in.
        std::thread::sleep(SNAPSHOT_PAUSE);
    }
    feed.finish();
}
