//! `Txn::commit_handing_off` tells a front end whether its turn handed a job to another
//! connection's waiting lease, so that the lease's answer can go out first.

use bytes::Bytes;
use jobyard_broker::{Broker, Txn};
use jobyard_engine::{Lease, NoticeKind, ReserveOutcome, WaitMode};

fn put(txn: &mut Txn<'_>, queue: &str) {
    let q = txn.queue_id_or_create(queue.as_bytes());
    txn.put(q, 0, 0, 60, Bytes::from_static(b"x"), true, Broker::now());
}

/// Leaves `conn` waiting (10 s) for a job of `queue`.
fn wait_for_job(broker: &Broker, conn: u64, queue: &str) {
    let mut txn = broker.lock();
    let q = txn.queue_id_or_create(queue.as_bytes());
    let outcome = txn.reserve(
        conn,
        &[q],
        WaitMode::Best,
        Lease::JobTtr,
        Some(10_000),
        false,
        Broker::now(),
    );
    assert!(matches!(outcome, ReserveOutcome::Waiting), "{outcome:?}");
    txn.commit();
}

#[test]
fn a_turn_that_serves_a_waiting_lease_says_so() {
    let broker = Broker::in_memory();
    let (waiter, mut mailbox) = broker.connect();
    wait_for_job(&broker, waiter, "emails");

    let mut txn = broker.lock();
    put(&mut txn, "emails");
    let (_, handed_off) = txn.commit_handing_off();

    assert!(handed_off);
    assert!(matches!(mailbox.try_recv(), Some(NoticeKind::Reserved(_))));
}

#[test]
fn a_turn_that_serves_no_waiting_lease_says_so() {
    let broker = Broker::in_memory();
    let (waiter, mut mailbox) = broker.connect();
    wait_for_job(&broker, waiter, "emails");

    // A job for a queue nobody waits on, and a turn that readies nothing.
    let mut txn = broker.lock();
    put(&mut txn, "thumbs");
    let (_, handed_off) = txn.commit_handing_off();
    assert!(!handed_off);
    let (_, handed_off) = broker.lock().commit_handing_off();
    assert!(!handed_off);

    assert_eq!(mailbox.try_recv(), None);
}
