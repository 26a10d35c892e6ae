//! Figures about the log that operators watch: how much is written, how often it is
//! synced, how long a sync takes, how many records share a write (group commit).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Upper bounds (microseconds) of the fsync latency histogram's buckets; the last bucket
/// counts everything slower.
pub const FSYNC_BUCKETS_US: [u64; 10] = [
    100, 250, 500, 1_000, 2_500, 5_000, 10_000, 25_000, 100_000, 1_000_000,
];

/// Counters the log keeps while it runs. All relaxed atomics: read for reporting only.
#[derive(Debug, Default)]
pub struct LogStats {
    /// Records appended since start.
    pub records: AtomicU64,
    /// Bytes written to segments since start.
    pub bytes: AtomicU64,
    /// `write(2)` batches: records / batches is the average group-commit size.
    pub batches: AtomicU64,
}

/// The process's log syncs. Process-wide (a server has one log) so that every place that
/// syncs a segment counts, whatever it holds.
static SYNCS: SyncStats = SyncStats {
    fsyncs: AtomicU64::new(0),
    fsync_us_total: AtomicU64::new(0),
    fsync_us_max: AtomicU64::new(0),
    fsync_buckets: [const { AtomicU64::new(0) }; FSYNC_BUCKETS_US.len() + 1],
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
    /// Sync latency histogram: count per bucket of [`FSYNC_BUCKETS_US`], plus one overflow.
    pub fsync_buckets: [AtomicU64; FSYNC_BUCKETS_US.len() + 1],
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
        let bucket = FSYNC_BUCKETS_US
            .iter()
            .position(|&b| us <= b)
            .unwrap_or(FSYNC_BUCKETS_US.len());
        self.fsync_buckets[bucket].fetch_add(1, Ordering::Relaxed);
        // Also to the process's metrics recorder, if one is installed (the Prometheus
        // endpoint's histogram); a no-op otherwise. Once per sync, never per job.
        metrics::histogram!("jobyard_log_fsync_seconds").record(took.as_secs_f64());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn syncs_land_in_the_bucket_of_their_latency() {
        let s = SyncStats {
            fsyncs: AtomicU64::new(0),
            fsync_us_total: AtomicU64::new(0),
            fsync_us_max: AtomicU64::new(0),
            fsync_buckets: Default::default(),
        };
        s.synced(Duration::from_micros(80));
        s.synced(Duration::from_micros(800));
        s.synced(Duration::from_secs(3));
        let counts: Vec<u64> = s
            .fsync_buckets
            .iter()
            .map(|b| b.load(Ordering::Relaxed))
            .collect();
        assert_eq!(counts[0], 1);
        assert_eq!(counts[3], 1);
        assert_eq!(counts[FSYNC_BUCKETS_US.len()], 1);
        assert_eq!(s.fsyncs.load(Ordering::Relaxed), 3);
        assert_eq!(s.fsync_us_max.load(Ordering::Relaxed), 3_000_000);
    }
}
