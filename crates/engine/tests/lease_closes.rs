//! Lease closes (the record behind a job's attempts on the dashboard): every way a lease
//! ends is reported once, with its holder, its stamp and a failure's error text; a job
//! never leased reports nothing, and an engine nobody times keeps nothing.

use bytes::Bytes;
use jobyard_engine::{
    ConnId, Engine, EngineCore, JobEnd, JobId, Lease, LeaseClose, LeaseClosed, Millis, QueueId,
    ReserveOutcome, WaitMode,
};

const T0: Millis = 1_700_000_000_000;
const A: ConnId = 1;
const B: ConnId = 2;

fn queue(e: &mut Engine, name: &str) -> QueueId {
    let q = e.queue_id_or_create(name.as_bytes());
    e.pin(q);
    q
}

fn put(e: &mut Engine, q: QueueId, ttr: u32) -> JobId {
    e.put(q, 0, 0, ttr, Bytes::from_static(b"body"), true, T0)
        .id
}

fn take(e: &mut Engine, conn: ConnId, q: QueueId, now: Millis) -> JobId {
    match e.reserve(
        conn,
        &[q],
        WaitMode::Best,
        Lease::JobTtr,
        Some(0),
        false,
        now,
    ) {
        ReserveOutcome::Reserved(id) => id,
        other => panic!("expected a job, got {other:?}"),
    }
}

/// Stamps new leases at `clock` and takes the closes, as the broker's commit does.
fn commit(e: &mut EngineCore, clock: u64) -> Vec<(JobId, ConnId, LeaseClose, Option<u64>)> {
    e.stamp_leases(clock);
    e.take_lease_ends().for_each(drop);
    e.take_lease_closes()
        .map(|c: LeaseClosed| (c.job, c.holder, c.how, c.started))
        .collect()
}

#[test]
fn each_way_a_lease_ends_is_reported_with_its_holder_and_stamp() {
    let mut e = EngineCore::new();
    e.time_leases(true);
    let q = queue(&mut e, "work");
    let ids: Vec<JobId> = (0..5).map(|_| put(&mut e, q, 60)).collect();
    assert!(commit(&mut e, 1).is_empty(), "puts end no lease");
    for _ in 0..4 {
        take(&mut e, A, q, T0);
    }
    take(&mut e, B, q, T0);
    assert!(commit(&mut e, 10).is_empty());

    assert!(e.release(A, ids[0], 0, 0, T0));
    assert!(e.bury(A, ids[1], 0));
    assert!(e.finish(A, ids[2], JobEnd::ok(Bytes::new())));
    assert!(e.delete(A, ids[3]));
    e.disconnect(B, T0);
    assert_eq!(
        commit(&mut e, 20),
        vec![
            (ids[0], A, LeaseClose::Released, Some(10)),
            (ids[1], A, LeaseClose::Buried, Some(10)),
            (ids[4], B, LeaseClose::Disconnected, Some(10)),
        ],
        "a job that ends well with its first lease is not reported: its counts tell it"
    );

    // Its second lease on, a job's good end is reported too: it has a story.
    assert_eq!(take(&mut e, A, q, T0), ids[0]);
    assert!(e.finish(A, ids[0], JobEnd::ok(Bytes::new())));
    assert_eq!(take(&mut e, A, q, T0), ids[4]);
    assert!(e.delete(A, ids[4]));
    assert_eq!(
        commit(&mut e, 30),
        vec![
            (ids[0], A, LeaseClose::Ok, None),
            (ids[4], A, LeaseClose::Deleted, None),
        ]
    );
}

#[test]
fn an_expiry_and_a_failure_with_its_error_text() {
    let mut e = EngineCore::new();
    e.time_leases(true);
    let q = queue(&mut e, "work");
    let id = put(&mut e, q, 1);
    take(&mut e, A, q, T0);
    commit(&mut e, 5);
    e.tick(T0 + 5_000);
    assert_eq!(
        commit(&mut e, 6),
        vec![(id, A, LeaseClose::Expired, Some(5))]
    );
    take(&mut e, B, q, T0 + 6_000);
    let end = JobEnd::failed(Some(Bytes::from_static(b"disk full")));
    assert!(e.finish(B, id, end));
    e.stamp_leases(7);
    let closes: Vec<LeaseClosed> = e.take_lease_closes().collect();
    assert_eq!(closes.len(), 1);
    assert_eq!(closes[0].how, LeaseClose::Failed);
    assert_eq!(closes[0].started, None, "leased and failed before a stamp");
    assert_eq!(closes[0].error.as_deref(), Some(&b"disk full"[..]));
}

#[test]
fn an_engine_nobody_times_keeps_nothing() {
    let mut e = EngineCore::new();
    let q = queue(&mut e, "work");
    let id = put(&mut e, q, 60);
    take(&mut e, A, q, T0);
    assert!(e.release(A, id, 0, 0, T0));
    assert_eq!(e.take_lease_closes().count(), 0);
}
