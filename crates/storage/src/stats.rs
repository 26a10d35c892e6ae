//! Figures about the log that operators watch: how much is written, how often it is
//! synced, how long a sync takes, how many records share a write (group commit). The
//! latency distribution goes to the metrics recorder's histogram, not kept here twice.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Counters the log keeps while it runs. All relaxed atomics: read for reporting only.
#[derive(Debug, Default)]
pub struct LogStats {
    /// Bytes written to segments since start.
    pub bytes: AtomicU64,
    /// `write(2)` batches: records / batches is the average group-commit size.
    pub batches: AtomicU64,
    /// Rows of PostgreSQL's transactional-enqueue table consumed (put as jobs, or matching
    /// a live job's unique key) and rejected (moved to `enqueue_rejected`); counted by the
    /// broker's consumer, 0 with segment files.
    pub enqueue_consumed: AtomicU64,
    pub enqueue_rejected: AtomicU64,
}

/// The process's log syncs. Process-wide (a server has one log) so that every place that
/// syncs a segment counts, whatever it holds.
static SYNCS: SyncStats = SyncStats {
    fsyncs: AtomicU64::new(0),
    fsync_us_total: AtomicU64::new(0),
    fsync_us_max: AtomicU64::new(0),
};

/// How often and how long the log's segments were synced in this process.
pub fn sync_stats() -> &'static SyncStats {
    &SYNCS
}

/// Sync counts and latency.
#[derive(Debug)]
pub struct SyncStats {
    /// Syncs of a segment (fdatasync).
    pub fsyncs: AtomicU64,
    /// Total and worst time spent in those syncs, in microseconds.
    pub fsync_us_total: AtomicU64,
    pub fsync_us_max: AtomicU64,
}

impl LogStats {
    pub(crate) fn wrote(&self, bytes: usize) {
        if bytes > 0 {
            self.bytes.fetch_add(bytes as u64, Ordering::Relaxed);
            self.batches.fetch_add(1, Ordering::Relaxed);
        }
    }
}

impl SyncStats {
    pub(crate) fn synced(&self, took: Duration) {
        let us = took.as_micros().min(u64::MAX as u128) as u64;
        self.fsyncs.fetch_add(1, Ordering::Relaxed);
        self.fsync_us_total.fetch_add(us, Ordering::Relaxed);
        self.fsync_us_max.fetch_max(us, Ordering::Relaxed);
        // Also to the process's metrics recorder, if one is installed (the Prometheus
        // endpoint's histogram); a no-op otherwise. Once per sync, never per job.
        metrics::histogram!("jobyard_log_fsync_seconds").record(took.as_secs_f64());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn syncs_are_counted_with_their_total_and_worst_time() {
        let s = SyncStats {
            fsyncs: AtomicU64::new(0),
            fsync_us_total: AtomicU64::new(0),
            fsync_us_max: AtomicU64::new(0),
        };
        s.synced(Duration::from_micros(80));
        s.synced(Duration::from_micros(800));
        s.synced(Duration::from_secs(3));
        assert_eq!(s.fsyncs.load(Ordering::Relaxed), 3);
        assert_eq!(s.fsync_us_total.load(Ordering::Relaxed), 3_000_880);
        assert_eq!(s.fsync_us_max.load(Ordering::Relaxed), 3_000_000);
    }
}
