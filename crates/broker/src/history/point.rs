//! One point of a history series and the cumulative figures it is computed from.

use bytes::Bytes;

use super::percentile::{self, BucketCounts};

/// What one queue looked like at a sample: its counters since it was made, its depth, and
/// its lease-to-complete histogram (ok and failed together), per bucket.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct QueueReading {
    /// The queue's name.
    pub name: Bytes,
    /// Jobs put, completed (ended ok or deleted: beanstalkd's way to finish a job) and
    /// ended failed since the queue was made.
    pub put: u64,
    pub completed: u64,
    pub failed: u64,
    /// Jobs in each state now.
    pub ready: u32,
    pub reserved: u32,
    pub delayed: u32,
    pub buried: u32,
    /// Completed leases per latency bucket since the histogram was made.
    pub latency: BucketCounts,
}

/// The figures of one interval of a series: rates per second, depth at its end, and the
/// lease-to-complete percentiles of the leases completed in it. 40 bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Point {
    /// Jobs put, completed (ended ok) and failed per second.
    pub put: f32,
    pub completed: f32,
    pub failed: f32,
    /// Jobs in each state at the end of the interval.
    pub ready: u32,
    pub reserved: u32,
    pub delayed: u32,
    pub buried: u32,
    /// Percentiles in microseconds; [`NO_LATENCY`] when no lease completed.
    pub p50_us: u32,
    pub p95_us: u32,
    pub p99_us: u32,
}

/// A percentile of an interval in which no lease completed.
pub const NO_LATENCY: u32 = u32::MAX;

/// What happened in one interval, before it is turned into a [`Point`]: counts (not yet
/// rates) and the latency buckets, so intervals add up into a longer one.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Interval {
    pub(crate) put: u64,
    pub(crate) completed: u64,
    pub(crate) failed: u64,
    pub(crate) ready: u32,
    pub(crate) reserved: u32,
    pub(crate) delayed: u32,
    pub(crate) buried: u32,
    pub(crate) latency: BucketCounts,
    /// Milliseconds it lasted.
    pub(crate) ms: u64,
}

impl Interval {
    /// Between two readings of one queue (`before` none: the queue is new, all it counted is
    /// new). Counters that went back (the queue was dropped and made again) count from zero.
    pub(crate) fn between(now: &QueueReading, before: Option<&QueueReading>, ms: u64) -> Self {
        let since = |n: u64, b: Option<u64>| match b {
            Some(b) if b <= n => n - b,
            _ => n,
        };
        Interval {
            put: since(now.put, before.map(|b| b.put)),
            completed: since(now.completed, before.map(|b| b.completed)),
            failed: since(now.failed, before.map(|b| b.failed)),
            ready: now.ready,
            reserved: now.reserved,
            delayed: now.delayed,
            buried: now.buried,
            latency: match before {
                Some(b) => percentile::delta(&now.latency, &b.latency),
                None => now.latency,
            },
            ms,
        }
    }

    /// Adds `other` (another queue in the same interval): counts and depths add up.
    pub(crate) fn add_queue(&mut self, other: &Interval) {
        self.put += other.put;
        self.completed += other.completed;
        self.failed += other.failed;
        self.ready += other.ready;
        self.reserved += other.reserved;
        self.delayed += other.delayed;
        self.buried += other.buried;
        for (a, b) in self.latency.iter_mut().zip(&other.latency) {
            *a += b;
        }
        self.ms = self.ms.max(other.ms);
    }

    /// Appends `later` (the same queue's next interval): counts add up, depth is the later's.
    pub(crate) fn extend(&mut self, later: &Interval) {
        let ms = self.ms + later.ms;
        self.add_queue(later);
        (self.ready, self.reserved, self.delayed, self.buried) =
            (later.ready, later.reserved, later.delayed, later.buried);
        self.ms = ms;
    }

    /// The interval as a point of a series.
    pub(crate) fn point(&self) -> Point {
        let secs = (self.ms.max(1)) as f32 / 1000.0;
        let p = |q| percentile::quantile_us(&self.latency, q).unwrap_or(NO_LATENCY);
        Point {
            put: self.put as f32 / secs,
            completed: self.completed as f32 / secs,
            failed: self.failed as f32 / secs,
            ready: self.ready,
            reserved: self.reserved,
            delayed: self.delayed,
            buried: self.buried,
            p50_us: p(0.5),
            p95_us: p(0.95),
            p99_us: p(0.99),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_point_is_40_bytes() {
        assert_eq!(std::mem::size_of::<Point>(), 40);
    }

    #[test]
    fn counters_that_went_back_count_from_zero() {
        let before = QueueReading {
            put: 10,
            completed: 5,
            ..Default::default()
        };
        let now = QueueReading {
            put: 3,
            completed: 7,
            ..Default::default()
        };
        let i = Interval::between(&now, Some(&before), 2000);
        assert_eq!((i.put, i.completed), (3, 2));
        let p = i.point();
        assert_eq!((p.put, p.completed), (1.5, 1.0));
        assert_eq!(p.p50_us, NO_LATENCY);
    }
}
