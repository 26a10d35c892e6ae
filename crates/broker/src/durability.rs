//! Keeping the log proportional to the live data.

use std::sync::Arc;
use std::time::Duration;

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
    let (Some(log), Some(dir)) = (broker.log.as_ref(), broker.data_dir.clone()) else {
        return;
    };
    let policy = broker.compaction;
    loop {
        tokio::time::sleep(policy.every).await;
        if log.snapshot_running() {
            continue;
        }
        let disk = {
            let dir = dir.clone();
            tokio::task::spawn_blocking(move || jobyard_storage::disk_bytes(&dir))
                .await
                .unwrap_or(0)
        };
        let txn = broker.lock();
        let live = txn.live_bytes();
        if disk < policy.min_bytes || (disk as f64) < live as f64 * policy.ratio {
            continue;
        }
        let snapshot = txn.snapshot();
        let next_id = txn.next_id();
        let jobs = snapshot.len();
        if log.request_snapshot(snapshot, next_id) {
            tracing::info!(
                "compacting the log: {disk} bytes on disk for ~{live} live bytes ({jobs} jobs)"
            );
        }
        drop(txn);
    }
}
