//! The hand-out switch a leader turns off when it cannot be sure its lease still holds
//! (docs/postgres.md): reserves find nothing and wait, waiters are not served, and puts and
//! the rest go on; once it is back on, the next job a queue gains serves its waiter.

use bytes::Bytes;
use jobyard_engine::{
    ConnId, EngineCore, Lease, Millis, NoticeKind, QueueId, ReserveOutcome, WaitMode,
};

const T0: Millis = 1_700_000_000_000;
const A: ConnId = 1;
const B: ConnId = 2;

fn put(e: &mut EngineCore, q: QueueId) {
    e.put(q, 0, 0, 60, Bytes::from_static(b"x"), true, T0);
}

fn reserve(
    e: &mut EngineCore,
    conn: ConnId,
    q: QueueId,
    timeout: Option<Millis>,
) -> ReserveOutcome {
    e.reserve(
        conn,
        &[q],
        WaitMode::Best,
        Lease::JobTtr,
        timeout,
        false,
        T0,
    )
}

/// Whether `conn` was handed a job by a waiter's notice since the last look.
fn served(e: &mut EngineCore, conn: ConnId) -> bool {
    e.take_notices()
        .any(|n| n.conn == conn && matches!(n.kind, NoticeKind::Reserved(_)))
}

#[test]
fn nothing_is_handed_out_while_the_switch_is_off() {
    let mut e = EngineCore::new();
    let q = e.queue_id_or_create(b"q");
    e.pin(q);
    put(&mut e, q);
    e.set_handing_out(false);
    assert!(matches!(
        reserve(&mut e, A, q, Some(0)),
        ReserveOutcome::TimedOut
    ));
    assert!(matches!(
        reserve(&mut e, B, q, None),
        ReserveOutcome::Waiting
    ));
    put(&mut e, q);
    assert!(
        !served(&mut e, B),
        "a waiter was served while handing out was off"
    );
    assert_eq!(e.job_count(), 2, "puts go on");

    e.set_handing_out(true);
    put(&mut e, q);
    assert!(served(&mut e, B), "the waiter is served once a job comes");
    assert!(matches!(
        reserve(&mut e, A, q, Some(0)),
        ReserveOutcome::Reserved(_)
    ));
}
