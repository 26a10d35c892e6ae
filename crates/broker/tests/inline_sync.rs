//! `Txn::commit_handing_off` syncs a lone transaction on the committing thread when that
//! blocks nobody (a multi-threaded runtime's worker, or no runtime), and leaves it to the
//! log writer thread on a current-thread runtime, where blocking would stall every task.

use std::sync::Arc;

use bytes::Bytes;
use jobyard_broker::{Broker, Compaction, StorageOptions};
use jobyard_storage::FsyncMode;

fn open(dir: &std::path::Path) -> Arc<Broker> {
    Broker::open(StorageOptions {
        data_dir: Some(dir.to_path_buf()),
        fsync: FsyncMode::Always,
        segment_bytes: 64 << 20,
        compaction: Compaction::default(),
        salvage: false,
        bodies_in_log: false,
        hot_body_bytes: 0,
        queues_first: Vec::new(),
    })
    .expect("open broker")
}

/// Puts a job through `commit_handing_off`; returns the log position to wait for.
fn put_handing_off(broker: &Broker) -> u64 {
    let mut txn = broker.lock();
    let q = txn.queue_id_or_create(b"emails");
    txn.put(q, 0, 0, 60, Bytes::from_static(b"x"), true, Broker::now());
    let (lsn, _) = txn.commit_handing_off();
    assert!(lsn > 0);
    lsn
}

fn durable(broker: &Broker) -> u64 {
    broker.log().expect("a log").durable()
}

/// Attempts allowed for a commit to find the writer thread parked. A commit syncs inline
/// only then; while the thread still goes round its loop after an earlier batch (or just
/// started) it takes the records over, and the commit returns before they are durable.
const ATTEMPTS: usize = 200;

/// Puts jobs through `commit_handing_off` until one returns with its records durable
/// (true), waiting for each that did not; false if none did.
fn some_commit_returns_synced(broker: &Broker) -> bool {
    for _ in 0..ATTEMPTS {
        let lsn = put_handing_off(broker);
        if durable(broker) >= lsn {
            return true;
        }
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        while durable(broker) < lsn {
            assert!(std::time::Instant::now() < deadline, "never durable");
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        // Attempts far apart: a log that wrote many batches within a few ms is busy and
        // claims nothing.
        std::thread::sleep(std::time::Duration::from_millis(3));
    }
    false
}

#[test]
fn without_a_runtime_the_commit_returns_with_its_records_synced() {
    let dir = tempfile::tempdir().unwrap();
    let broker = open(dir.path());
    assert!(some_commit_returns_synced(&broker));
    broker.shutdown();
}

#[test]
fn on_a_multi_threaded_runtime_the_commit_returns_with_its_records_synced() {
    let dir = tempfile::tempdir().unwrap();
    let broker = open(dir.path());
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .build()
        .unwrap();
    let b = broker.clone();
    let synced = rt.block_on(async move {
        tokio::spawn(async move { some_commit_returns_synced(&b) })
            .await
            .unwrap()
    });
    assert!(synced);
    drop(rt);
    broker.shutdown();
}

#[test]
fn on_a_current_thread_runtime_the_writer_thread_syncs_instead() {
    let dir = tempfile::tempdir().unwrap();
    let broker = open(dir.path());
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let b = broker.clone();
    let lsn = rt.block_on(async move {
        // Would panic in `block_in_place` if the commit tried to sync here.
        let lsn = put_handing_off(&b);
        b.wait_durable(lsn).await;
        lsn
    });
    assert!(durable(&broker) >= lsn);
    drop(rt);
    broker.shutdown();
}
