//! The lease-to-complete histogram through the broker's own commit path: leases made and
//! ended in transactions land in their queue's histogram with their outcome.

use bytes::Bytes;
use jobyard_broker::Broker;
use jobyard_engine::{JobEnd, JobId, Lease, ReserveOutcome, WaitMode};

fn put(broker: &Broker, queue: &str) -> JobId {
    let mut txn = broker.lock();
    let q = txn.queue_id_or_create(queue.as_bytes());
    txn.put(q, 0, 0, 60, Bytes::from_static(b"x"), true, Broker::now())
        .id
}

fn reserve(broker: &Broker, conn: u64, queue: &str) -> JobId {
    let mut txn = broker.lock();
    let q = txn.queue_id(queue.as_bytes()).unwrap();
    let outcome = txn.reserve(
        conn,
        &[q],
        WaitMode::Best,
        Lease::JobTtr,
        Some(0),
        false,
        Broker::now(),
    );
    let ReserveOutcome::Reserved(id) = outcome else {
        panic!("{outcome:?}")
    };
    id
}

#[test]
fn completed_leases_are_counted_per_queue_and_outcome() {
    let broker = Broker::in_memory();
    let (conn, _mailbox) = broker.connect();
    for _ in 0..3 {
        put(&broker, "emails");
    }
    put(&broker, "thumbs");
    for _ in 0..2 {
        let id = reserve(&broker, conn, "emails");
        assert!(broker.lock().delete(conn, id));
    }
    let id = reserve(&broker, conn, "emails");
    assert!(broker.lock().finish(conn, id, JobEnd::failed(None)));
    let id = reserve(&broker, conn, "thumbs");
    assert!(
        broker.lock().release(conn, id, 0, 0, Broker::now()),
        "not a completion"
    );
    let id = reserve(&broker, conn, "thumbs");
    let lease_start = broker
        .lock()
        .lease_started(id)
        .expect("stamped at the commit");
    assert!(broker.lock().bury(conn, id, 0));

    let queues = broker.lease_latency();
    let names: Vec<&[u8]> = queues.iter().map(|q| &q.queue[..]).collect();
    assert_eq!(names, vec![&b"emails"[..], &b"thumbs"[..]]);
    let emails = &queues[0];
    assert_eq!(emails.ok.snapshot().count, 2);
    assert_eq!(emails.failed.snapshot().count, 1);
    let thumbs = &queues[1];
    assert_eq!(thumbs.ok.snapshot().count, 0);
    assert_eq!(
        thumbs.failed.snapshot().count,
        1,
        "only the lease that was buried"
    );
    // The clock is the broker's: microseconds since it started, so a stamp is small.
    assert!(lease_start < 3_600_000_000);
    // Each emptied queue is gone from the engine; the histograms stay (for a while).
    assert!(broker.lock().queue_id(b"emails").is_none());
}
