//! Black-box tests of the engine's operations, one behaviour at a time, against the
//! beanstalkd semantics the engine implements (reference sections 2-4).

use std::collections::{BTreeMap, BTreeSet};

use bytes::Bytes;
use jobyard_engine::{
    Change, ConnId, Engine, EngineCore, JobId, JobState, Lease, Millis, NewJob, Notice, NoticeKind,
    PutState, QueueId, ReserveOutcome, WaitMode, SAFETY_MARGIN_MS,
};

/// An arbitrary wall-clock start, far from zero so subtractions never saturate.
const T0: Millis = 1_700_000_000_000;
const SEC: Millis = 1000;

const A: ConnId = 1;
const B: ConnId = 2;
const C: ConnId = 3;

fn body(id_hint: &str) -> Bytes {
    Bytes::copy_from_slice(id_hint.as_bytes())
}

/// A durable put; returns the new id.
fn put(e: &mut Engine, q: QueueId, pri: u32, delay: u32, ttr: u32, now: Millis) -> JobId {
    e.put(q, pri, delay, ttr, body("x"), true, now).id
}

/// A non-blocking beanstalkd-style reserve (`reserve-with-timeout 0`).
fn poll(e: &mut Engine, conn: ConnId, queues: &[QueueId], now: Millis) -> ReserveOutcome {
    e.reserve(
        conn,
        queues,
        WaitMode::Best,
        Lease::JobTtr,
        Some(0),
        true,
        now,
    )
}

/// A reserve that must hand out a job; returns its id.
fn take(e: &mut Engine, conn: ConnId, queues: &[QueueId], now: Millis) -> JobId {
    match poll(e, conn, queues, now) {
        ReserveOutcome::Reserved(id) => id,
        other => panic!("expected a job, got {other:?}"),
    }
}

/// A blocking beanstalkd reserve (`reserve`, or `reserve-with-timeout` when `timeout`).
fn block(
    e: &mut Engine,
    conn: ConnId,
    queues: &[QueueId],
    timeout: Option<Millis>,
    now: Millis,
) -> ReserveOutcome {
    e.reserve(
        conn,
        queues,
        WaitMode::Best,
        Lease::JobTtr,
        timeout,
        true,
        now,
    )
}

fn notices(e: &mut EngineCore) -> Vec<Notice> {
    e.take_notices().collect()
}

fn changes(e: &mut EngineCore) -> Vec<Change> {
    e.take_changes().collect()
}

fn state(e: &Engine, id: JobId) -> JobState {
    e.job(id).expect("job exists").state
}

fn notice(conn: ConnId, kind: NoticeKind) -> Notice {
    Notice { conn, kind }
}

/// A queue kept alive by a pin, as a server keeps `default`.
fn pinned(e: &mut Engine, name: &str) -> QueueId {
    let q = e.queue_id_or_create(name.as_bytes());
    e.pin(q);
    q
}

fn names(e: &Engine) -> Vec<String> {
    e.queues()
        .map(|q| String::from_utf8(q.name.to_vec()).unwrap())
        .collect()
}

// ----- ordering ---------------------------------------------------------------------------

#[test]
fn best_mode_hands_out_lowest_priority_then_lowest_id_across_queues() {
    let mut e = EngineCore::new();
    let a = pinned(&mut e, "a");
    let b = pinned(&mut e, "b");
    let j1 = put(&mut e, a, 5, 0, 60, T0);
    let j2 = put(&mut e, b, 3, 0, 60, T0);
    let j3 = put(&mut e, a, 3, 0, 60, T0);
    let j4 = put(&mut e, b, 5, 0, 60, T0);
    let j5 = put(&mut e, b, 0, 0, 60, T0);
    let got: Vec<JobId> = (0..5).map(|_| take(&mut e, A, &[a, b], T0)).collect();
    assert_eq!(got, vec![j5, j2, j3, j1, j4]);
    assert_eq!(poll(&mut e, A, &[a, b], T0), ReserveOutcome::TimedOut);
    // Only the watched queues count.
    let j6 = put(&mut e, a, 9, 0, 60, T0);
    let j7 = put(&mut e, b, 1, 0, 60, T0);
    assert_eq!(take(&mut e, B, &[a], T0), j6);
    assert_eq!(take(&mut e, B, &[b], T0), j7);
}

#[test]
fn a_released_job_goes_back_ahead_of_newer_jobs_of_the_same_priority() {
    let mut e = EngineCore::new();
    let q = pinned(&mut e, "q");
    let j1 = put(&mut e, q, 10, 0, 60, T0);
    assert_eq!(take(&mut e, A, &[q], T0), j1);
    let j2 = put(&mut e, q, 10, 0, 60, T0);
    assert!(e.release(A, j1, 10, 0, T0));
    assert_eq!(take(&mut e, B, &[q], T0), j1);
    assert_eq!(take(&mut e, B, &[q], T0), j2);
}

#[test]
fn peek_ready_is_the_next_job_to_be_reserved() {
    let mut e = EngineCore::new();
    let q = pinned(&mut e, "q");
    assert!(e.peek_ready(q).is_none());
    put(&mut e, q, 7, 0, 60, T0);
    let j2 = put(&mut e, q, 2, 0, 60, T0);
    put(&mut e, q, 2, 0, 60, T0);
    assert_eq!(e.peek_ready(q).unwrap().id, j2);
    assert_eq!(e.queue(q).head(), Some((2, j2)));
    assert_eq!(take(&mut e, A, &[q], T0), j2);
}

#[test]
fn in_order_mode_takes_from_the_first_queue_that_has_a_job() {
    let mut e = EngineCore::new();
    let a = pinned(&mut e, "a");
    let b = pinned(&mut e, "b");
    let in_b = put(&mut e, b, 0, 0, 60, T0);
    let in_a = put(&mut e, a, 100, 0, 60, T0);
    let in_order = |e: &mut Engine, queues: &[QueueId]| match e.reserve(
        A,
        queues,
        WaitMode::InOrder,
        Lease::Unlimited,
        Some(0),
        false,
        T0,
    ) {
        ReserveOutcome::Reserved(id) => id,
        other => panic!("expected a job, got {other:?}"),
    };
    // Gearman order: the first queue wins even though b's job is more urgent.
    assert_eq!(in_order(&mut e, &[a, b]), in_a);
    assert_eq!(in_order(&mut e, &[a, b]), in_b);
    let b1 = put(&mut e, b, 5, 0, 60, T0);
    put(&mut e, a, 5, 0, 60, T0);
    assert_eq!(in_order(&mut e, &[b, a]), b1);
    // An unlimited lease has no end.
    assert_eq!(e.job(b1).unwrap().due, 0);
    assert_eq!(e.time_left_secs(e.job(b1).unwrap(), T0), 0);
}

// ----- delete -----------------------------------------------------------------------------

#[test]
fn delete_works_on_ready_delayed_and_buried_jobs_from_any_connection() {
    let mut e = EngineCore::new();
    let q = pinned(&mut e, "q");
    let ready = put(&mut e, q, 1, 0, 60, T0);
    let delayed = put(&mut e, q, 1, 30, 60, T0);
    let buried = put(&mut e, q, 1, 0, 60, T0);
    // `ready` (id 1) is the one reserve would take; take `buried` by id instead.
    assert!(e.reserve_job(A, buried, Lease::JobTtr, T0));
    assert!(e.bury(A, buried, 1));
    assert_eq!(state(&e, delayed), JobState::Delayed);
    assert_eq!(state(&e, buried), JobState::Buried);
    changes(&mut e);

    assert!(e.delete(B, ready));
    assert!(e.delete(C, delayed));
    assert!(e.delete(B, buried));
    assert_eq!(e.job_count(), 0);
    assert_eq!(e.queue(q).cmd_delete, 3);
    assert_eq!(
        changes(&mut e),
        vec![
            Change::Delete { id: ready },
            Change::Delete { id: delayed },
            Change::Delete { id: buried },
        ]
    );
    // The delayed job's timer went with it.
    assert_eq!(e.next_deadline(), None);
    // Deleting again, or an unknown id, finds nothing.
    assert!(!e.delete(B, ready));
    assert!(!e.delete(B, 999));
}

#[test]
fn a_reserved_job_can_be_deleted_only_by_its_holder() {
    let mut e = EngineCore::new();
    let q = pinned(&mut e, "q");
    let id = put(&mut e, q, 1, 0, 60, T0);
    assert_eq!(take(&mut e, A, &[q], T0), id);
    assert!(!e.delete(B, id));
    assert_eq!(state(&e, id), JobState::Reserved);
    assert_eq!(e.queue(q).cmd_delete, 0);
    assert!(e.delete(A, id));
    assert!(e.job(id).is_none());
    assert_eq!(e.held_by(A).count(), 0);
    assert_eq!(e.queue(q).reserved, 0);
    // Its lease timer is gone too.
    assert_eq!(e.next_deadline(), None);
}

// ----- release ----------------------------------------------------------------------------

#[test]
fn release_without_delay_makes_the_job_ready_with_its_new_priority() {
    let mut e = EngineCore::new();
    let q = pinned(&mut e, "q");
    let id = put(&mut e, q, 2000, 0, 60, T0);
    changes(&mut e);
    assert_eq!(take(&mut e, A, &[q], T0), id);
    assert_eq!(e.counts().urgent, 0);
    assert!(!e.release(B, id, 5, 0, T0), "only the holder releases");
    assert!(!e.release(A, 999, 5, 0, T0));
    assert!(e.release(A, id, 5, 0, T0));
    let job = e.job(id).unwrap();
    assert_eq!(job.state, JobState::Ready);
    assert_eq!(job.pri, 5);
    assert_eq!(job.releases, 1);
    assert_eq!(job.reserves, 1);
    assert_eq!(e.counts().urgent, 1);
    assert_eq!(e.held_by(A).count(), 0);
    assert_eq!(
        changes(&mut e),
        vec![Change::Release {
            id,
            pri: 5,
            ready_at: 0
        }]
    );
    // No lease timer is left behind.
    assert_eq!(e.next_deadline(), None);
    // Releasing twice fails: the job is not held any more.
    assert!(!e.release(A, id, 5, 0, T0));
}

#[test]
fn release_with_delay_makes_the_job_delayed_until_its_time() {
    let mut e = EngineCore::new();
    let q = pinned(&mut e, "q");
    let id = put(&mut e, q, 1, 0, 60, T0);
    changes(&mut e);
    take(&mut e, A, &[q], T0);
    let now = T0 + 500;
    assert!(e.release(A, id, 9, 3, now));
    let job = e.job(id).unwrap();
    assert_eq!(job.state, JobState::Delayed);
    assert_eq!(job.due, now + 3 * SEC);
    assert_eq!(job.delay, 3);
    // As beanstalkd counts: asked at once, part of the first second has gone (2, not 3).
    assert_eq!(e.time_left_secs(job, now), 2);
    assert_eq!(e.time_left_secs(job, now + 1001), 1);
    assert_eq!(e.peek_delayed(q).unwrap().id, id);
    assert_eq!(
        changes(&mut e),
        vec![Change::Release {
            id,
            pri: 9,
            ready_at: now + 3 * SEC
        }]
    );
    assert_eq!(poll(&mut e, B, &[q], now), ReserveOutcome::TimedOut);
    assert_eq!(e.next_deadline(), Some(now + 3 * SEC));
    e.tick(now + 3 * SEC - 1);
    assert_eq!(state(&e, id), JobState::Delayed);
    e.tick(now + 3 * SEC);
    assert_eq!(state(&e, id), JobState::Ready);
    assert_eq!(e.job(id).unwrap().pri, 9);
    assert_eq!(take(&mut e, B, &[q], now + 3 * SEC), id);
}

// ----- bury and kick ----------------------------------------------------------------------

#[test]
fn bury_is_fifo_and_kick_takes_buried_jobs_first_oldest_first() {
    let mut e = EngineCore::new();
    let q = pinned(&mut e, "q");
    let j: Vec<JobId> = (0..3).map(|_| put(&mut e, q, 1, 0, 60, T0)).collect();
    let delayed = put(&mut e, q, 1, 10, 60, T0);
    for _ in 0..3 {
        take(&mut e, A, &[q], T0);
    }
    assert!(!e.bury(B, j[0], 7), "only the holder buries");
    // Burial order 2, 0, 1: peeks and kicks follow it, not ids.
    assert!(e.bury(A, j[2], 7));
    assert!(e.bury(A, j[0], 8));
    assert!(e.bury(A, j[1], 9));
    assert!(!e.bury(A, j[1], 9), "a buried job is not held");
    assert_eq!(e.job(j[0]).unwrap().pri, 8);
    assert_eq!(e.job(j[0]).unwrap().buries, 1);
    assert_eq!(e.queue(q).buried_len(), 3);
    assert_eq!(e.counts().buried, 3);
    assert_eq!(e.peek_buried(q).unwrap().id, j[2]);
    assert_eq!(e.held_by(A).count(), 0);

    assert_eq!(e.kick(q, 2, T0), 2);
    assert_eq!(state(&e, j[2]), JobState::Ready);
    assert_eq!(state(&e, j[0]), JobState::Ready);
    assert_eq!(state(&e, j[1]), JobState::Buried);
    assert_eq!(state(&e, delayed), JobState::Delayed);
    assert_eq!(e.job(j[2]).unwrap().kicks, 1);
    assert_eq!(e.peek_buried(q).unwrap().id, j[1]);

    // Buried jobs remain: delayed ones are not touched even with bound to spare.
    assert_eq!(e.kick(q, 10, T0), 1);
    assert_eq!(state(&e, j[1]), JobState::Ready);
    assert_eq!(state(&e, delayed), JobState::Delayed);
    assert!(e.peek_buried(q).is_none());
    // Now the delayed job is kicked.
    assert_eq!(e.kick(q, 10, T0), 1);
    assert_eq!(state(&e, delayed), JobState::Ready);
    assert_eq!(
        e.next_deadline(),
        None,
        "the delay timer went with the kick"
    );
    assert_eq!(e.kick(q, 10, T0), 0);
}

#[test]
fn kick_takes_delayed_jobs_soonest_first_up_to_the_bound() {
    let mut e = EngineCore::new();
    let q = pinned(&mut e, "q");
    let d30 = put(&mut e, q, 1, 30, 60, T0);
    let d10 = put(&mut e, q, 1, 10, 60, T0);
    let d20 = put(&mut e, q, 1, 20, 60, T0);
    assert_eq!(e.peek_delayed(q).unwrap().id, d10);
    changes(&mut e);
    assert_eq!(e.kick(q, 2, T0), 2);
    assert_eq!(state(&e, d10), JobState::Ready);
    assert_eq!(state(&e, d20), JobState::Ready);
    assert_eq!(state(&e, d30), JobState::Delayed);
    assert_eq!(
        changes(&mut e),
        vec![Change::Kick { id: d10 }, Change::Kick { id: d20 }]
    );
    assert_eq!(e.kick(q, 0, T0), 0);
    assert_eq!(state(&e, d30), JobState::Delayed);
    // The remaining delay timer is still there, the kicked ones are gone.
    assert_eq!(e.next_deadline(), Some(T0 + 30 * SEC));
}

#[test]
fn kick_only_touches_its_own_queue() {
    let mut e = EngineCore::new();
    let a = pinned(&mut e, "a");
    let b = pinned(&mut e, "b");
    let in_b = put(&mut e, b, 1, 5, 60, T0);
    assert_eq!(e.kick(a, 100, T0), 0);
    assert_eq!(state(&e, in_b), JobState::Delayed);
}

#[test]
fn kick_job_kicks_one_buried_or_delayed_job_in_any_queue() {
    let mut e = EngineCore::new();
    let a = pinned(&mut e, "a");
    let b = pinned(&mut e, "b");
    let ready = put(&mut e, a, 1, 0, 60, T0);
    let buried = put(&mut e, b, 1, 0, 60, T0);
    let delayed = put(&mut e, b, 1, 60, 60, T0);
    let reserved = put(&mut e, a, 1, 0, 60, T0);
    assert!(e.reserve_job(A, buried, Lease::JobTtr, T0));
    assert!(e.bury(A, buried, 1));
    assert!(e.reserve_job(A, reserved, Lease::JobTtr, T0));
    changes(&mut e);

    assert!(!e.kick_job(ready, T0));
    assert!(!e.kick_job(reserved, T0));
    assert!(!e.kick_job(12345, T0));
    assert!(e.kick_job(buried, T0));
    assert!(e.kick_job(delayed, T0));
    assert_eq!(state(&e, buried), JobState::Ready);
    assert_eq!(state(&e, delayed), JobState::Ready);
    assert_eq!(e.job(buried).unwrap().kicks, 1);
    assert!(!e.kick_job(buried, T0), "a ready job cannot be kicked");
    assert_eq!(
        changes(&mut e),
        vec![Change::Kick { id: buried }, Change::Kick { id: delayed }]
    );
    // Only the reserved job's lease is left on the clock.
    assert_eq!(e.next_deadline(), Some(T0 + 60 * SEC));
}

#[test]
fn a_kicked_job_is_handed_to_a_waiter() {
    let mut e = EngineCore::new();
    let q = pinned(&mut e, "q");
    let id = put(&mut e, q, 1, 100, 60, T0);
    assert_eq!(block(&mut e, B, &[q], None, T0), ReserveOutcome::Waiting);
    assert!(e.kick_job(id, T0));
    assert_eq!(notices(&mut e), vec![notice(B, NoticeKind::Reserved(id))]);
    assert_eq!(e.job(id).unwrap().owner, B);
}

// ----- touch and leases -------------------------------------------------------------------

#[test]
fn touch_restarts_the_lease_with_the_full_ttr() {
    let mut e = EngineCore::new();
    let q = pinned(&mut e, "q");
    let id = put(&mut e, q, 1, 0, 10, T0);
    take(&mut e, A, &[q], T0);
    assert_eq!(e.job(id).unwrap().due, T0 + 10 * SEC);
    assert!(!e.touch(B, id, T0 + 8 * SEC), "only the holder touches");
    assert!(!e.touch(A, 999, T0 + 8 * SEC));
    assert!(e.touch(A, id, T0 + 8 * SEC));
    assert_eq!(e.job(id).unwrap().due, T0 + 18 * SEC);
    // beanstalkd's answer right after a touch of a 10 s lease (pheanstalk's testTouch).
    assert_eq!(e.time_left_secs(e.job(id).unwrap(), T0 + 8 * SEC), 9);
    assert_eq!(e.next_deadline(), Some(T0 + 18 * SEC));
    e.tick(T0 + 10 * SEC);
    assert_eq!(state(&e, id), JobState::Reserved);
    e.tick(T0 + 18 * SEC - 1);
    assert_eq!(state(&e, id), JobState::Reserved);
    assert!(notices(&mut e).is_empty());
    e.tick(T0 + 18 * SEC);
    assert_eq!(state(&e, id), JobState::Ready);
    assert_eq!(
        notices(&mut e),
        vec![notice(A, NoticeKind::LeaseExpired(id))]
    );
    // Touch makes no durable change.
    let c = changes(&mut e);
    assert!(c.iter().all(|c| matches!(c, Change::Put { .. })), "{c:?}");
}

#[test]
fn touch_for_restarts_the_lease_with_the_length_asked_for() {
    let mut e = EngineCore::new();
    let q = pinned(&mut e, "q");
    let id = put(&mut e, q, 1, 0, 10, T0);
    take(&mut e, A, &[q], T0);
    assert!(
        !e.touch_for(B, id, 30 * SEC, T0 + SEC),
        "only the holder extends"
    );
    assert!(e.touch_for(A, id, 30 * SEC, T0 + SEC));
    assert_eq!(e.job(id).unwrap().due, T0 + 31 * SEC);
    assert_eq!(e.next_deadline(), Some(T0 + 31 * SEC));
    e.tick(T0 + 10 * SEC);
    assert_eq!(
        state(&e, id),
        JobState::Reserved,
        "the old deadline is gone"
    );
    e.tick(T0 + 31 * SEC);
    assert_eq!(state(&e, id), JobState::Ready);
    assert_eq!(
        notices(&mut e),
        vec![notice(A, NoticeKind::LeaseExpired(id))]
    );
}

#[test]
fn touch_of_a_zero_ttr_job_gives_the_same_minimum_lease_as_reserve() {
    // The engine treats ttr 0 as 1 second when leasing; touch must too, or the touched
    // lease would end the moment it was touched.
    let mut e = EngineCore::new();
    let q = pinned(&mut e, "q");
    let id = put(&mut e, q, 1, 0, 0, T0);
    take(&mut e, A, &[q], T0);
    assert_eq!(e.job(id).unwrap().due, T0 + SEC);
    assert!(e.touch(A, id, T0 + 500));
    assert_eq!(e.job(id).unwrap().due, T0 + 500 + SEC);
    e.tick(T0 + 500);
    assert_eq!(state(&e, id), JobState::Reserved);
}

#[test]
fn touch_leaves_an_unlimited_lease_unlimited() {
    let mut e = EngineCore::new();
    let q = pinned(&mut e, "q");
    let id = put(&mut e, q, 1, 0, 5, T0);
    assert!(e.reserve_job(A, id, Lease::Unlimited, T0));
    assert!(e.touch(A, id, T0 + 1));
    assert_eq!(e.job(id).unwrap().due, 0);
    assert_eq!(e.next_deadline(), None);
}

#[test]
fn a_fixed_lease_lasts_its_milliseconds() {
    let mut e = EngineCore::new();
    let q = pinned(&mut e, "q");
    let id = put(&mut e, q, 1, 0, 600, T0);
    assert_eq!(
        e.reserve(
            A,
            &[q],
            WaitMode::InOrder,
            Lease::For(250),
            Some(0),
            false,
            T0
        ),
        ReserveOutcome::Reserved(id)
    );
    assert_eq!(e.job(id).unwrap().due, T0 + 250);
    e.tick(T0 + 250);
    assert_eq!(state(&e, id), JobState::Ready);
}

#[test]
fn an_expired_lease_makes_the_job_ready_counts_it_and_tells_the_holder() {
    let mut e = EngineCore::new();
    let q = pinned(&mut e, "q");
    let id = put(&mut e, q, 1, 0, 2, T0);
    changes(&mut e);
    take(&mut e, A, &[q], T0);
    assert_eq!(e.counts().reserved, 1);
    assert_eq!(e.queue(q).reserved, 1);
    assert_eq!(e.next_deadline(), Some(T0 + 2 * SEC));
    e.tick(T0 + 2 * SEC - 1);
    assert_eq!(state(&e, id), JobState::Reserved);
    assert_eq!(e.job_timeouts(), 0);
    e.tick(T0 + 2 * SEC);
    let job = e.job(id).unwrap();
    assert_eq!(job.state, JobState::Ready);
    assert_eq!(job.timeouts, 1);
    assert_eq!(job.reserves, 1);
    assert_eq!(job.releases, 0);
    assert_eq!(e.job_timeouts(), 1);
    assert_eq!(e.counts().reserved, 0);
    assert_eq!(e.counts().ready, 1);
    assert_eq!(
        notices(&mut e),
        vec![notice(A, NoticeKind::LeaseExpired(id))]
    );
    assert!(changes(&mut e).is_empty(), "expiry is not logged");
    // The connection lost the job.
    assert_eq!(e.held_by(A).count(), 0);
    assert!(!e.release(A, id, 1, 0, T0 + 2 * SEC));
    assert!(!e.bury(A, id, 1));
    assert!(!e.touch(A, id, T0 + 2 * SEC));
    // It can be had again, and a second expiry counts again.
    assert_eq!(take(&mut e, B, &[q], T0 + 3 * SEC), id);
    e.tick(T0 + 5 * SEC);
    assert_eq!(e.job(id).unwrap().timeouts, 2);
    assert_eq!(e.job(id).unwrap().reserves, 2);
    assert_eq!(e.job_timeouts(), 2);
    assert_eq!(
        notices(&mut e),
        vec![notice(B, NoticeKind::LeaseExpired(id))]
    );
}

#[test]
fn an_expired_lease_goes_to_a_waiting_connection() {
    let mut e = EngineCore::new();
    let q = pinned(&mut e, "q");
    let id = put(&mut e, q, 1, 0, 1, T0);
    take(&mut e, A, &[q], T0);
    assert_eq!(block(&mut e, B, &[q], None, T0), ReserveOutcome::Waiting);
    e.tick(T0 + SEC);
    let n = notices(&mut e);
    assert!(
        n.contains(&notice(A, NoticeKind::LeaseExpired(id))),
        "{n:?}"
    );
    assert!(n.contains(&notice(B, NoticeKind::Reserved(id))), "{n:?}");
    assert_eq!(e.job(id).unwrap().owner, B);
    assert_eq!(state(&e, id), JobState::Reserved);
}

// ----- blocking reserve -------------------------------------------------------------------

#[test]
fn a_put_goes_to_the_oldest_waiter() {
    let mut e = EngineCore::new();
    let q = pinned(&mut e, "q");
    assert_eq!(block(&mut e, A, &[q], None, T0), ReserveOutcome::Waiting);
    assert_eq!(block(&mut e, B, &[q], None, T0), ReserveOutcome::Waiting);
    assert!(e.is_waiting(A) && e.is_waiting(B));
    assert_eq!(e.waiting_count(), 2);
    assert_eq!(e.queue(q).waiting(), 2);
    assert!(notices(&mut e).is_empty());

    let j1 = put(&mut e, q, 1, 0, 60, T0 + 1);
    assert_eq!(notices(&mut e), vec![notice(A, NoticeKind::Reserved(j1))]);
    let job = e.job(j1).unwrap();
    assert_eq!(job.state, JobState::Reserved);
    assert_eq!(job.owner, A);
    assert_eq!(job.reserves, 1);
    assert_eq!(
        job.due,
        T0 + 1 + 60 * SEC,
        "the lease starts when the job is handed over"
    );
    assert!(!e.is_waiting(A));
    assert!(e.is_waiting(B));
    assert_eq!(e.queue(q).waiting(), 1);

    let j2 = put(&mut e, q, 1, 0, 60, T0 + 2);
    assert_eq!(notices(&mut e), vec![notice(B, NoticeKind::Reserved(j2))]);
    assert_eq!(e.waiting_count(), 0);
    let j3 = put(&mut e, q, 1, 0, 60, T0 + 3);
    assert!(notices(&mut e).is_empty());
    assert_eq!(state(&e, j3), JobState::Ready);
}

#[test]
fn a_waiter_gets_the_best_job_across_its_queues() {
    let mut e = EngineCore::new();
    let a = pinned(&mut e, "a");
    let b = pinned(&mut e, "b");
    assert_eq!(block(&mut e, A, &[a, b], None, T0), ReserveOutcome::Waiting);
    assert_eq!(e.queue(a).waiting(), 1);
    assert_eq!(e.queue(b).waiting(), 1);
    let id = put(&mut e, b, 1, 0, 60, T0);
    assert_eq!(notices(&mut e), vec![notice(A, NoticeKind::Reserved(id))]);
    // Served once: it no longer waits on either queue.
    assert_eq!(e.queue(a).waiting(), 0);
    assert_eq!(e.queue(b).waiting(), 0);
    put(&mut e, a, 1, 0, 60, T0);
    assert!(notices(&mut e).is_empty());
}

#[test]
fn a_waiter_is_not_served_from_queues_it_does_not_watch() {
    let mut e = EngineCore::new();
    let a = pinned(&mut e, "a");
    let b = pinned(&mut e, "b");
    assert_eq!(block(&mut e, A, &[a], None, T0), ReserveOutcome::Waiting);
    let id = put(&mut e, b, 1, 0, 60, T0);
    assert!(notices(&mut e).is_empty());
    assert_eq!(state(&e, id), JobState::Ready);
    assert!(e.is_waiting(A));
}

#[test]
fn a_delayed_job_becoming_ready_goes_to_a_waiter() {
    let mut e = EngineCore::new();
    let q = pinned(&mut e, "q");
    let id = put(&mut e, q, 1, 2, 60, T0);
    assert_eq!(block(&mut e, A, &[q], None, T0), ReserveOutcome::Waiting);
    e.tick(T0 + 2 * SEC);
    assert_eq!(notices(&mut e), vec![notice(A, NoticeKind::Reserved(id))]);
}

#[test]
fn a_wait_times_out() {
    let mut e = EngineCore::new();
    let q = pinned(&mut e, "q");
    assert_eq!(
        block(&mut e, A, &[q], Some(5 * SEC), T0),
        ReserveOutcome::Waiting
    );
    assert_eq!(e.next_deadline(), Some(T0 + 5 * SEC));
    e.tick(T0 + 5 * SEC - 1);
    assert!(notices(&mut e).is_empty());
    assert!(e.is_waiting(A));
    e.tick(T0 + 5 * SEC);
    assert_eq!(notices(&mut e), vec![notice(A, NoticeKind::TimedOut)]);
    assert!(!e.is_waiting(A));
    assert_eq!(e.queue(q).waiting(), 0);
    // Later jobs stay ready.
    let id = put(&mut e, q, 1, 0, 60, T0 + 6 * SEC);
    assert!(notices(&mut e).is_empty());
    assert_eq!(state(&e, id), JobState::Ready);
}

#[test]
fn a_served_wait_does_not_time_out_later() {
    let mut e = EngineCore::new();
    let q = pinned(&mut e, "q");
    block(&mut e, A, &[q], Some(5 * SEC), T0);
    let id = put(&mut e, q, 1, 0, 60, T0 + SEC);
    assert_eq!(notices(&mut e), vec![notice(A, NoticeKind::Reserved(id))]);
    e.tick(T0 + 10 * SEC);
    assert!(notices(&mut e).is_empty());
}

#[test]
fn cancel_wait_ends_a_wait_silently() {
    let mut e = EngineCore::new();
    let q = pinned(&mut e, "q");
    block(&mut e, A, &[q], Some(5 * SEC), T0);
    assert!(e.cancel_wait(A));
    assert!(!e.cancel_wait(A));
    assert_eq!(e.next_deadline(), None);
    put(&mut e, q, 1, 0, 60, T0);
    e.tick(T0 + 10 * SEC);
    assert!(notices(&mut e).is_empty());
}

#[test]
fn reserve_with_zero_timeout_answers_timed_out_at_once() {
    let mut e = EngineCore::new();
    let q = pinned(&mut e, "q");
    assert_eq!(poll(&mut e, A, &[q], T0), ReserveOutcome::TimedOut);
    assert!(!e.is_waiting(A));
    assert_eq!(e.queue(q).waiting(), 0);
    assert_eq!(e.next_deadline(), None);
    // A delayed or buried job is not "ready".
    put(&mut e, q, 1, 5, 60, T0);
    assert_eq!(poll(&mut e, A, &[q], T0), ReserveOutcome::TimedOut);
    assert!(!e.has_ready(&[q], T0));
}

// ----- DEADLINE_SOON ----------------------------------------------------------------------

#[test]
fn deadline_soon_is_answered_at_once_only_when_nothing_is_ready() {
    let mut e = EngineCore::new();
    let q = pinned(&mut e, "q");
    let held = put(&mut e, q, 1, 0, 5, T0);
    take(&mut e, A, &[q], T0);
    // Outside the margin: a plain timeout.
    let outside = T0 + 5 * SEC - SAFETY_MARGIN_MS - 1;
    assert_eq!(poll(&mut e, A, &[q], outside), ReserveOutcome::TimedOut);
    // Inside the margin (deadline - now <= 1 s).
    let inside = T0 + 5 * SEC - SAFETY_MARGIN_MS;
    assert_eq!(poll(&mut e, A, &[q], inside), ReserveOutcome::DeadlineSoon);
    assert_eq!(
        block(&mut e, A, &[q], None, inside),
        ReserveOutcome::DeadlineSoon
    );
    assert!(
        !e.is_waiting(A),
        "DEADLINE_SOON does not leave a wait behind"
    );
    // The warning changes nothing.
    assert_eq!(state(&e, held), JobState::Reserved);
    assert_eq!(e.job(held).unwrap().owner, A);
    // Another connection is not warned.
    assert_eq!(poll(&mut e, B, &[q], inside), ReserveOutcome::TimedOut);
    // Without warn_deadline (Gearman) there is no warning.
    assert_eq!(
        e.reserve(
            A,
            &[q],
            WaitMode::Best,
            Lease::JobTtr,
            Some(0),
            false,
            inside
        ),
        ReserveOutcome::TimedOut
    );
    // With a ready job, the job wins (beanstalkd issue #646).
    let other = put(&mut e, q, 1, 0, 5, inside);
    assert_eq!(take(&mut e, A, &[q], inside), other);
}

#[test]
fn deadline_soon_ends_a_wait_one_margin_before_the_lease_ends() {
    let mut e = EngineCore::new();
    let q = pinned(&mut e, "q");
    let held = put(&mut e, q, 1, 0, 5, T0);
    take(&mut e, A, &[q], T0);
    assert_eq!(block(&mut e, A, &[q], None, T0), ReserveOutcome::Waiting);
    let soon = T0 + 5 * SEC - SAFETY_MARGIN_MS;
    assert_eq!(e.next_deadline(), Some(soon));
    e.tick(soon - 1);
    assert!(notices(&mut e).is_empty());
    assert!(e.is_waiting(A));
    e.tick(soon);
    assert_eq!(notices(&mut e), vec![notice(A, NoticeKind::DeadlineSoon)]);
    assert!(!e.is_waiting(A));
    assert_eq!(state(&e, held), JobState::Reserved);
    // A job arriving later is not handed to the connection that stopped waiting.
    let id = put(&mut e, q, 1, 0, 5, soon + 1);
    assert!(notices(&mut e).is_empty());
    assert_eq!(state(&e, id), JobState::Ready);
}

#[test]
fn deadline_soon_uses_the_soonest_of_several_leases_and_beats_a_later_timeout() {
    let mut e = EngineCore::new();
    let q = pinned(&mut e, "q");
    let long = put(&mut e, q, 1, 0, 100, T0);
    let short = put(&mut e, q, 2, 0, 10, T0);
    assert_eq!(take(&mut e, A, &[q], T0), long);
    assert_eq!(take(&mut e, A, &[q], T0), short);
    assert_eq!(
        block(&mut e, A, &[q], Some(60 * SEC), T0),
        ReserveOutcome::Waiting
    );
    e.tick(T0 + 9 * SEC);
    assert_eq!(notices(&mut e), vec![notice(A, NoticeKind::DeadlineSoon)]);
    // The timeout timer was removed with the wait.
    e.tick(T0 + 60 * SEC - 1);
    assert!(!notices(&mut e).contains(&notice(A, NoticeKind::TimedOut)));
}

#[test]
fn a_wait_that_times_out_before_the_margin_gets_timed_out() {
    let mut e = EngineCore::new();
    let q = pinned(&mut e, "q");
    put(&mut e, q, 1, 0, 100, T0);
    take(&mut e, A, &[q], T0);
    block(&mut e, A, &[q], Some(2 * SEC), T0);
    e.tick(T0 + 2 * SEC);
    assert_eq!(notices(&mut e), vec![notice(A, NoticeKind::TimedOut)]);
    e.tick(T0 + 99 * SEC);
    assert!(
        notices(&mut e).is_empty(),
        "no DEADLINE_SOON after the wait ended"
    );
}

// ----- pause ------------------------------------------------------------------------------

#[test]
fn a_paused_queue_hands_out_nothing_until_its_timer_ends_the_pause() {
    let mut e = EngineCore::new();
    let q = pinned(&mut e, "q");
    let j1 = put(&mut e, q, 5, 0, 60, T0);
    e.pause(q, 10, T0);
    assert!(e.queue(q).is_paused(T0));
    assert_eq!(e.queue(q).pause_secs, 10);
    assert_eq!(e.queue(q).cmd_pause, 1);
    assert_eq!(e.pause_left_secs(q, T0 + 500), 9);
    assert!(!e.has_ready(&[q], T0));
    assert_eq!(poll(&mut e, A, &[q], T0), ReserveOutcome::TimedOut);
    assert_eq!(block(&mut e, A, &[q], None, T0), ReserveOutcome::Waiting);
    assert_eq!(block(&mut e, B, &[q], None, T0), ReserveOutcome::Waiting);
    let j2 = put(&mut e, q, 1, 0, 60, T0 + SEC);
    assert!(notices(&mut e).is_empty());
    // Peeking ignores the pause.
    assert_eq!(e.peek_ready(q).unwrap().id, j2);
    assert_eq!(e.next_deadline(), Some(T0 + 10 * SEC));
    e.tick(T0 + 10 * SEC - 1);
    assert!(notices(&mut e).is_empty());
    e.tick(T0 + 10 * SEC);
    let n = notices(&mut e);
    assert_eq!(
        n,
        vec![
            notice(A, NoticeKind::Reserved(j2)),
            notice(B, NoticeKind::Reserved(j1))
        ]
    );
    assert!(!e.queue(q).is_paused(T0 + 10 * SEC));
    assert_eq!(e.queue(q).pause_secs, 0);
    assert_eq!(e.pause_left_secs(q, T0 + 10 * SEC), 0);
}

#[test]
fn pausing_for_zero_seconds_resumes_now_and_serves_waiters() {
    let mut e = EngineCore::new();
    let q = pinned(&mut e, "q");
    let id = put(&mut e, q, 5, 0, 60, T0);
    e.pause(q, 100, T0);
    block(&mut e, A, &[q], None, T0);
    assert!(notices(&mut e).is_empty());
    e.pause(q, 0, T0 + SEC);
    assert_eq!(notices(&mut e), vec![notice(A, NoticeKind::Reserved(id))]);
    assert_eq!(e.queue(q).cmd_pause, 2);
    assert_eq!(e.queue(q).pause_secs, 0);
    // The old unpause timer is gone; only the lease is on the clock.
    assert_eq!(e.next_deadline(), Some(T0 + SEC + 60 * SEC));
}

#[test]
fn pausing_again_replaces_the_previous_pause() {
    let mut e = EngineCore::new();
    let q = pinned(&mut e, "q");
    put(&mut e, q, 5, 0, 60, T0);
    e.pause(q, 100, T0);
    e.pause(q, 2, T0);
    assert_eq!(e.next_deadline(), Some(T0 + 2 * SEC));
    e.tick(T0 + 2 * SEC);
    assert!(e.has_ready(&[q], T0 + 2 * SEC));
    assert_eq!(e.next_deadline(), None);
}

#[test]
fn a_pause_does_not_stop_other_queues_or_put_kick_delete_and_reserve_job() {
    let mut e = EngineCore::new();
    let a = pinned(&mut e, "a");
    let b = pinned(&mut e, "b");
    let in_a = put(&mut e, a, 0, 0, 60, T0);
    e.pause(a, 60, T0);
    let in_b = put(&mut e, b, 100, 0, 60, T0);
    // A reserve watching both still gets b's job although a's is more urgent.
    assert_eq!(take(&mut e, A, &[a, b], T0), in_b);
    assert_eq!(poll(&mut e, A, &[a, b], T0), ReserveOutcome::TimedOut);
    // A waiter on both gets b's next job.
    block(&mut e, B, &[a, b], None, T0);
    let in_b2 = put(&mut e, b, 100, 0, 60, T0);
    assert_eq!(
        notices(&mut e),
        vec![notice(B, NoticeKind::Reserved(in_b2))]
    );
    // reserve-job ignores the pause.
    assert!(e.reserve_job(C, in_a, Lease::JobTtr, T0));
    assert!(e.bury(C, in_a, 0));
    assert_eq!(e.kick(a, 1, T0), 1);
    assert!(e.delete(A, in_a));
}

// ----- disconnect -------------------------------------------------------------------------

#[test]
fn disconnect_makes_held_jobs_ready_without_counting_and_serves_waiters() {
    let mut e = EngineCore::new();
    let q = pinned(&mut e, "q");
    let j1 = put(&mut e, q, 1, 0, 60, T0);
    let j2 = put(&mut e, q, 2, 0, 60, T0);
    take(&mut e, A, &[q], T0);
    take(&mut e, A, &[q], T0);
    let held: BTreeSet<JobId> = e.held_by(A).collect();
    assert_eq!(held, BTreeSet::from([j1, j2]));
    assert_eq!(block(&mut e, B, &[q], None, T0), ReserveOutcome::Waiting);
    changes(&mut e);
    e.disconnect(A, T0 + SEC);
    assert_eq!(e.held_by(A).count(), 0);
    // The best of the two goes to the waiter, the other is ready.
    assert_eq!(notices(&mut e), vec![notice(B, NoticeKind::Reserved(j1))]);
    assert_eq!(e.job(j1).unwrap().owner, B);
    assert_eq!(state(&e, j2), JobState::Ready);
    for id in [j1, j2] {
        let job = e.job(id).unwrap();
        assert_eq!(job.timeouts, 0);
        assert_eq!(job.releases, 0);
    }
    assert!(changes(&mut e).is_empty());
    // Their leases are no longer on the clock: only B's lease of j1 is.
    assert_eq!(e.next_deadline(), Some(T0 + SEC + 60 * SEC));
    e.tick(T0 + 60 * SEC);
    assert!(notices(&mut e).is_empty());
}

#[test]
fn disconnect_ends_a_wait() {
    let mut e = EngineCore::new();
    let q = pinned(&mut e, "q");
    block(&mut e, A, &[q], Some(10 * SEC), T0);
    e.disconnect(A, T0);
    assert!(!e.is_waiting(A));
    assert_eq!(e.queue(q).waiting(), 0);
    assert_eq!(e.next_deadline(), None);
    let id = put(&mut e, q, 1, 0, 60, T0);
    assert!(notices(&mut e).is_empty());
    assert_eq!(state(&e, id), JobState::Ready);
    // Disconnecting an unknown connection is harmless.
    e.disconnect(99, T0);
}

// ----- queue lifetime ---------------------------------------------------------------------

#[test]
fn queues_are_created_on_demand_and_found_by_name() {
    let mut e = EngineCore::new();
    assert_eq!(e.queue_id(b"x"), None);
    let x = e.queue_id_or_create(b"x");
    assert_eq!(e.queue_id_or_create(b"x"), x);
    assert_eq!(e.queue_id(b"x"), Some(x));
    assert_eq!(&e.queue(x).name[..], b"x");
    assert_eq!(e.queue_count(), 1);
}

#[test]
fn an_unreferenced_queue_is_dropped_and_the_last_takes_its_listing_slot() {
    let mut e = EngineCore::new();
    let ids: Vec<QueueId> = ["a", "b", "c", "d"]
        .iter()
        .map(|n| {
            let q = e.queue_id_or_create(n.as_bytes());
            e.add_consumer(q);
            q
        })
        .collect();
    assert_eq!(names(&e), ["a", "b", "c", "d"]);
    e.remove_consumer(ids[1]);
    assert_eq!(names(&e), ["a", "d", "c"]);
    assert_eq!(e.queue_id(b"b"), None);
    assert_eq!(e.queue_count(), 3);
    // A new queue goes to the end of the list.
    let f = e.queue_id_or_create(b"f");
    e.add_producer(f);
    assert_eq!(names(&e), ["a", "d", "c", "f"]);
    e.remove_consumer(ids[0]);
    assert_eq!(names(&e), ["f", "d", "c"]);
    e.remove_producer(f);
    assert_eq!(names(&e), ["c", "d"]);
    // Ids of the remaining queues still work.
    assert_eq!(&e.queue(ids[2]).name[..], b"c");
    assert_eq!(&e.queue(ids[3]).name[..], b"d");
}

#[test]
fn each_kind_of_reference_keeps_a_queue_alive() {
    let mut e = EngineCore::new();
    let q = e.queue_id_or_create(b"q");
    e.add_consumer(q);
    e.add_consumer(q);
    e.add_producer(q);
    e.pin(q);
    e.remove_consumer(q);
    e.remove_consumer(q);
    assert!(e.queue_id(b"q").is_some());
    e.remove_producer(q);
    assert!(e.queue_id(b"q").is_some());
    e.unpin(q);
    assert!(e.queue_id(b"q").is_none());
    assert_eq!(e.queue_count(), 0);
}

#[test]
fn a_queue_with_jobs_lives_until_its_last_job_is_deleted() {
    let mut e = EngineCore::new();
    let q = e.queue_id_or_create(b"q");
    e.add_producer(q);
    let ready = put(&mut e, q, 1, 0, 60, T0);
    let delayed = put(&mut e, q, 1, 60, 60, T0);
    let buried = put(&mut e, q, 1, 0, 60, T0);
    let reserved = put(&mut e, q, 1, 0, 60, T0);
    assert!(e.reserve_job(A, buried, Lease::JobTtr, T0));
    assert!(e.bury(A, buried, 1));
    assert!(e.reserve_job(A, reserved, Lease::JobTtr, T0));
    e.remove_producer(q);
    for id in [ready, delayed, buried] {
        assert!(e.queue_id(b"q").is_some());
        assert!(e.delete(B, id));
    }
    // Only the reserved job keeps it now.
    assert_eq!(e.queue(q).reserved, 1);
    assert!(e.queue_id(b"q").is_some());
    assert!(e.delete(A, reserved));
    assert!(e.queue_id(b"q").is_none());
    assert_eq!(e.queue_count(), 0);
}

#[test]
fn dropping_a_paused_queue_cancels_its_unpause_timer() {
    let mut e = EngineCore::new();
    let q = pinned(&mut e, "q");
    e.pause(q, 30, T0);
    assert_eq!(e.next_deadline(), Some(T0 + 30 * SEC));
    e.unpin(q);
    assert!(e.queue_id(b"q").is_none());
    assert_eq!(e.next_deadline(), None);
    // A new queue reusing the slot is not affected by the old pause.
    let r = pinned(&mut e, "r");
    assert!(!e.queue(r).is_paused(T0));
    e.tick(T0 + 30 * SEC);
    assert!(e.queue_id(b"r").is_some());
}

#[test]
fn a_queue_left_empty_by_deletes_is_recreated_fresh() {
    let mut e = EngineCore::new();
    let q = e.queue_id_or_create(b"q");
    let id = put(&mut e, q, 1, 0, 60, T0);
    assert!(e.delete(A, id));
    assert!(e.queue_id(b"q").is_none());
    let q = e.queue_id_or_create(b"q");
    assert_eq!(e.queue(q).total_jobs, 0);
    assert_eq!(e.queue(q).cmd_delete, 0);
}

// ----- reserve-job ------------------------------------------------------------------------

#[test]
fn reserve_job_takes_a_ready_delayed_or_buried_job_but_not_a_reserved_one() {
    let mut e = EngineCore::new();
    let a = pinned(&mut e, "a");
    let b = pinned(&mut e, "b");
    let ready = put(&mut e, a, 1, 0, 60, T0);
    let delayed = put(&mut e, b, 1, 30, 60, T0);
    let buried = put(&mut e, a, 1, 0, 60, T0);
    assert!(e.reserve_job(C, buried, Lease::JobTtr, T0));
    assert!(e.bury(C, buried, 1));

    for id in [ready, delayed, buried] {
        assert!(e.reserve_job(A, id, Lease::JobTtr, T0), "job {id}");
        let job = e.job(id).unwrap();
        assert_eq!(job.state, JobState::Reserved);
        assert_eq!(job.owner, A);
        assert_eq!(job.due, T0 + 60 * SEC);
    }
    assert_eq!(e.job(buried).unwrap().reserves, 2);
    assert_eq!(e.job(ready).unwrap().reserves, 1);
    assert_eq!(e.counts().reserved, 3);
    assert_eq!(e.counts().buried, 0);
    assert_eq!(e.counts().delayed, 0);
    // Reserved by this or another connection, or unknown: no.
    assert!(!e.reserve_job(A, ready, Lease::JobTtr, T0));
    assert!(!e.reserve_job(B, ready, Lease::JobTtr, T0));
    assert!(!e.reserve_job(B, 4242, Lease::JobTtr, T0));
    // The delayed job's own timer is gone: its delay ending does nothing.
    e.tick(T0 + 30 * SEC);
    assert_eq!(state(&e, delayed), JobState::Reserved);
    // Releasing makes it ready whatever state it came from.
    assert!(e.release(A, buried, 1, 0, T0 + 30 * SEC));
    assert_eq!(state(&e, buried), JobState::Ready);
}

// ----- WakeOnly ---------------------------------------------------------------------------

#[test]
fn a_wake_only_wait_is_woken_once_and_takes_nothing() {
    let mut e = EngineCore::new();
    let q = pinned(&mut e, "q");
    let wake_only = |e: &mut Engine, conn| {
        e.reserve(
            conn,
            &[q],
            WaitMode::WakeOnly,
            Lease::Unlimited,
            None,
            false,
            T0,
        )
    };
    assert_eq!(wake_only(&mut e, A), ReserveOutcome::Waiting);
    assert_eq!(block(&mut e, B, &[q], None, T0), ReserveOutcome::Waiting);
    let id = put(&mut e, q, 1, 0, 60, T0);
    // A is woken but takes nothing; B, waiting too, gets the job.
    assert_eq!(
        notices(&mut e),
        vec![
            notice(A, NoticeKind::Wake),
            notice(B, NoticeKind::Reserved(id))
        ]
    );
    assert!(!e.is_waiting(A));
    assert_eq!(e.job(id).unwrap().owner, B);

    // With a job ready, a WakeOnly reserve says so instead of sleeping or taking it.
    let id2 = put(&mut e, q, 1, 0, 60, T0);
    assert_eq!(wake_only(&mut e, A), ReserveOutcome::Available);
    assert!(!e.is_waiting(A));
    assert_eq!(state(&e, id2), JobState::Ready);

    // Woken only once: after the wake, further puts do not notify.
    take(&mut e, C, &[q], T0);
    assert_eq!(wake_only(&mut e, A), ReserveOutcome::Waiting);
    put(&mut e, q, 1, 0, 60, T0);
    put(&mut e, q, 1, 0, 60, T0);
    assert_eq!(notices(&mut e), vec![notice(A, NoticeKind::Wake)]);
    assert_eq!(e.counts().ready, 2);
}

// ----- changes ----------------------------------------------------------------------------

#[test]
fn changes_are_emitted_in_order_for_durable_jobs_only() {
    let mut e = EngineCore::new();
    let q = pinned(&mut e, "q");
    let volatile = e.put(q, 1, 0, 60, body("v"), false, T0).id;
    let id = e.put(q, 2, 0, 60, body("d"), true, T0).id;
    assert!(e.has_changes());
    let c = changes(&mut e);
    assert_eq!(
        c,
        vec![Change::Put {
            id,
            queue: Bytes::from_static(b"q"),
            pri: 2,
            ttr: 60,
            delay: 0,
            created: T0,
            state: PutState::Ready,
            unique: None,
            attrs: None,
            attempt: 0,
            body: body("d"),
        }]
    );
    assert!(!e.has_changes());

    // The volatile job goes through every operation without a single change.
    assert_eq!(take(&mut e, A, &[q], T0), volatile);
    assert!(e.release(A, volatile, 1, 1, T0));
    assert!(e.kick_job(volatile, T0));
    assert_eq!(take(&mut e, A, &[q], T0), volatile);
    assert!(e.touch(A, volatile, T0));
    assert!(e.bury(A, volatile, 1));
    assert_eq!(e.kick(q, 1, T0), 1);
    assert!(e.delete(A, volatile));
    assert!(changes(&mut e).is_empty());

    // The durable one logs each state change, but not reserve, touch or expiry.
    assert_eq!(take(&mut e, A, &[q], T0), id);
    assert!(e.touch(A, id, T0));
    assert!(changes(&mut e).is_empty());
    assert!(e.release(A, id, 3, 2, T0));
    assert_eq!(e.kick(q, 5, T0), 1);
    assert_eq!(take(&mut e, A, &[q], T0), id);
    assert!(e.bury(A, id, 4));
    assert!(e.kick_job(id, T0));
    take(&mut e, A, &[q], T0);
    e.tick(T0 + 60 * SEC);
    assert!(e.delete(B, id));
    assert_eq!(
        changes(&mut e),
        vec![
            Change::Release {
                id,
                pri: 3,
                ready_at: T0 + 2 * SEC
            },
            Change::Kick { id },
            Change::Bury { id, pri: 4 },
            Change::Kick { id },
            Change::Delete { id },
        ]
    );
}

#[test]
fn a_delayed_put_is_logged_with_its_ready_time() {
    let mut e = EngineCore::new();
    let q = pinned(&mut e, "q");
    let id = put(&mut e, q, 1, 7, 60, T0);
    match &changes(&mut e)[..] {
        [Change::Put {
            id: got,
            state,
            delay,
            ..
        }] => {
            assert_eq!(*got, id);
            assert_eq!(*state, PutState::Delayed(T0 + 7 * SEC));
            assert_eq!(*delay, 7);
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn reserve_job_of_a_buried_or_delayed_job_is_logged_so_a_restart_agrees() {
    // A reserved job comes back ready after a restart. A job taken straight from buried or
    // delayed must therefore leave a record that it left that state, or replaying the log
    // would bring it back buried/delayed (and it would stay buried after its lease ran out).
    let mut e = EngineCore::new();
    let q = pinned(&mut e, "q");
    let buried = put(&mut e, q, 1, 0, 60, T0);
    let delayed = put(&mut e, q, 1, 60, 60, T0);
    let ready = put(&mut e, q, 1, 0, 60, T0);
    assert!(e.reserve_job(A, buried, Lease::JobTtr, T0));
    assert!(e.bury(A, buried, 1));
    let mut log = changes(&mut e);
    assert!(e.reserve_job(B, buried, Lease::JobTtr, T0));
    assert!(e.reserve_job(B, delayed, Lease::JobTtr, T0));
    assert!(e.reserve_job(B, ready, Lease::JobTtr, T0));
    let c = changes(&mut e);
    assert_eq!(
        c,
        vec![Change::Kick { id: buried }, Change::Kick { id: delayed }]
    );
    // The kick counter is not touched: it is not a kick command.
    assert_eq!(e.job(buried).unwrap().kicks, 0);
    log.extend(c);
    // The leases run out: all three are ready, and so they are after a replay.
    e.tick(T0 + 60 * SEC);
    let mut r = EngineCore::new();
    for change in log {
        r.replay(change);
    }
    for id in [buried, delayed, ready] {
        assert_eq!(state(&e, id), JobState::Ready);
        assert_eq!(state(&r, id), JobState::Ready, "job {id} after replay");
    }
}

// ----- unique keys ------------------------------------------------------------------------

#[test]
fn unique_keys_are_found_per_queue_and_forgotten_with_the_job() {
    let mut e = EngineCore::new();
    let a = pinned(&mut e, "a");
    let b = pinned(&mut e, "b");
    let new = |q, key: &'static [u8]| NewJob {
        queue: q,
        pri: 1,
        ttr: 60,
        ready_at: 0,
        delay: 0,
        body: body("u"),
        unique: Some(Bytes::from_static(key)),
        durable: true,
        attrs: None,
    };
    let j1 = e.put_job(new(a, b"k"), T0).id;
    assert_eq!(e.find_unique(a, b"k"), Some(j1));
    assert_eq!(e.find_unique(b, b"k"), None);
    assert_eq!(e.unique_of(j1).map(|k| &k[..]), Some(&b"k"[..]));
    let j2 = e.put_job(new(b, b"k"), T0).id;
    assert_eq!(e.find_unique(b, b"k"), Some(j2));
    // A second job with the key takes it over.
    let j3 = e.put_job(new(a, b"k"), T0).id;
    assert_eq!(e.find_unique(a, b"k"), Some(j3));
    assert_eq!(e.unique_of(j1), None);
    // Deleting the old holder does not forget the new one's key.
    assert!(e.delete(A, j1));
    assert_eq!(e.find_unique(a, b"k"), Some(j3));
    assert!(e.delete(A, j3));
    assert_eq!(e.find_unique(a, b"k"), None);
    assert_eq!(e.find_unique(b, b"k"), Some(j2));
}

#[test]
fn put_job_with_a_past_ready_time_is_ready() {
    let mut e = EngineCore::new();
    let q = pinned(&mut e, "q");
    let job = |ready_at| NewJob {
        queue: q,
        pri: 1,
        ttr: 60,
        ready_at,
        delay: 0,
        body: body("p"),
        unique: None,
        durable: true,
        attrs: None,
    };
    let past = e.put_job(job(T0 - 1), T0).id;
    let now = e.put_job(job(T0), T0).id;
    let later = e.put_job(job(T0 + 1), T0).id;
    assert_eq!(state(&e, past), JobState::Ready);
    assert_eq!(state(&e, now), JobState::Ready);
    assert_eq!(state(&e, later), JobState::Delayed);
    assert_eq!(e.job(later).unwrap().due, T0 + 1);
}

// ----- counts -----------------------------------------------------------------------------

#[test]
fn counts_follow_every_state_and_urgency() {
    let mut e = EngineCore::new();
    let a = pinned(&mut e, "a");
    let b = pinned(&mut e, "b");
    put(&mut e, a, 1023, 0, 60, T0);
    put(&mut e, b, 1024, 0, 60, T0);
    put(&mut e, b, 0, 10, 60, T0);
    let r = put(&mut e, a, 5000, 0, 60, T0);
    let z = put(&mut e, a, 6000, 0, 60, T0);
    assert!(e.reserve_job(A, r, Lease::JobTtr, T0));
    assert!(e.reserve_job(A, z, Lease::JobTtr, T0));
    assert!(e.bury(A, z, 1));
    let c = e.counts();
    assert_eq!(c.urgent, 1);
    assert_eq!(c.ready, 2);
    assert_eq!(c.reserved, 1);
    assert_eq!(c.delayed, 1);
    assert_eq!(c.buried, 1);
    assert_eq!(e.queue(a).urgent, 1);
    assert_eq!(e.queue(b).urgent, 0);
    assert_eq!(e.queue(a).total_jobs, 3);
    assert_eq!(e.total_jobs(), 5);
    assert_eq!(e.job_count(), 5);
    // A buried urgent job is not counted as urgent; a kicked one is.
    assert_eq!(e.kick(a, 1, T0), 1);
    assert_eq!(e.counts().urgent, 2);
}

#[test]
fn live_bytes_grow_with_durable_jobs_and_shrink_when_they_go() {
    let mut e = EngineCore::new();
    let q = pinned(&mut e, "q");
    assert_eq!(e.live_bytes(), 0);
    let id = e
        .put(q, 1, 0, 60, Bytes::from(vec![0u8; 1000]), true, T0)
        .id;
    let one = e.live_bytes();
    assert!(one >= 1000);
    let v = e
        .put(q, 1, 0, 60, Bytes::from(vec![0u8; 1000]), false, T0)
        .id;
    assert_eq!(e.live_bytes(), one, "volatile jobs are not in the log");
    assert!(e.delete(A, v));
    assert!(e.delete(A, id));
    assert_eq!(e.live_bytes(), 0);
}

// ----- snapshot and replay ----------------------------------------------------------------

/// Everything about a job that must survive a restart, with reserved shown as ready.
#[derive(Debug, PartialEq, Eq, Clone)]
struct Durable {
    queue: Vec<u8>,
    state: JobState,
    pri: u32,
    ttr: u32,
    delay: u32,
    created: Millis,
    due: Millis,
    body: Vec<u8>,
    unique: Option<Vec<u8>>,
}

fn durable_view(e: &Engine, ids: impl Iterator<Item = JobId>) -> BTreeMap<JobId, Durable> {
    ids.filter_map(|id| e.job(id).map(|j| (id, j)))
        .filter(|(_, j)| j.durable)
        .map(|(id, j)| {
            let state = match j.state {
                JobState::Reserved => JobState::Ready,
                s => s,
            };
            let due = if state == JobState::Delayed { j.due } else { 0 };
            (
                id,
                Durable {
                    queue: e.queue(j.queue).name.to_vec(),
                    state,
                    pri: j.pri,
                    ttr: j.ttr,
                    delay: j.delay,
                    created: j.created,
                    due,
                    body: j.body.in_memory().expect("in memory").to_vec(),
                    unique: e.unique_of(id).map(|k| k.to_vec()),
                },
            )
        })
        .collect()
}

/// Per queue name, the buried job ids in burial order.
fn buried_order(e: &Engine, ids: impl Iterator<Item = JobId>) -> BTreeMap<Vec<u8>, Vec<JobId>> {
    let mut by_queue: BTreeMap<Vec<u8>, Vec<(u64, JobId)>> = BTreeMap::new();
    for id in ids {
        if let Some(j) = e.job(id) {
            if j.state == JobState::Buried && j.durable {
                by_queue
                    .entry(e.queue(j.queue).name.to_vec())
                    .or_default()
                    .push((j.buried_seq(), id));
            }
        }
    }
    by_queue
        .into_iter()
        .map(|(q, mut v)| {
            v.sort();
            (q, v.into_iter().map(|(_, id)| id).collect())
        })
        .collect()
}

/// An engine with jobs in every state in three queues, burials interleaved across queues,
/// a volatile job, a unique key and some deleted ids (the highest id is deleted too).
fn busy_engine() -> EngineCore {
    let mut e = EngineCore::new();
    let a = pinned(&mut e, "alpha");
    let b = pinned(&mut e, "beta");
    let c = pinned(&mut e, "gamma");
    let mut ids = Vec::new();
    for i in 0..12u32 {
        let q = [a, b, c][i as usize % 3];
        ids.push(
            e.put(q, i % 4, 0, 30 + i, body(&format!("job {i}")), true, T0)
                .id,
        );
    }
    let delayed = put(&mut e, b, 7, 20, 60, T0);
    let keyed = e
        .put_job(
            NewJob {
                queue: c,
                pri: 3,
                ttr: 9,
                ready_at: T0 + 5 * SEC,
                delay: 5,
                body: body("keyed"),
                unique: Some(Bytes::from_static(b"key-1")),
                durable: true,
                attrs: None,
            },
            T0,
        )
        .id;
    let _ = keyed;
    e.put(a, 0, 0, 60, body("volatile"), false, T0);
    // Bury in an order that interleaves queues and is not id order.
    for &i in &[7usize, 2, 9, 4, 0, 11] {
        assert!(e.reserve_job(A, ids[i], Lease::JobTtr, T0));
        assert!(e.bury(A, ids[i], 100 + i as u32));
    }
    // Reserve a few (they come back ready), release one with a delay and new priority.
    assert!(e.reserve_job(B, ids[1], Lease::JobTtr, T0));
    assert!(e.reserve_job(B, ids[5], Lease::JobTtr, T0));
    assert!(e.release(B, ids[5], 42, 3, T0));
    assert!(e.reserve_job(C, ids[9], Lease::JobTtr, T0)); // from buried
    assert!(e.delete(A, ids[3]));
    assert!(e.delete(A, delayed));
    let last = put(&mut e, a, 1, 0, 1, T0);
    assert!(e.delete(A, last));
    e
}

#[test]
fn snapshot_replayed_into_a_fresh_engine_rebuilds_the_same_jobs() {
    let mut e = busy_engine();
    let snapshot = e.snapshot();
    assert!(snapshot.iter().all(|c| matches!(c, Change::Put { .. })));
    let mut r = EngineCore::new();
    for change in snapshot {
        r.replay(change);
    }
    r.raise_next_id(e.next_id());
    let top = e.next_id() + 1;
    let all = || 0..top;
    assert_eq!(durable_view(&r, all()), durable_view(&e, all()));
    assert_eq!(buried_order(&r, all()), buried_order(&e, all()));
    // The volatile job is not in the snapshot.
    assert_eq!(r.job_count(), e.job_count() - 1);
    // Every durable queue is there; the reserved jobs are ready.
    let mut names_r = names(&r);
    names_r.sort();
    assert_eq!(names_r, ["alpha", "beta", "gamma"]);
    assert_eq!(r.counts().reserved, 0);
    assert_eq!(
        r.counts().ready,
        e.counts().ready + e.counts().reserved - 1 // minus the volatile ready job
    );
    assert_eq!(r.counts().buried, e.counts().buried);
    assert_eq!(r.counts().delayed, e.counts().delayed);
    // Replaying is not counted as new jobs, and makes no changes or notices.
    assert_eq!(r.total_jobs(), 0);
    assert!(!r.has_changes());
    assert!(notices(&mut r).is_empty());
    // Ids continue from where the original was, past the deleted highest id.
    let next = e.next_id();
    let q = r.queue_id(b"alpha").unwrap();
    assert_eq!(put(&mut r, q, 1, 0, 1, T0), next);
    assert_eq!(put(&mut e, q, 1, 0, 1, T0), next);
    // The unique key is back.
    let c = r.queue_id(b"gamma").unwrap();
    assert!(r.find_unique(c, b"key-1").is_some());
    // Delayed jobs come back with their time and become ready on it.
    r.tick(T0 + 5 * SEC);
    e.tick(T0 + 5 * SEC);
    assert_eq!(durable_view(&r, all()), durable_view(&e, all()));
}

#[test]
fn the_change_log_replayed_into_a_fresh_engine_rebuilds_the_same_jobs() {
    let mut log: Vec<Change> = Vec::new();
    let mut e = EngineCore::new();
    let q = pinned(&mut e, "q");
    let r2 = pinned(&mut e, "r");
    for i in 0..6 {
        put(&mut e, [q, r2][i % 2], (i % 3) as u32, 0, 10, T0);
    }
    let d = put(&mut e, q, 9, 4, 10, T0);
    log.extend(e.take_changes());
    let a = take(&mut e, A, &[q, r2], T0);
    let b = take(&mut e, A, &[q, r2], T0);
    let c = take(&mut e, B, &[q, r2], T0);
    assert!(e.bury(A, b, 50));
    assert!(e.bury(A, a, 51));
    assert!(e.release(B, c, 77, 0, T0));
    assert!(e.kick_job(d, T0));
    take(&mut e, C, &[q, r2], T0); // stays reserved
    log.extend(e.take_changes());
    let mut r = EngineCore::new();
    for change in log {
        r.replay(change);
    }
    let top = e.next_id();
    let all = || 0..top;
    assert_eq!(durable_view(&r, all()), durable_view(&e, all()));
    assert_eq!(buried_order(&r, all()), buried_order(&e, all()));
    assert_eq!(r.next_id(), e.next_id());
}

#[test]
fn replay_ignores_changes_to_unknown_jobs_and_a_repeated_put_replaces_the_job() {
    let mut r = EngineCore::new();
    r.replay(Change::Delete { id: 5 });
    r.replay(Change::Kick { id: 5 });
    r.replay(Change::Bury { id: 5, pri: 1 });
    r.replay(Change::Release {
        id: 5,
        pri: 1,
        ready_at: 0,
    });
    assert_eq!(r.job_count(), 0);
    assert_eq!(r.queue_count(), 0);
    let put = |queue: &'static [u8], pri| Change::Put {
        id: 5,
        queue: Bytes::from_static(queue),
        pri,
        ttr: 1,
        delay: 0,
        created: T0,
        state: PutState::Ready,
        unique: None,
        attrs: None,
        attempt: 0,
        body: body("b"),
    };
    r.replay(put(b"one", 1));
    r.replay(put(b"two", 2));
    assert_eq!(r.job_count(), 1);
    assert_eq!(&r.queue(r.job(5).unwrap().queue).name[..], b"two");
    assert_eq!(r.job(5).unwrap().pri, 2);
    assert!(r.queue_id(b"one").is_none(), "the emptied queue is dropped");
    assert_eq!(r.counts().ready, 1);
    assert_eq!(r.next_id(), 6);
    r.replay(Change::Delete { id: 5 });
    assert_eq!(r.queue_count(), 0);
    assert_eq!(r.next_id(), 6, "ids are not reused after a replayed delete");
    r.raise_next_id(3);
    assert_eq!(r.next_id(), 6);
    r.raise_next_id(10);
    assert_eq!(r.next_id(), 10);
}

#[test]
fn replayed_jobs_are_handed_to_waiters_only_after_recovery() {
    // replay() never serves anyone (recovery happens before any connection exists), but a
    // recovered ready job is there for the first reserve.
    let mut r = EngineCore::new();
    r.replay(Change::Put {
        id: 1,
        queue: Bytes::from_static(b"q"),
        pri: 1,
        ttr: 5,
        delay: 0,
        created: T0,
        state: PutState::Ready,
        unique: None,
        attrs: None,
        attempt: 0,
        body: body("b"),
    });
    let q = r.queue_id(b"q").unwrap();
    assert_eq!(take(&mut r, A, &[q], T0), 1);
}
