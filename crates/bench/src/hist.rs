//! A fixed log-linear latency histogram, shared between tasks without locks.
//!
//! Values are nanoseconds. Below 128 every value has its own bucket; above, each power of
//! two is split into 64 buckets, so a reported percentile is within 1.6 % of the truth.

use std::sync::atomic::{AtomicU64, Ordering};

const SUB_BITS: u32 = 7;
const SUB: u64 = 1 << SUB_BITS; // 128 exact buckets
const HALF: u64 = SUB / 2; // 64 buckets per power of two above
const BUCKETS: usize = (SUB + (64 - SUB_BITS as u64) * HALF) as usize;

pub struct Histogram {
    counts: Vec<AtomicU64>,
    max: AtomicU64,
    total: AtomicU64,
}

/// The percentiles a run reports, in nanoseconds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Summary {
    pub count: u64,
    pub p50: u64,
    pub p99: u64,
    pub p999: u64,
    pub max: u64,
}

fn index(v: u64) -> usize {
    if v < SUB {
        return v as usize;
    }
    let e = 63 - v.leading_zeros() as u64; // floor(log2 v) >= SUB_BITS
    let shift = e - (SUB_BITS as u64 - 1);
    let top = v >> shift; // in [64, 128)
    (SUB + (e - SUB_BITS as u64) * HALF + (top - HALF)) as usize
}

/// The largest value that falls in bucket `i`.
fn upper(i: usize) -> u64 {
    let i = i as u64;
    if i < SUB {
        return i;
    }
    let e = (i - SUB) / HALF + SUB_BITS as u64;
    let top = (i - SUB) % HALF + HALF;
    let shift = e - (SUB_BITS as u64 - 1);
    ((top + 1) << shift).wrapping_sub(1)
}

impl Default for Histogram {
    fn default() -> Self {
        Self::new()
    }
}

impl Histogram {
    pub fn new() -> Self {
        Histogram {
            counts: (0..BUCKETS).map(|_| AtomicU64::new(0)).collect(),
            max: AtomicU64::new(0),
            total: AtomicU64::new(0),
        }
    }

    pub fn record(&self, nanos: u64) {
        self.counts[index(nanos)].fetch_add(1, Ordering::Relaxed);
        self.total.fetch_add(1, Ordering::Relaxed);
        self.max.fetch_max(nanos, Ordering::Relaxed);
    }

    pub fn count(&self) -> u64 {
        self.total.load(Ordering::Relaxed)
    }

    /// The smallest bucket bound below which at least `q` of the values lie (never above max).
    pub fn quantile(&self, q: f64) -> u64 {
        let total = self.count();
        if total == 0 {
            return 0;
        }
        let want = ((q * total as f64).ceil() as u64).clamp(1, total);
        let max = self.max.load(Ordering::Relaxed);
        let mut seen = 0;
        for (i, c) in self.counts.iter().enumerate() {
            seen += c.load(Ordering::Relaxed);
            if seen >= want {
                return upper(i).min(max);
            }
        }
        max
    }

    pub fn summary(&self) -> Summary {
        Summary {
            count: self.count(),
            p50: self.quantile(0.50),
            p99: self.quantile(0.99),
            p999: self.quantile(0.999),
            max: self.max.load(Ordering::Relaxed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_monotonic_and_contain_their_values() {
        let mut last = 0;
        for v in 0..5000u64 {
            assert!(index(v) >= last, "{v}");
            last = index(v);
        }
        for v in (0..5000u64)
            .chain((0..64).map(|s| 1u64 << s))
            .chain([u64::MAX])
        {
            let i = index(v);
            assert!(i < BUCKETS, "{v}");
            assert!(
                upper(i) >= v,
                "value {v} above its bucket bound {}",
                upper(i)
            );
            if i > 0 {
                assert!(upper(i - 1) < v, "value {v} belongs to an earlier bucket");
            }
        }
    }

    #[test]
    fn percentiles_of_a_uniform_spread_are_within_two_percent() {
        let h = Histogram::new();
        for v in 1..=100_000u64 {
            h.record(v * 1000); // 1 µs .. 100 ms
        }
        let s = h.summary();
        assert_eq!(s.count, 100_000);
        let near = |got: u64, want: u64| {
            let err = (got as f64 - want as f64).abs() / want as f64;
            assert!(err < 0.02, "got {got}, want about {want}");
        };
        near(s.p50, 50_000_000);
        near(s.p99, 99_000_000);
        near(s.p999, 99_900_000);
        assert_eq!(s.max, 100_000_000);
    }

    #[test]
    fn small_values_are_exact_and_empty_is_zero() {
        let h = Histogram::new();
        assert_eq!(h.summary(), Summary::default());
        for v in [3, 3, 3, 7] {
            h.record(v);
        }
        assert_eq!(h.quantile(0.5), 3);
        assert_eq!(h.quantile(1.0), 7);
        assert_eq!(h.summary().max, 7);
    }
}
