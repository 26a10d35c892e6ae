//! Lease timing (the bookkeeping behind the lease-to-complete histogram): which lease a
//! completion is timed from, through release, touch, expiry, disconnect and restart, and
//! which ends count as completed (ok or failed). The stamps are plain numbers handed in,
//! as the broker's clock would.

use bytes::Bytes;
use jobyard_engine::flows::{FlowDefinition, NewFlowJob};
use jobyard_engine::{
    Change, ConnId, Engine, EngineCore, JobEnd, JobId, Lease, LeaseEnd, LeaseOutcome, Millis,
    QueueId, ReserveOutcome, WaitMode,
};
use serde_json::Map;

const T0: Millis = 1_700_000_000_000;
const SEC: Millis = 1000;
const A: ConnId = 1;
const B: ConnId = 2;

fn timed_engine() -> EngineCore {
    let mut e = EngineCore::new();
    e.time_leases(true);
    e
}

fn queue(e: &mut Engine, name: &str) -> QueueId {
    let q = e.queue_id_or_create(name.as_bytes());
    e.pin(q);
    q
}

fn put(e: &mut Engine, q: QueueId) -> JobId {
    e.put(q, 0, 0, 60, Bytes::from_static(b"body"), true, T0).id
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

/// What the broker does after each transaction: stamp new leases, take completed ones.
fn commit(e: &mut EngineCore, clock: u64) -> Vec<LeaseEnd> {
    if !e.has_lease_timing_work() {
        return Vec::new();
    }
    e.stamp_leases(clock);
    e.take_lease_ends().collect()
}

fn ended(
    queue: &str,
    outcome: LeaseOutcome,
    started: Option<u64>,
) -> (Bytes, LeaseOutcome, Option<u64>) {
    (Bytes::copy_from_slice(queue.as_bytes()), outcome, started)
}

fn summary(ends: Vec<LeaseEnd>) -> Vec<(Bytes, LeaseOutcome, Option<u64>)> {
    ends.into_iter()
        .map(|e| (e.queue, e.outcome, e.started))
        .collect()
}

#[test]
fn a_reserve_then_delete_is_timed_from_the_reserve() {
    let mut e = timed_engine();
    let q = queue(&mut e, "emails");
    let id = put(&mut e, q);
    assert!(!e.has_lease_timing_work(), "a put needs no clock");
    take(&mut e, A, q, T0);
    assert_eq!(e.lease_started(id), None, "not stamped before the commit");
    assert!(commit(&mut e, 100).is_empty());
    assert_eq!(e.lease_started(id), Some(100));
    assert!(e.delete(A, id));
    assert_eq!(
        summary(commit(&mut e, 350)),
        vec![ended("emails", LeaseOutcome::Ok, Some(100))]
    );
    assert!(!e.has_lease_timing_work());
}

#[test]
fn finished_ok_failed_buried_and_routed_leases_count_with_their_outcome() {
    let mut e = timed_engine();
    let q = queue(&mut e, "work");
    let next = queue(&mut e, "next");
    let ids: Vec<JobId> = (0..4).map(|_| put(&mut e, q)).collect();
    for _ in 0..4 {
        take(&mut e, A, q, T0);
    }
    commit(&mut e, 10);
    assert!(e.finish(A, ids[0], JobEnd::ok(Bytes::from_static(b"r"))));
    assert!(e.finish(A, ids[1], JobEnd::failed(None)));
    assert!(e.bury(A, ids[2], 0));
    assert!(e.route(A, ids[3], next, 0, None, T0));
    assert_eq!(
        summary(commit(&mut e, 20)),
        vec![
            ended("work", LeaseOutcome::Ok, Some(10)),
            ended("work", LeaseOutcome::Failed, Some(10)),
            ended("work", LeaseOutcome::Failed, Some(10)),
            ended("work", LeaseOutcome::Ok, Some(10)),
        ]
    );
}

#[test]
fn ends_of_jobs_nobody_leased_are_not_completions() {
    let mut e = timed_engine();
    let q = queue(&mut e, "q");
    let id = put(&mut e, q);
    assert!(e.delete(0, id), "an operator deletes a ready job");
    let buried = put(&mut e, q);
    assert!(e.bury_job(buried));
    assert!(e.finish(0, buried, JobEnd::failed(None)));
    assert!(commit(&mut e, 5).is_empty());
}

#[test]
fn a_touch_keeps_the_start() {
    let mut e = timed_engine();
    let q = queue(&mut e, "q");
    let id = put(&mut e, q);
    take(&mut e, A, q, T0);
    commit(&mut e, 1_000);
    assert!(e.touch(A, id, T0 + 30 * SEC));
    assert!(e.touch_for(A, id, 5 * SEC, T0 + 40 * SEC));
    commit(&mut e, 2_000);
    assert_eq!(e.lease_started(id), Some(1_000));
    assert!(e.delete(A, id));
    assert_eq!(commit(&mut e, 3_000)[0].started, Some(1_000));
}

#[test]
fn a_release_ends_the_lease_uncounted_and_the_next_lease_starts_anew() {
    let mut e = timed_engine();
    let q = queue(&mut e, "q");
    let id = put(&mut e, q);
    take(&mut e, A, q, T0);
    commit(&mut e, 100);
    assert!(e.release(A, id, 0, 0, T0));
    assert!(
        commit(&mut e, 200).is_empty(),
        "a release is not a completion"
    );
    assert_eq!(e.lease_started(id), None);
    take(&mut e, B, q, T0);
    commit(&mut e, 300);
    assert!(e.delete(B, id));
    assert_eq!(commit(&mut e, 400)[0].started, Some(300));
}

#[test]
fn an_expired_lease_is_not_counted_and_the_next_one_is_timed_on_its_own() {
    let mut e = timed_engine();
    let q = queue(&mut e, "q");
    let id = put(&mut e, q);
    take(&mut e, A, q, T0);
    commit(&mut e, 100);
    e.tick(T0 + 61 * SEC);
    assert!(commit(&mut e, 200).is_empty());
    assert_eq!(e.lease_started(id), None);
    take(&mut e, B, q, T0 + 62 * SEC);
    commit(&mut e, 300);
    assert!(e.finish(B, id, JobEnd::ok(Bytes::new())));
    assert_eq!(commit(&mut e, 900)[0].started, Some(300));
}

#[test]
fn a_disconnect_ends_its_leases_uncounted() {
    let mut e = timed_engine();
    let q = queue(&mut e, "q");
    let id = put(&mut e, q);
    take(&mut e, A, q, T0);
    commit(&mut e, 100);
    e.disconnect(A, T0);
    assert!(commit(&mut e, 200).is_empty());
    assert_eq!(e.lease_started(id), None);
}

#[test]
fn after_a_restart_a_job_is_timed_from_its_first_new_lease() {
    let mut e = timed_engine();
    let q = queue(&mut e, "q");
    let id = put(&mut e, q);
    take(&mut e, A, q, T0);
    commit(&mut e, 100);
    // The restart: a new engine from the log (leases are not logged).
    let log: Vec<Change> = e.take_changes().collect();
    let mut restarted = timed_engine();
    for change in log {
        restarted.replay(change);
    }
    assert_eq!(restarted.lease_started(id), None, "it comes back ready");
    let q = restarted.queue_id(b"q").unwrap();
    assert_eq!(take(&mut restarted, B, q, T0), id);
    commit(&mut restarted, 7);
    assert!(restarted.delete(B, id));
    assert_eq!(commit(&mut restarted, 9)[0].started, Some(7));
}

#[test]
fn a_lease_made_and_ended_between_two_stamps_lasted_no_measurable_time() {
    let mut e = timed_engine();
    let q = queue(&mut e, "q");
    let id = put(&mut e, q);
    take(&mut e, A, q, T0);
    assert!(e.delete(A, id));
    assert_eq!(
        summary(commit(&mut e, 50)),
        vec![ended("q", LeaseOutcome::Ok, None)]
    );
}

#[test]
fn the_queue_name_is_kept_even_when_the_end_drops_the_queue() {
    let mut e = timed_engine();
    let q = e.queue_id_or_create(b"transient");
    let id = put(&mut e, q);
    take(&mut e, A, q, T0);
    commit(&mut e, 1);
    assert!(e.delete(A, id));
    assert!(
        e.queue_id(b"transient").is_none(),
        "the empty queue is gone"
    );
    assert_eq!(commit(&mut e, 2)[0].queue, Bytes::from_static(b"transient"));
}

#[test]
fn an_engine_that_is_not_timing_keeps_nothing() {
    let mut e = EngineCore::new();
    let q = queue(&mut e, "q");
    let id = put(&mut e, q);
    take(&mut e, A, q, T0);
    assert!(!e.has_lease_timing_work());
    assert!(e.delete(A, id));
    assert!(!e.has_lease_timing_work());
}

#[test]
fn a_flow_stage_completed_or_failed_counts_from_its_lease() {
    let mut e = timed_engine();
    let def = FlowDefinition::parse_json(
        br#"{"name":"f","stages":[{"name":"first","next":"second"},{"name":"second","maxRetries":0}]}"#,
    )
    .expect("valid definition");
    e.define_flow(def);
    let (flow_id, _) = e
        .create_flow_job(
            NewFlowJob {
                flow: "f".into(),
                priority: 1,
                params: Map::new(),
                idempotency_key: None,
            },
            T0,
        )
        .expect("created");
    let mut ends = Vec::new();
    for (stage, clock) in [("first", 10), ("second", 30)] {
        let queue = e.flow_stage_queue(stage);
        let q = e.queue_id_or_create(queue.as_bytes());
        let engine_id = take(&mut e, A, q, T0);
        let lease = e
            .flow_hand_out(A, engine_id, None, T0)
            .expect("a flow lease");
        ends.extend(commit(&mut e, clock));
        assert!(e.flow_heartbeat(A, &flow_id, lease.token, None, T0).is_ok());
        if stage == "first" {
            e.flow_complete(A, &flow_id, lease.token, Map::new(), T0)
                .expect("completed");
        } else {
            e.flow_fail(A, &flow_id, lease.token, "broken", T0)
                .expect("failed");
        }
    }
    ends.extend(commit(&mut e, 40));
    let first = e.flow_stage_queue("first");
    let second = e.flow_stage_queue("second");
    assert_eq!(
        summary(ends),
        vec![
            ended(&first, LeaseOutcome::Ok, Some(10)),
            ended(&second, LeaseOutcome::Failed, Some(30)),
        ]
    );
}
