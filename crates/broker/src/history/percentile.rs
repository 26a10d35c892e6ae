//! Latency percentiles from the lease-to-complete histogram: the difference of its bucket
//! counts between two samples is the histogram of the leases completed in between, and a
//! percentile is read off it by interpolating inside the bucket it falls in (as Prometheus'
//! `histogram_quantile` does), so nothing is kept per observation.

use crate::lease_latency::{HistogramSnapshot, LEASE_BUCKETS_US};

/// Buckets of a histogram: one per bound of [`LEASE_BUCKETS_US`] and one above them all.
pub const BUCKETS: usize = LEASE_BUCKETS_US.len() + 1;

/// Counts per bucket (not cumulative).
pub type BucketCounts = [u64; BUCKETS];

/// Adds the per-bucket counts of a cumulative snapshot to `into`.
pub(crate) fn add_snapshot(into: &mut BucketCounts, snapshot: &HistogramSnapshot) {
    let mut below = 0;
    for (slot, &cumulative) in into.iter_mut().zip(&snapshot.cumulative) {
        *slot += cumulative.saturating_sub(below);
        below = cumulative;
    }
    into[BUCKETS - 1] += snapshot.count.saturating_sub(below);
}

/// `now - before` per bucket. A histogram that went back (its queue was forgotten and made
/// again) counts from zero: what it holds now is all new.
pub(crate) fn delta(now: &BucketCounts, before: &BucketCounts) -> BucketCounts {
    let went_back = now.iter().zip(before).any(|(n, b)| n < b);
    let mut out = *now;
    if !went_back {
        for (o, b) in out.iter_mut().zip(before) {
            *o -= b;
        }
    }
    out
}

/// The `q` quantile (0..=1) of `counts` in microseconds, `None` when it holds nothing. Above
/// the last bound the last bound is the answer (the histogram knows no more).
pub fn quantile_us(counts: &BucketCounts, q: f64) -> Option<u32> {
    let total: u64 = counts.iter().sum();
    if total == 0 {
        return None;
    }
    let rank = q.clamp(0.0, 1.0) * total as f64;
    let mut seen = 0u64;
    for (i, &n) in counts.iter().enumerate() {
        if n > 0 && (seen + n) as f64 >= rank {
            let Some(&upper) = LEASE_BUCKETS_US.get(i) else {
                break;
            };
            let lower = if i == 0 { 0 } else { LEASE_BUCKETS_US[i - 1] };
            let inside = (rank - seen as f64) / n as f64;
            let us = lower as f64 + (upper - lower) as f64 * inside;
            return Some(us.round().min(u32::MAX as f64) as u32);
        }
        seen += n;
    }
    Some(LEASE_BUCKETS_US[LEASE_BUCKETS_US.len() - 1] as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counts(pairs: &[(usize, u64)]) -> BucketCounts {
        let mut c = [0; BUCKETS];
        for &(i, n) in pairs {
            c[i] = n;
        }
        c
    }

    #[test]
    fn a_percentile_interpolates_inside_its_bucket() {
        // 100 leases between 1 ms and 2.5 ms (bucket 4): the median is half way.
        let c = counts(&[(4, 100)]);
        assert_eq!(quantile_us(&c, 0.5), Some(1_750));
        assert_eq!(quantile_us(&c, 1.0), Some(2_500));
        // 90 fast (under 100 µs), 10 slow (5-10 ms): p50 is fast, p95 and p99 slow.
        let c = counts(&[(0, 90), (6, 10)]);
        assert!(quantile_us(&c, 0.5).unwrap() <= 100);
        assert_eq!(quantile_us(&c, 0.95), Some(7_500));
        assert_eq!(quantile_us(&c, 0.99), Some(9_500));
        assert_eq!(quantile_us(&[0; BUCKETS], 0.5), None);
        assert_eq!(
            quantile_us(&counts(&[(BUCKETS - 1, 3)]), 0.5),
            Some(600_000_000),
            "above every bound: the last bound"
        );
    }

    #[test]
    fn the_difference_of_two_samples_is_what_happened_between() {
        let before = HistogramSnapshot {
            cumulative: (0..LEASE_BUCKETS_US.len() as u64)
                .map(|i| i.min(2))
                .collect(),
            count: 2,
            sum_us: 0,
        };
        let mut after = before.clone();
        for c in &mut after.cumulative[5..] {
            *c += 4;
        }
        after.count += 5; // one above every bound
        let (mut b, mut a) = ([0; BUCKETS], [0; BUCKETS]);
        add_snapshot(&mut b, &before);
        add_snapshot(&mut a, &after);
        assert_eq!(b.iter().sum::<u64>(), 2);
        assert_eq!(delta(&a, &b), counts(&[(5, 4), (BUCKETS - 1, 1)]));
        assert_eq!(delta(&b, &a), b, "a histogram made again counts from zero");
    }
}
