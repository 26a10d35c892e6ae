//! Retry policies on the engine's fake clock: the backoff's delays, the last attempt's
//! bury or dead letter with the history of failures, which lease ends count as failures,
//! the history through replay and snapshots, and operators' retries and discards.

use bytes::Bytes;
use jobyard_engine::{
    Backoff, Change, ConnId, EngineCore, JobEnd, JobId, JobState, Lease, LeaseClose, Millis,
    QueueId, QueuePolicy, ReserveOutcome, RetryPolicy, WaitMode,
};

const T0: Millis = 1_700_000_000_000;
const SEC: Millis = 1000;
const A: ConnId = 1;

fn exponential(max_attempts: u32, dead_letter: Option<&'static str>) -> RetryPolicy {
    RetryPolicy {
        max_attempts,
        backoff: Backoff::Exponential,
        backoff_ms: 1000,
        backoff_max_ms: 60_000,
        dead_letter: dead_letter.map(|d| Bytes::from_static(d.as_bytes())),
    }
}

fn fixed(max_attempts: u32, ms: u64) -> RetryPolicy {
    RetryPolicy {
        max_attempts,
        backoff: Backoff::Fixed,
        backoff_ms: ms,
        backoff_max_ms: 0,
        dead_letter: None,
    }
}

/// A queue with `retry` and one job (ttr 10 s).
fn queue_with(e: &mut EngineCore, retry: Option<RetryPolicy>) -> (QueueId, JobId) {
    let q = e.queue_id_or_create(b"emails");
    e.pin(q);
    e.set_policy(
        q,
        QueuePolicy {
            retry,
            ..QueuePolicy::default()
        },
        T0,
    );
    let id = e.put(q, 5, 0, 10, Bytes::from_static(b"hi"), true, T0).id;
    (q, id)
}

fn take(e: &mut EngineCore, q: QueueId, now: Millis) -> Option<JobId> {
    match e.reserve(A, &[q], WaitMode::Best, Lease::JobTtr, Some(0), false, now) {
        ReserveOutcome::Reserved(id) => Some(id),
        _ => None,
    }
}

fn fail(e: &mut EngineCore, id: JobId, text: &str, now: Millis) {
    e.tick(now);
    assert!(e.finish(A, id, JobEnd::failed(Some(Bytes::from(text.to_owned())))));
}

fn state(e: &EngineCore, id: JobId) -> (JobState, Millis) {
    let job = e.job(id).expect("job exists");
    (job.state, job.due)
}

fn rebuild(log: Vec<Change>) -> EngineCore {
    let mut r = EngineCore::new();
    for change in log {
        r.replay(change);
    }
    r
}

#[test]
fn exponential_backoff_doubles_up_to_its_cap_less_a_bounded_jitter() {
    let policy = exponential(20, None);
    for job in 1..200 {
        for failures in 1..12u32 {
            let undisturbed = (1000u64 << (failures - 1)).min(60_000);
            let delay = policy.delay_ms(job, failures);
            assert!(delay <= undisturbed, "{job} {failures}: {delay}");
            assert!(delay >= undisturbed / 5 * 4, "{job} {failures}: {delay}");
        }
    }
    // Deterministic, yet different jobs get different delays.
    assert_eq!(policy.delay_ms(7, 3), policy.delay_ms(7, 3));
    let spread: std::collections::HashSet<u64> = (1..50).map(|j| policy.delay_ms(j, 3)).collect();
    assert!(spread.len() > 10);
    assert_eq!(
        policy.delay_ms(1, 1000),
        policy.delay_ms(1, 1000).min(60_000)
    );
}

#[test]
fn fixed_backoff_waits_the_same_each_time() {
    let policy = fixed(5, 2500);
    assert!((1..5).all(|n| policy.delay_ms(9, n) == 2500));
}

#[test]
fn a_failed_attempt_waits_for_the_backoff_then_the_last_one_is_buried() {
    let mut e = EngineCore::new();
    let (q, id) = queue_with(&mut e, Some(fixed(3, 2000)));
    let mut now = T0;
    for attempt in 1..=2 {
        assert_eq!(take(&mut e, q, now), Some(id));
        fail(&mut e, id, &format!("boom {attempt}"), now);
        assert_eq!(state(&e, id), (JobState::Delayed, now + 2000));
        assert_eq!(take(&mut e, q, now + 1999), None);
        now += 2000;
        e.tick(now);
    }
    assert_eq!(take(&mut e, q, now), Some(id));
    fail(&mut e, id, "boom 3", now);
    assert_eq!(state(&e, id).0, JobState::Buried);
    let history = e.failure_history(id).expect("a history");
    assert_eq!(history.count, 3);
    assert_eq!(history.origin, Bytes::from_static(b"emails"));
    let errors: Vec<_> = history
        .failures
        .iter()
        .map(|f| f.error.clone().unwrap())
        .collect();
    assert_eq!(errors, ["boom 1", "boom 2", "boom 3"]);
    assert!(history
        .failures
        .iter()
        .all(|f| f.holder == A && f.how == LeaseClose::Failed));
}

#[test]
fn the_last_failure_moves_the_job_to_the_dead_letter_queue_with_its_history() {
    let mut e = EngineCore::new();
    let (q, id) = queue_with(&mut e, Some(exponential(2, Some("emails-dead"))));
    assert_eq!(take(&mut e, q, T0), Some(id));
    fail(&mut e, id, "first", T0);
    let (st, due) = state(&e, id);
    assert_eq!(st, JobState::Delayed);
    assert!((T0 + 800..=T0 + 1000).contains(&due), "{}", due - T0);
    e.tick(due);
    assert_eq!(take(&mut e, q, due), Some(id));
    fail(&mut e, id, "second", due);
    let dead = e.queue_id(b"emails-dead").expect("dead-letter queue");
    let job = e.job(id).unwrap();
    assert_eq!((job.queue, job.state), (dead, JobState::Buried));
    assert_eq!(e.failure_history(id).unwrap().failures.len(), 2);

    // Replayed from the log, and from a snapshot, it is the same dead letter.
    let log: Vec<Change> = e.take_changes().collect();
    for r in [rebuild(log), rebuild(e.snapshot())] {
        let job = r.job(id).unwrap();
        assert_eq!(r.queue(job.queue).name, Bytes::from_static(b"emails-dead"));
        assert_eq!(job.state, JobState::Buried);
        assert_eq!(r.failure_history(id), e.failure_history(id));
    }
}

#[test]
fn an_expired_lease_counts_only_under_a_policy() {
    let mut plain = EngineCore::new();
    let (q, id) = queue_with(&mut plain, None);
    assert_eq!(take(&mut plain, q, T0), Some(id));
    plain.tick(T0 + 10 * SEC);
    assert_eq!(state(&plain, id).0, JobState::Ready);
    assert!(plain.failure_history(id).is_none());

    let mut e = EngineCore::new();
    let (q, id) = queue_with(&mut e, Some(fixed(2, 500)));
    assert_eq!(take(&mut e, q, T0), Some(id));
    e.tick(T0 + 10 * SEC);
    assert_eq!(state(&e, id), (JobState::Delayed, T0 + 10 * SEC + 500));
    let failure = &e.failure_history(id).unwrap().failures[0];
    assert_eq!(
        (failure.how, failure.at),
        (LeaseClose::Expired, T0 + 10 * SEC)
    );
}

#[test]
fn a_disconnect_counts_and_a_release_does_not() {
    let mut e = EngineCore::new();
    let (q, id) = queue_with(&mut e, Some(fixed(2, 0)));
    assert_eq!(take(&mut e, q, T0), Some(id));
    assert!(e.release(A, id, 5, 0, T0));
    assert!(e.failure_history(id).is_none());
    assert_eq!(take(&mut e, q, T0), Some(id));
    e.disconnect(A, T0 + SEC);
    let history = e.failure_history(id).unwrap();
    assert_eq!(
        (history.count, history.failures[0].how),
        (1, LeaseClose::Disconnected)
    );
    e.tick(T0 + SEC);
    assert_eq!(take(&mut e, q, T0 + SEC), Some(id));
    e.disconnect(A, T0 + 2 * SEC);
    assert_eq!(state(&e, id).0, JobState::Buried);
}

#[test]
fn without_a_policy_a_failure_ends_the_job_as_before() {
    let mut e = EngineCore::new();
    let (q, id) = queue_with(&mut e, None);
    assert_eq!(take(&mut e, q, T0), Some(id));
    fail(&mut e, id, "boom", T0);
    assert!(e.job(id).is_none());
    assert!(e
        .take_changes()
        .all(|c| !matches!(c, Change::Failures { .. })));
}

#[test]
fn the_attempt_count_survives_a_replay() {
    let mut e = EngineCore::new();
    let (q, id) = queue_with(&mut e, Some(fixed(2, 0)));
    assert_eq!(take(&mut e, q, T0), Some(id));
    fail(&mut e, id, "one", T0);
    let mut r = rebuild(e.take_changes().collect());
    let rq = r.queue_id(b"emails").unwrap();
    r.tick(T0);
    assert_eq!(take(&mut r, rq, T0), Some(id));
    fail(&mut r, id, "two", T0);
    assert_eq!(state(&r, id).0, JobState::Buried);
    assert_eq!(r.failure_history(id).unwrap().count, 2);
}

#[test]
fn dead_letters_are_retried_in_their_queue_afresh_or_discarded() {
    let mut e = EngineCore::new();
    let (q, first) = queue_with(&mut e, Some(fixed(1, 0)));
    let second = e.put(q, 5, 0, 10, Bytes::from_static(b"b"), true, T0).id;
    for _ in 0..2 {
        let id = take(&mut e, q, T0).unwrap();
        fail(&mut e, id, "no", T0);
    }
    let dead = e.queue_id(b"emails").unwrap();
    assert_eq!(e.retry_dead_letters(dead, Some(&[first, 999]), T0), [first]);
    assert_eq!(state(&e, first).0, JobState::Ready);
    assert!(e.failure_history(first).is_none());
    assert_eq!(e.discard_dead_letters(dead, None), [second]);
    assert!(e.job(second).is_none());

    let r = rebuild(e.take_changes().collect());
    assert_eq!(r.job(first).map(|j| j.state), Some(JobState::Ready));
    assert!(r.failure_history(first).is_none());
    assert!(r.job(second).is_none());
}

#[test]
fn a_front_end_that_gives_back_held_jobs_reports_them_abandoned_only_under_a_policy() {
    let mut plain = EngineCore::new();
    let (q, id) = queue_with(&mut plain, None);
    assert_eq!(take(&mut plain, q, T0), Some(id));
    assert!(!plain.abandon(A, id, T0));
    assert_eq!(state(&plain, id).0, JobState::Reserved);

    let mut e = EngineCore::new();
    let (q, id) = queue_with(&mut e, Some(fixed(1, 0)));
    assert!(e.is_under_retry_policy(id));
    assert_eq!(take(&mut e, q, T0), Some(id));
    assert!(e.abandon(A, id, T0));
    assert_eq!(state(&e, id).0, JobState::Buried);
    let how = e.failure_history(id).unwrap().failures[0].how;
    assert_eq!(how, LeaseClose::Disconnected);
    assert_eq!(e.list_dead_letters(q, 10), [id]);
}
