//! The lease-to-complete histogram per queue: how long jobs are held from hand-out to a
//! completed end (`jobyard_lease_to_complete_seconds{queue, outcome}` on `/metrics`).
//!
//! The engine stamps leases and reports completed ones ([`jobyard_engine::LeaseEnd`]); the
//! broker turns each into one observation when it commits the transaction, under the engine
//! lock. The hot path costs one clock read per transaction that made or ended a lease, a
//! slot lookup by queue id in [`LeaseHandles`] (no hashing of label strings), a bucket search
//! and two plain stores. Writers are serialized by the engine lock, so counts are kept with
//! plain loads and stores on atomics (no read-modify-write instruction); a scrape loads them.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use jobyard_engine::{LeaseEnd, LeaseOutcome};

/// Upper bounds (microseconds) of the buckets: 100 µs to 10 minutes, roughly 1-2.5-5 per
/// decade, for jobs from a cache lookup to a video encode.
pub const LEASE_BUCKETS_US: [u64; 21] = [
    100,
    250,
    500,
    1_000,
    2_500,
    5_000,
    10_000,
    25_000,
    50_000,
    100_000,
    250_000,
    500_000,
    1_000_000,
    2_500_000,
    5_000_000,
    10_000_000,
    30_000_000,
    60_000_000,
    120_000_000,
    300_000_000,
    600_000_000,
];

/// A queue's histogram is forgotten when its queue is gone and nothing was observed for
/// this long (as Prometheus series of gone queues stop being reported).
pub const IDLE_FORGET_US: u64 = 300 * 1_000_000;

/// One latency histogram: counts per bucket (the last one above every bound) and the sum.
#[derive(Debug, Default)]
pub struct LatencyHistogram {
    counts: [AtomicU64; LEASE_BUCKETS_US.len() + 1],
    sum_us: AtomicU64,
}

/// A histogram as read at one moment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HistogramSnapshot {
    /// Cumulative counts for each bound of [`LEASE_BUCKETS_US`] (Prometheus `le` buckets).
    pub cumulative: Vec<u64>,
    /// Observations in all (the `+Inf` bucket).
    pub count: u64,
    pub sum_us: u64,
}

impl LatencyHistogram {
    /// Adds one observation. Callers hold the engine lock (the only writers), which is what
    /// makes the plain load-and-store safe.
    fn observe_locked(&self, us: u64) {
        let i = LEASE_BUCKETS_US.partition_point(|&bound| bound < us);
        let c = &self.counts[i];
        c.store(c.load(Relaxed) + 1, Relaxed);
        self.sum_us
            .store(self.sum_us.load(Relaxed).saturating_add(us), Relaxed);
    }

    /// The figures now.
    pub fn snapshot(&self) -> HistogramSnapshot {
        let mut running = 0;
        let mut cumulative = Vec::with_capacity(LEASE_BUCKETS_US.len());
        for c in &self.counts[..LEASE_BUCKETS_US.len()] {
            running += c.load(Relaxed);
            cumulative.push(running);
        }
        let count = running + self.counts[LEASE_BUCKETS_US.len()].load(Relaxed);
        HistogramSnapshot {
            cumulative,
            count,
            sum_us: self.sum_us.load(Relaxed),
        }
    }
}

/// The histograms of one queue, one per outcome.
#[derive(Debug)]
pub struct QueueLeaseLatency {
    pub queue: Bytes,
    pub ok: LatencyHistogram,
    pub failed: LatencyHistogram,
    /// The broker clock at the last observation (for forgetting gone queues).
    last_us: AtomicU64,
}

impl QueueLeaseLatency {
    fn new(queue: Bytes, now_us: u64) -> Self {
        QueueLeaseLatency {
            queue,
            ok: LatencyHistogram::default(),
            failed: LatencyHistogram::default(),
            last_us: AtomicU64::new(now_us),
        }
    }

    /// The histogram of one outcome.
    pub fn of(&self, outcome: LeaseOutcome) -> &LatencyHistogram {
        match outcome {
            LeaseOutcome::Ok => &self.ok,
            LeaseOutcome::Failed => &self.failed,
        }
    }
}

/// Every queue's histograms, by queue name (they outlive a queue that empties and comes
/// back, as the queue's Prometheus series do).
#[derive(Debug, Default)]
pub struct LeaseLatency {
    by_queue: Mutex<HashMap<Bytes, Arc<QueueLeaseLatency>>>,
}

impl LeaseLatency {
    /// Every queue's histograms, sorted by queue name.
    pub fn queues(&self) -> Vec<Arc<QueueLeaseLatency>> {
        let mut all: Vec<_> = self.map().values().cloned().collect();
        all.sort_by(|a, b| a.queue.cmp(&b.queue));
        all
    }

    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<Bytes, Arc<QueueLeaseLatency>>> {
        self.by_queue.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn handle(&self, queue: &Bytes, now_us: u64) -> Arc<QueueLeaseLatency> {
        self.map()
            .entry(queue.clone())
            .or_insert_with(|| Arc::new(QueueLeaseLatency::new(queue.clone(), now_us)))
            .clone()
    }

    /// Forgets the histograms of queues `exists` says are gone and that saw nothing for
    /// [`IDLE_FORGET_US`]; returns whether any was forgotten.
    pub(crate) fn forget_idle(&self, exists: impl Fn(&[u8]) -> bool, now_us: u64) -> bool {
        let mut map = self.map();
        let before = map.len();
        map.retain(|name, h| {
            exists(name) || now_us.saturating_sub(h.last_us.load(Relaxed)) < IDLE_FORGET_US
        });
        map.len() != before
    }

    /// Whether `h` is still the registered histogram of its queue.
    fn is_registered(&self, h: &Arc<QueueLeaseLatency>) -> bool {
        self.map()
            .get(&h.queue)
            .is_some_and(|registered| Arc::ptr_eq(registered, h))
    }
}

/// The broker's cache of histogram handles by queue id, kept beside the engine (under its
/// lock), so an observation finds its histogram without hashing the queue's name.
#[derive(Debug, Default)]
pub(crate) struct LeaseHandles {
    slots: Vec<Option<Arc<QueueLeaseLatency>>>,
}

impl LeaseHandles {
    /// Records one completed lease that ended at `now_us`.
    pub(crate) fn record(&mut self, registry: &LeaseLatency, end: &LeaseEnd, now_us: u64) {
        let slot = end.queue_id as usize;
        if self.slots.len() <= slot {
            self.slots.resize(slot + 1, None);
        }
        // A queue id is reused once its queue is gone: the name tells whether the cached
        // handle is still this queue's (a short compare, not a hash).
        let handle = match &self.slots[slot] {
            Some(h) if h.queue == end.queue => h,
            _ => {
                let h = registry.handle(&end.queue, now_us);
                self.slots[slot].insert(h)
            }
        };
        let us = end.started.map_or(0, |s| now_us.saturating_sub(s));
        handle.of(end.outcome).observe_locked(us);
        handle.last_us.store(now_us, Relaxed);
    }

    /// Drops cached handles the registry no longer holds (after [`LeaseLatency::forget_idle`]).
    pub(crate) fn drop_forgotten(&mut self, registry: &LeaseLatency) {
        for slot in &mut self.slots {
            if slot.as_ref().is_some_and(|h| !registry.is_registered(h)) {
                *slot = None;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use jobyard_engine::QueueId;

    use super::*;

    fn end(q: QueueId, name: &'static [u8], started: Option<u64>) -> LeaseEnd {
        LeaseEnd {
            queue_id: q,
            queue: Bytes::from_static(name),
            outcome: LeaseOutcome::Ok,
            started,
        }
    }

    #[test]
    fn observations_land_in_their_bucket_and_the_sum() {
        let registry = LeaseLatency::default();
        let mut handles = LeaseHandles::default();
        // 100 µs is in the first bucket (le = 0.0001), 101 µs in the second, 2 s in 2.5 s.
        for (start, now) in [(1_000, 1_100), (1_000, 1_101), (0, 2_000_000)] {
            handles.record(&registry, &end(0, b"q", Some(start)), now);
        }
        handles.record(&registry, &end(0, b"q", None), 5);
        let h = registry.queues()[0].ok.snapshot();
        assert_eq!(h.count, 4);
        assert_eq!(h.sum_us, 100 + 101 + 2_000_000);
        assert_eq!(h.cumulative[0], 2, "0 µs and 100 µs are at most 100 µs");
        assert_eq!(h.cumulative[1], 3);
        assert_eq!(h.cumulative[12], 3, "nothing between 250 µs and 1 s");
        assert_eq!(h.cumulative[13], 4);
        assert_eq!(*h.cumulative.last().unwrap(), 4);
    }

    #[test]
    fn a_reused_queue_id_gets_its_own_histogram() {
        let registry = LeaseLatency::default();
        let mut handles = LeaseHandles::default();
        handles.record(&registry, &end(3, b"a", Some(0)), 10);
        handles.record(&registry, &end(3, b"b", Some(0)), 10);
        handles.record(&registry, &end(3, b"a", Some(0)), 10);
        let names: Vec<_> = registry.queues().iter().map(|h| h.queue.clone()).collect();
        assert_eq!(
            names,
            vec![Bytes::from_static(b"a"), Bytes::from_static(b"b")]
        );
        assert_eq!(registry.queues()[0].ok.snapshot().count, 2);
        assert_eq!(registry.queues()[1].ok.snapshot().count, 1);
    }

    #[test]
    fn gone_idle_queues_are_forgotten_and_their_handles_dropped() {
        let registry = LeaseLatency::default();
        let mut handles = LeaseHandles::default();
        handles.record(&registry, &end(0, b"gone", Some(0)), 10);
        handles.record(&registry, &end(1, b"live", Some(0)), 10);
        assert!(!registry.forget_idle(|_| false, 10 + IDLE_FORGET_US - 1));
        assert!(registry.forget_idle(|q| q == b"live", 10 + IDLE_FORGET_US));
        handles.drop_forgotten(&registry);
        assert!(handles.slots[0].is_none() && handles.slots[1].is_some());
        handles.record(&registry, &end(0, b"gone", Some(0)), 20);
        let gone = registry.queues()[0].clone();
        assert_eq!(gone.queue, Bytes::from_static(b"gone"));
        assert_eq!(gone.ok.snapshot().count, 1, "a new series starts from zero");
    }
}
