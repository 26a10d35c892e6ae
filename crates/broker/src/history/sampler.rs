//! The task that feeds [`super::History`]: once a second, one short hold of the engine lock
//! to copy each queue's counters and depth, and one read of the lease-to-complete
//! registry. Nothing on any job's path.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use tokio::time::MissedTickBehavior;

use super::percentile::{add_snapshot, BucketCounts, BUCKETS};
use super::QueueReading;
use crate::Broker;

/// How often the history is sampled.
pub const SAMPLE_EVERY: Duration = Duration::from_secs(1);

/// Samples the broker into its history for as long as the runtime runs.
pub(crate) async fn run(broker: Arc<Broker>) {
    let mut tick = tokio::time::interval(SAMPLE_EVERY);
    // A late tick is not made up for with a burst: the next interval is simply longer,
    // and its rates are divided by what it really lasted.
    tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let mut before = Instant::now();
    loop {
        tick.tick().await;
        let now = Instant::now();
        let ms = now.duration_since(before).as_millis() as u64;
        before = now;
        let readings = read(&broker);
        broker
            .history()
            .record(readings, Broker::now() / 1000, ms.max(1));
    }
}

/// Every queue's figures now.
pub fn read(broker: &Broker) -> Vec<QueueReading> {
    let latency = latency_by_queue(broker);
    let mut txn = broker.lock();
    // The attempts of jobs that ended without a lease ending, a slice a second.
    let core = &mut *txn.core;
    let engine = &core.engine;
    core.attempts.sweep(|id| engine.job(id).is_some());
    txn.queues()
        .map(|q| QueueReading {
            name: q.name.clone(),
            put: q.total_jobs,
            // A beanstalkd job is done when it is deleted: deletes count as completions.
            completed: q.completed(),
            failed: q.total_failed,
            ready: q.ready_len() as u32,
            reserved: q.reserved,
            delayed: q.delayed_len() as u32,
            buried: q.buried_len() as u32,
            latency: latency.get(&q.name).copied().unwrap_or([0; BUCKETS]),
        })
        .collect()
}

/// Each queue's lease-to-complete buckets, ok and failed together. Read from the registry
/// without the engine lock (the registry forgets gone queues when `/metrics` is scraped).
fn latency_by_queue(broker: &Broker) -> HashMap<Bytes, BucketCounts> {
    broker
        .metrics()
        .lease_latency
        .queues()
        .iter()
        .map(|h| {
            let mut counts = [0; BUCKETS];
            add_snapshot(&mut counts, &h.ok.snapshot());
            add_snapshot(&mut counts, &h.failed.snapshot());
            (h.queue.clone(), counts)
        })
        .collect()
}
