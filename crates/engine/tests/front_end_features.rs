//! Tests of the engine features every front end builds on: a job's end with an outcome and
//! its watchers, attributes, lease limits per queue, pauses without an end, fencing tokens
//! that survive a restart, and paged listings.

use std::sync::Arc;

use bytes::Bytes;
use jobyard_engine::{
    Change, ConnId, Cursor, EndStatus, Engine, EngineCore, JobEnd, JobId, JobState, JobUpdate,
    Lease, Millis, NewJob, Notice, NoticeKind, QueueId, ReserveOutcome, WaitMode,
};

const T0: Millis = 1_700_000_000_000;
const SEC: Millis = 1000;
const A: ConnId = 1;
const B: ConnId = 2;
const C: ConnId = 3;

fn queue(e: &mut Engine, name: &str) -> QueueId {
    let q = e.queue_id_or_create(name.as_bytes());
    e.pin(q);
    q
}

fn put(e: &mut Engine, q: QueueId, pri: u32) -> JobId {
    e.put(q, pri, 0, 60, Bytes::from_static(b"body"), true, T0)
        .id
}

fn poll(e: &mut Engine, conn: ConnId, q: QueueId, now: Millis) -> ReserveOutcome {
    e.reserve(
        conn,
        &[q],
        WaitMode::Best,
        Lease::JobTtr,
        Some(0),
        false,
        now,
    )
}

fn block(e: &mut Engine, conn: ConnId, q: QueueId, now: Millis) -> ReserveOutcome {
    e.reserve(conn, &[q], WaitMode::Best, Lease::JobTtr, None, false, now)
}

fn take(e: &mut Engine, conn: ConnId, q: QueueId) -> JobId {
    match poll(e, conn, q, T0) {
        ReserveOutcome::Reserved(id) => id,
        other => panic!("expected a job, got {other:?}"),
    }
}

fn notices(e: &mut EngineCore) -> Vec<Notice> {
    e.take_notices().collect()
}

fn changes(e: &mut EngineCore) -> Vec<Change> {
    e.take_changes().collect()
}

fn replayed(changes: Vec<Change>) -> EngineCore {
    let mut r = EngineCore::new();
    for c in changes {
        r.replay(c);
    }
    r
}

// ----- ends and watchers ------------------------------------------------------------------

#[test]
fn every_watcher_hears_the_outcome_in_the_transition_that_ends_the_job() {
    let mut e = EngineCore::new();
    let q = queue(&mut e, "q");
    let id = put(&mut e, q, 1);
    assert!(e.watch(B, id));
    assert!(e.watch(C, id));
    assert!(e.watch(C, id), "a second watch by one session is kept");
    assert!(!e.watch(B, 999), "no such job");
    assert_eq!(e.watcher_count(id), 3);
    changes(&mut e);
    assert_eq!(take(&mut e, A, q), id);
    assert!(
        !e.finish(B, id, JobEnd::ok(Bytes::new())),
        "only the holder ends a leased job"
    );
    let end = JobEnd {
        exit_code: Some(3),
        ..JobEnd::ok(Bytes::from_static(b"result"))
    };
    assert!(e.finish(A, id, end.clone()));
    assert!(e.job(id).is_none());
    let heard: Vec<(ConnId, Arc<JobEnd>)> = notices(&mut e)
        .into_iter()
        .map(|n| match n.kind {
            NoticeKind::Ended(j, end) if j == id => (n.conn, end),
            other => panic!("unexpected {other:?}"),
        })
        .collect();
    assert_eq!(
        heard.iter().map(|(c, _)| *c).collect::<Vec<_>>(),
        vec![B, C, C],
        "in watch order, twice for the double watch"
    );
    assert!(heard.iter().all(|(_, e)| **e == end));
    assert_eq!(
        changes(&mut e),
        vec![Change::End { id, end }],
        "outcome in the end record"
    );
    assert_eq!(e.watcher_count(id), 0);
    assert!(e.watched_by(C).is_empty());
    assert_eq!(e.queue(q).total_ok, 1);
}

#[test]
fn a_plain_delete_is_logged_as_before_and_watchers_hear_deleted() {
    let mut e = EngineCore::new();
    let q = queue(&mut e, "q");
    let id = put(&mut e, q, 1);
    e.watch(B, id);
    changes(&mut e);
    assert!(e.delete(A, id));
    assert_eq!(changes(&mut e), vec![Change::Delete { id }]);
    match &notices(&mut e)[..] {
        [Notice {
            conn: B,
            kind: NoticeKind::Ended(j, end),
        }] => {
            assert_eq!(*j, id);
            assert_eq!(end.status, EndStatus::Deleted);
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(e.queue(q).cmd_delete, 1);
}

#[test]
fn a_failure_is_counted_and_an_unlogged_job_logs_nothing() {
    let mut e = EngineCore::new();
    let q = queue(&mut e, "q");
    let id = e.put(q, 1, 0, 60, Bytes::from_static(b"x"), false, T0).id;
    e.watch(B, id);
    assert!(e.finish(A, id, JobEnd::failed(Some(Bytes::from_static(b"boom")))));
    assert!(changes(&mut e).is_empty());
    assert_eq!(e.queue(q).total_failed, 1);
    let n = notices(&mut e);
    assert!(matches!(&n[0].kind, NoticeKind::Ended(_, end)
        if end.status == EndStatus::Failed && end.error.as_deref() == Some(&b"boom"[..])));
}

#[test]
fn updates_reach_watchers_and_leave_no_trace_in_the_log() {
    let mut e = EngineCore::new();
    let q = queue(&mut e, "q");
    let id = put(&mut e, q, 1);
    e.watch(B, id);
    changes(&mut e);
    e.publish(id, JobUpdate::Data(Bytes::from_static(b"partial")));
    assert!(changes(&mut e).is_empty());
    let n = notices(&mut e);
    assert_eq!(n.len(), 1);
    assert!(matches!(&n[0].kind, NoticeKind::Update(j, u)
        if *j == id && **u == JobUpdate::Data(Bytes::from_static(b"partial"))));
    e.publish(999, JobUpdate::Warning(Bytes::new()));
    assert!(notices(&mut e).is_empty());
}

#[test]
fn unwatching_and_disconnecting_end_watches() {
    let mut e = EngineCore::new();
    let q = queue(&mut e, "q");
    let id = put(&mut e, q, 1);
    e.watch(B, id);
    e.watch(B, id);
    e.watch(C, id);
    assert_eq!(e.unwatch(B, id), 2);
    assert_eq!(e.watched_by(B), vec![id]);
    e.disconnect(C, T0);
    assert_eq!(e.watcher_count(id), 1);
    assert_eq!(e.unwatch(B, id), 0);
    assert!(e.watched_by(B).is_empty());
    e.delete(A, id);
    assert!(notices(&mut e).is_empty(), "nobody watches any more");
}

// ----- attributes -------------------------------------------------------------------------

#[test]
fn attributes_travel_with_the_put_through_the_log_and_snapshots() {
    let mut e = EngineCore::new();
    let q = queue(&mut e, "q");
    let attrs = Bytes::from_static(b"{\"row\":42}");
    let id = e
        .put_job(
            NewJob {
                queue: q,
                pri: 5,
                ttr: 60,
                body: Bytes::from_static(b"b"),
                durable: true,
                attrs: Some(attrs.clone()),
                ..NewJob::default()
            },
            T0,
        )
        .id;
    assert_eq!(e.attrs_of(id), Some(&attrs));
    let log = changes(&mut e);
    assert!(matches!(&log[0], Change::Put { attrs: Some(a), .. } if *a == attrs));
    assert_eq!(replayed(log).attrs_of(id), Some(&attrs));
    assert_eq!(replayed(e.snapshot()).attrs_of(id), Some(&attrs));
    e.delete(A, id);
    assert_eq!(e.attrs_of(id), None, "dropped with the job");
}

// ----- lease limits -----------------------------------------------------------------------

#[test]
fn a_queue_at_its_lease_limit_hands_out_nothing_more() {
    let mut e = EngineCore::new();
    let q = queue(&mut e, "target");
    let other = queue(&mut e, "other");
    e.set_lease_limit(q, 2, T0);
    let (j1, j2, _j3) = (put(&mut e, q, 1), put(&mut e, q, 1), put(&mut e, q, 1));
    let o = put(&mut e, other, 100);
    assert_eq!(take(&mut e, A, q), j1);
    assert_eq!(take(&mut e, A, q), j2);
    assert_eq!(poll(&mut e, B, q, T0), ReserveOutcome::TimedOut);
    assert!(!e.has_ready(&[q], T0));
    // Across several queues the limited one is skipped even with the better priority.
    let best = e.reserve(
        B,
        &[q, other],
        WaitMode::Best,
        Lease::JobTtr,
        Some(0),
        false,
        T0,
    );
    assert_eq!(best, ReserveOutcome::Reserved(o));
}

#[test]
fn a_waiter_is_served_as_soon_as_a_lease_of_a_full_queue_ends() {
    // Each way a lease can end makes room: delete, finish, release, bury, expiry, disconnect.
    type End = fn(&mut EngineCore, JobId);
    let ends: [(&str, End); 6] = [
        ("delete", |e, id| assert!(e.delete(A, id))),
        ("finish", |e, id| {
            assert!(e.finish(A, id, JobEnd::ok(Bytes::new())))
        }),
        ("release", |e, id| assert!(e.release(A, id, 1, 0, T0))),
        ("bury", |e, id| assert!(e.bury(A, id, 1))),
        ("expiry", |e, _| e.tick(T0 + 61 * SEC)),
        ("disconnect", |e, _| e.disconnect(A, T0)),
    ];
    for (how, end) in ends {
        let mut e = EngineCore::new();
        let q = queue(&mut e, "target");
        e.set_lease_limit(q, 1, T0);
        let first = put(&mut e, q, 1);
        let second = put(&mut e, q, 2);
        assert_eq!(take(&mut e, A, q), first);
        assert_eq!(block(&mut e, B, q, T0), ReserveOutcome::Waiting, "{how}");
        notices(&mut e);
        end(&mut e, first);
        let served: Vec<JobId> = notices(&mut e)
            .into_iter()
            .filter(|n| n.conn == B)
            .filter_map(|n| match n.kind {
                NoticeKind::Reserved(id) => Some(id),
                _ => None,
            })
            .collect();
        assert_eq!(served.len(), 1, "{how}: the waiter got a job");
        assert!(served[0] == second || served[0] == first, "{how}");
        assert_eq!(e.queue(q).reserved, 1, "{how}: still one lease at a time");
    }
}

#[test]
fn raising_a_lease_limit_serves_waiters() {
    let mut e = EngineCore::new();
    let q = queue(&mut e, "target");
    e.set_lease_limit(q, 1, T0);
    put(&mut e, q, 1);
    let second = put(&mut e, q, 1);
    take(&mut e, A, q);
    assert_eq!(block(&mut e, B, q, T0), ReserveOutcome::Waiting);
    e.set_lease_limit(q, 2, T0);
    assert!(notices(&mut e)
        .iter()
        .any(|n| n.conn == B && n.kind == NoticeKind::Reserved(second)));
    e.set_lease_limit(q, 0, T0);
    assert!(e.queue(q).has_lease_room());
}

// ----- pauses -----------------------------------------------------------------------------

#[test]
fn a_pause_without_an_end_holds_until_resumed() {
    let mut e = EngineCore::new();
    let q = e.queue_id_or_create(b"held");
    e.add_consumer(q);
    let id = put(&mut e, q, 1);
    e.pause_forever(q);
    assert_eq!(
        e.next_deadline(),
        None,
        "no timer for a pause without an end"
    );
    e.tick(T0 + 365 * 24 * 3600 * SEC);
    assert!(e.queue(q).is_paused(T0 + 365 * 24 * 3600 * SEC));
    assert_eq!(poll(&mut e, A, q, T0), ReserveOutcome::TimedOut);
    assert_eq!(block(&mut e, A, q, T0), ReserveOutcome::Waiting);
    e.delete(B, id);
    e.cancel_wait(A);
    e.remove_consumer(q);
    assert_eq!(
        e.queue_id(b"held"),
        Some(q),
        "a paused queue is not forgotten"
    );
    let id = put(&mut e, q, 1);
    assert_eq!(block(&mut e, A, q, T0), ReserveOutcome::Waiting);
    e.resume(q, T0);
    assert!(!e.queue(q).is_paused(T0));
    assert_eq!(
        notices(&mut e),
        vec![Notice {
            conn: A,
            kind: NoticeKind::Reserved(id)
        }]
    );
}

#[test]
fn resume_also_ends_a_timed_pause_and_its_timer() {
    let mut e = EngineCore::new();
    let q = queue(&mut e, "q");
    e.pause(q, 60, T0);
    assert_eq!(e.next_deadline(), Some(T0 + 60 * SEC));
    e.resume(q, T0 + SEC);
    assert_eq!(e.next_deadline(), None);
    assert!(!e.queue(q).is_paused(T0 + SEC));
}

// ----- fencing ------------------------------------------------------------------------------

#[test]
fn fenced_attempts_are_logged_and_never_reused_after_a_restart() {
    let mut e = EngineCore::new();
    let q = queue(&mut e, "q");
    let id = put(&mut e, q, 1);
    assert_eq!(e.fence(A, id), None, "not held");
    take(&mut e, A, q);
    assert_eq!(e.fence(B, id), None, "held by someone else");
    assert_eq!(e.fence(A, id), Some(1));
    let log = changes(&mut e);
    assert_eq!(log.last(), Some(&Change::Attempt { id, attempt: 1 }));
    // A restart from the log, and one from a snapshot, both continue above attempt 1.
    for mut r in [replayed(log.clone()), replayed(e.snapshot())] {
        assert_eq!(r.job(id).unwrap().state, JobState::Ready);
        take(&mut r, B, q);
        assert_eq!(r.fence(B, id), Some(2));
    }
}

// ----- listings -----------------------------------------------------------------------------

#[test]
fn listings_page_through_each_state_in_its_order() {
    let mut e = EngineCore::new();
    let q = queue(&mut e, "q");
    let ids: Vec<JobId> = (0..10).map(|i| put(&mut e, q, 10 - i)).collect();
    let mut seen = Vec::new();
    let mut after: Option<Cursor> = None;
    loop {
        let page = e.list(q, JobState::Ready, after, 3);
        seen.extend(page.ids);
        match page.next {
            Some(c) => after = Some(c),
            None => break,
        }
    }
    let mut by_pri = ids.clone();
    by_pri.reverse();
    assert_eq!(seen, by_pri, "ready jobs by priority, then id");
    assert!(e.list(q, JobState::Ready, None, 0).ids.is_empty());

    let held = take(&mut e, A, q);
    assert_eq!(e.list(q, JobState::Reserved, None, 10).ids, vec![held]);
    assert!(e.bury(A, held, 1));
    assert_eq!(e.list(q, JobState::Buried, None, 10).ids, vec![held]);
    let d = e.put(q, 1, 5, 60, Bytes::new(), true, T0).id;
    assert_eq!(e.list(q, JobState::Delayed, None, 10).ids, vec![d]);
    let mut all = e.job_ids();
    all.sort();
    assert_eq!(all.len(), 11);
}

#[test]
fn an_operator_buries_a_waiting_job_but_not_a_leased_one() {
    let mut e = EngineCore::new();
    let q = queue(&mut e, "q");
    let ready = put(&mut e, q, 1);
    let delayed = e.put(q, 1, 5, 60, Bytes::new(), true, T0).id;
    let leased = put(&mut e, q, 0);
    assert_eq!(take(&mut e, A, q), leased);
    changes(&mut e);
    assert!(e.bury_job(ready));
    assert!(e.bury_job(delayed));
    assert!(!e.bury_job(leased), "left to its holder");
    assert!(!e.bury_job(ready), "already buried");
    assert!(!e.bury_job(999));
    assert_eq!(
        e.list(q, JobState::Buried, None, 10).ids,
        vec![ready, delayed]
    );
    assert_eq!(
        e.next_deadline(),
        Some(T0 + 60 * SEC),
        "the delay timer went with it"
    );
    let log = changes(&mut e);
    assert_eq!(log.len(), 2);
    let r = replayed(e.snapshot());
    assert_eq!(r.job(ready).unwrap().state, JobState::Buried);
}

// ----- routing to another queue ---------------------------------------------------------------

#[test]
fn route_moves_a_held_job_to_the_next_queue_in_one_logged_step() {
    let mut e = EngineCore::new();
    let first = e.queue_id_or_create(b"stage-1");
    let id = e
        .put_job(
            NewJob {
                queue: first,
                pri: 5,
                ttr: 60,
                body: Bytes::from_static(b"state"),
                durable: true,
                attrs: Some(Bytes::from_static(b"{\"a\":1}")),
                ..NewJob::default()
            },
            T0,
        )
        .id;
    let second = queue(&mut e, "stage-2");
    assert!(e.watch(C, id));
    assert!(!e.route(A, id, second, 1, None, T0), "not held");
    take(&mut e, A, first);
    assert_eq!(e.fence(A, id), Some(1));
    changes(&mut e);
    assert!(!e.route(B, id, second, 1, None, T0), "held by someone else");
    // A worker waits on the next stage: the routed job goes straight to it.
    assert_eq!(block(&mut e, B, second, T0), ReserveOutcome::Waiting);
    let attrs = Bytes::from_static(b"{\"a\":2}");
    assert!(e.route(A, id, second, 1, Some(attrs.clone()), T0 + SEC));
    assert_eq!(
        changes(&mut e),
        vec![Change::Route {
            id,
            queue: Bytes::from_static(b"stage-2"),
            pri: 1,
            attrs: Some(attrs.clone()),
        }]
    );
    assert_eq!(
        notices(&mut e),
        vec![Notice {
            conn: B,
            kind: NoticeKind::Reserved(id)
        }],
        "no end for the watcher: the job goes on"
    );
    let job = e.job(id).unwrap();
    assert_eq!(
        (job.queue, job.pri, job.state),
        (second, 1, JobState::Reserved)
    );
    assert_eq!(e.attrs_of(id), Some(&attrs));
    assert_eq!(e.fence(B, id), Some(2), "tokens keep growing across stages");
    assert_eq!(
        e.queue_id(b"stage-1"),
        None,
        "the emptied stage is forgotten"
    );
    assert_eq!(e.watcher_count(id), 1);
}

#[test]
fn a_routed_job_comes_back_in_its_new_queue_after_a_restart() {
    let mut e = EngineCore::new();
    let first = queue(&mut e, "one");
    let id = put(&mut e, first, 9);
    let next = e.queue_id_or_create(b"two");
    take(&mut e, A, first);
    assert!(e.route(A, id, next, 2, Some(Bytes::from_static(b"x")), T0));
    let live_bytes = e.live_bytes();
    let log = changes(&mut e);
    for r in [replayed(log.clone()), replayed(e.snapshot())] {
        let q = r.queue_id(b"two").expect("the new queue exists");
        let job = r.job(id).unwrap();
        assert_eq!((job.queue, job.pri, job.state), (q, 2, JobState::Ready));
        assert_eq!(r.attrs_of(id).map(|a| &a[..]), Some(&b"x"[..]));
        assert_eq!(r.queue(q).ready_len(), 1);
        assert_eq!(r.live_bytes(), live_bytes);
    }
    // A route of a job that is gone by the time it is replayed is ignored.
    let mut r = replayed(log);
    r.replay(Change::Route {
        id: 999,
        queue: Bytes::from_static(b"three"),
        pri: 0,
        attrs: None,
    });
    assert_eq!(r.queue_id(b"three"), None);
}

#[test]
fn a_job_with_a_unique_key_is_not_routed() {
    let mut e = EngineCore::new();
    let q = queue(&mut e, "q");
    let next = queue(&mut e, "next");
    let id = e
        .put_job(
            NewJob {
                queue: q,
                unique: Some(Bytes::from_static(b"k")),
                durable: true,
                ..NewJob::default()
            },
            T0,
        )
        .id;
    take(&mut e, A, q);
    assert!(!e.route(A, id, next, 0, None, T0));
    assert_eq!(e.job(id).unwrap().state, JobState::Reserved);
}
