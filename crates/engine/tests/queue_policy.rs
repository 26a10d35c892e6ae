//! A queue's policy (lease limit, pause, rate limit) on the engine's fake clock: the rate
//! limit's token bucket as every protocol's takers see it, and the policy's one log record,
//! replayed and snapshotted.

use bytes::Bytes;
use jobyard_engine::{
    Change, ConnId, Engine, EngineCore, JobId, Lease, Millis, Notice, NoticeKind, Pause, QueueId,
    QueuePolicy, RateLimit, ReserveOutcome, WaitMode,
};

const T0: Millis = 1_700_000_000_000;
const SEC: Millis = 1000;
const A: ConnId = 1;
const B: ConnId = 2;
const C: ConnId = 3;

fn pinned(e: &mut Engine, name: &str) -> QueueId {
    let q = e.queue_id_or_create(name.as_bytes());
    e.pin(q);
    q
}

fn put_n(e: &mut Engine, q: QueueId, n: usize) -> Vec<JobId> {
    (0..n)
        .map(|_| e.put(q, 0, 0, 600, Bytes::from_static(b"x"), true, T0).id)
        .collect()
}

fn reserve(
    e: &mut Engine,
    conn: ConnId,
    q: QueueId,
    timeout: Option<Millis>,
    now: Millis,
) -> ReserveOutcome {
    e.reserve(
        conn,
        &[q],
        WaitMode::Best,
        Lease::JobTtr,
        timeout,
        false,
        now,
    )
}

/// Non-blocking reserves until one fails: how many jobs the queue hands out at `now`.
fn drain(e: &mut Engine, conn: ConnId, q: QueueId, now: Millis) -> usize {
    let mut n = 0;
    while let ReserveOutcome::Reserved(_) = reserve(e, conn, q, Some(0), now) {
        n += 1;
    }
    n
}

fn limited(e: &mut EngineCore, name: &str, rate: &str) -> QueueId {
    let q = pinned(e, name);
    e.set_rate_limit(q, Some(rate.parse().unwrap()), T0);
    q
}

fn notices(e: &mut EngineCore) -> Vec<Notice> {
    e.take_notices().collect()
}

fn changes(e: &mut EngineCore) -> Vec<Change> {
    e.take_changes().collect()
}

fn rebuild(log: Vec<Change>) -> EngineCore {
    let mut r = EngineCore::new();
    for change in log {
        r.replay(change);
    }
    r
}

#[test]
fn a_full_bucket_allows_a_burst_then_refills_at_the_rate() {
    let mut e = EngineCore::new();
    let q = limited(&mut e, "q", "4/s");
    put_n(&mut e, q, 20);
    assert_eq!(drain(&mut e, A, q, T0), 4, "the burst is the count");
    assert_eq!(drain(&mut e, A, q, T0 + 249), 0);
    assert_eq!(
        drain(&mut e, A, q, T0 + 250),
        1,
        "one token per quarter second"
    );
    assert_eq!(drain(&mut e, A, q, T0 + 1250), 4);
    // A quiet spell refills the bucket to one burst, never more.
    assert_eq!(drain(&mut e, A, q, T0 + 60 * SEC), 4);
    assert_eq!(e.queue(q).ready_len(), 7);
}

#[test]
fn a_queue_without_a_limit_is_not_held_back_and_others_are_not_slowed() {
    let mut e = EngineCore::new();
    let slow = limited(&mut e, "slow", "1/m");
    let fast = pinned(&mut e, "fast");
    put_n(&mut e, slow, 3);
    put_n(&mut e, fast, 3);
    let both = [slow, fast];
    let mut got = 0;
    while let ReserveOutcome::Reserved(_) =
        e.reserve(A, &both, WaitMode::Best, Lease::JobTtr, Some(0), false, T0)
    {
        got += 1;
    }
    assert_eq!(
        got, 4,
        "one from the limited queue, every one from the other"
    );
    assert_eq!(e.queue(slow).ready_len(), 2);
}

#[test]
fn waiters_are_woken_in_order_as_tokens_come_due() {
    let mut e = EngineCore::new();
    let q = limited(&mut e, "q", "2/s");
    let ids = put_n(&mut e, q, 5);
    assert_eq!(drain(&mut e, A, q, T0), 2);
    for conn in [A, B, C] {
        assert_eq!(reserve(&mut e, conn, q, None, T0), ReserveOutcome::Waiting);
    }
    assert_eq!(e.next_deadline(), Some(T0 + 500), "the next token's time");
    e.tick(T0 + 500);
    assert_eq!(
        notices(&mut e),
        vec![Notice {
            conn: A,
            kind: NoticeKind::Reserved(ids[2])
        }]
    );
    e.tick(e.next_deadline().unwrap());
    e.tick(e.next_deadline().unwrap());
    let served: Vec<ConnId> = notices(&mut e).iter().map(|n| n.conn).collect();
    assert_eq!(served, vec![B, C]);
    assert_eq!(e.queue(q).waiting(), 0);
}

#[test]
fn a_job_put_while_waiters_wait_for_the_rate_goes_out_when_a_token_is_due() {
    let mut e = EngineCore::new();
    let q = limited(&mut e, "q", "1/s");
    put_n(&mut e, q, 1);
    assert_eq!(drain(&mut e, A, q, T0), 1);
    assert_eq!(reserve(&mut e, B, q, None, T0), ReserveOutcome::Waiting);
    let id = put_n(&mut e, q, 1)[0];
    assert!(notices(&mut e).is_empty(), "no token yet");
    e.tick(T0 + SEC);
    assert_eq!(
        notices(&mut e),
        vec![Notice {
            conn: B,
            kind: NoticeKind::Reserved(id)
        }]
    );
}

#[test]
fn a_reserve_timeout_is_honoured_while_waiting_for_the_rate() {
    let mut e = EngineCore::new();
    let q = limited(&mut e, "q", "1/m");
    put_n(&mut e, q, 2);
    assert_eq!(drain(&mut e, A, q, T0), 1);
    assert_eq!(
        reserve(&mut e, B, q, Some(2 * SEC), T0),
        ReserveOutcome::Waiting
    );
    e.tick(T0 + 2 * SEC);
    assert_eq!(
        notices(&mut e),
        vec![Notice {
            conn: B,
            kind: NoticeKind::TimedOut
        }]
    );
    // The token timer still fires later and finds nobody waiting.
    e.tick(T0 + 60 * SEC);
    assert!(notices(&mut e).is_empty());
    assert_eq!(e.queue(q).ready_len(), 1);
}

#[test]
fn a_sleeping_worker_is_woken_when_the_rate_lets_a_job_out() {
    let mut e = EngineCore::new();
    let q = limited(&mut e, "q", "1/s");
    put_n(&mut e, q, 2);
    assert_eq!(drain(&mut e, A, q, T0), 1);
    let sleep = e.reserve(
        B,
        &[q],
        WaitMode::WakeOnly,
        Lease::Unlimited,
        None,
        false,
        T0,
    );
    assert_eq!(sleep, ReserveOutcome::Waiting, "nothing may be taken yet");
    e.tick(T0 + SEC);
    assert_eq!(
        notices(&mut e),
        vec![Notice {
            conn: B,
            kind: NoticeKind::Wake
        }]
    );
}

#[test]
fn the_rate_limit_sits_beside_the_lease_limit() {
    let mut e = EngineCore::new();
    let q = limited(&mut e, "q", "10/s");
    e.set_lease_limit(q, 2, T0);
    put_n(&mut e, q, 10);
    assert_eq!(drain(&mut e, A, q, T0), 2, "the lease limit binds first");
    assert_eq!(e.queue(q).rate_tokens(T0), Some(8));
}

#[test]
fn one_record_holds_the_whole_policy_and_only_changes_are_logged() {
    let mut e = EngineCore::new();
    let q = pinned(&mut e, "q");
    put_n(&mut e, q, 1);
    changes(&mut e);
    e.pause(q, 0, T0);
    e.set_lease_limit(q, 0, T0);
    e.set_rate_limit(q, None, T0);
    assert!(
        changes(&mut e).is_empty(),
        "an unconfigured queue logs nothing"
    );

    e.set_lease_limit(q, 3, T0);
    e.pause(q, 30, T0);
    let rate: RateLimit = "600/m".parse().unwrap();
    e.set_rate_limit(q, Some(rate), T0);
    let policy = |pause| QueuePolicy {
        lease_limit: 3,
        pause,
        rate_limit: Some(rate),
        retry: None,
    };
    let until = Pause::Until {
        at: T0 + 30 * SEC,
        secs: 30,
    };
    let logged = changes(&mut e);
    assert_eq!(logged.len(), 3);
    assert_eq!(
        logged.last(),
        Some(&Change::Policy {
            queue: Bytes::from_static(b"q"),
            policy: policy(until),
        })
    );
    e.resume(q, T0 + SEC);
    assert_eq!(
        changes(&mut e),
        vec![Change::Policy {
            queue: Bytes::from_static(b"q"),
            policy: policy(Pause::Off),
        }]
    );
    // A pause that runs out on the clock is not logged: its record holds its end.
    e.pause(q, 1, T0 + SEC);
    changes(&mut e);
    e.tick(T0 + 2 * SEC);
    assert!(changes(&mut e).is_empty());
}

#[test]
fn replay_and_snapshots_restore_pauses_and_limits() {
    let mut e = EngineCore::new();
    let a = limited(&mut e, "a", "5/s");
    e.set_lease_limit(a, 2, T0);
    let b = pinned(&mut e, "b");
    e.pause_forever(b);
    let c = pinned(&mut e, "c");
    e.pause(c, 60, T0);
    put_n(&mut e, c, 1);
    let log = changes(&mut e);
    let policies = |e: &Engine| -> Vec<(Vec<u8>, QueuePolicy)> {
        let mut v: Vec<_> = e
            .queues()
            .map(|q| (q.name.to_vec(), q.policy()))
            .filter(|(_, p)| !p.is_default())
            .collect();
        v.sort_by(|x, y| x.0.cmp(&y.0));
        v
    };
    let want = policies(&e);
    assert_eq!(want.len(), 3);
    let mut r = rebuild(log);
    assert_eq!(policies(&r), want);
    let mut s = rebuild(e.snapshot());
    assert_eq!(policies(&s), want);

    // The replayed pause still ends on time, and the replayed limit still holds.
    let rc = r.queue_id(b"c").unwrap();
    assert!(r.queue(rc).is_paused(T0 + 59 * SEC));
    r.tick(T0 + 60 * SEC);
    assert!(!r.queue(rc).is_paused(T0 + 60 * SEC));
    let sa = s.queue_id(b"a").unwrap();
    put_n(&mut s, sa, 10);
    s.tick(T0);
    assert_eq!(drain(&mut s, A, sa, T0 + SEC), 2);
    assert!(s
        .take_changes()
        .all(|c| !matches!(c, Change::Policy { .. })));
}

#[test]
fn a_queue_forgotten_while_paused_is_forgotten_by_replay_too() {
    let mut e = EngineCore::new();
    let q = e.queue_id_or_create(b"t");
    e.add_consumer(q);
    e.pause(q, 60, T0);
    e.remove_consumer(q);
    assert!(e.queue_id(b"t").is_none());
    let r = rebuild(changes(&mut e));
    assert!(r.queue_id(b"t").is_none());
}

#[test]
fn removing_every_limit_lets_an_unreferenced_queue_go() {
    let mut e = EngineCore::new();
    let q = e.queue_id_or_create(b"q");
    e.set_policy(
        q,
        QueuePolicy {
            rate_limit: Some("1/s".parse().unwrap()),
            ..QueuePolicy::default()
        },
        T0,
    );
    assert!(e.queue_id(b"q").is_some(), "a policy keeps its queue");
    e.set_policy(q, QueuePolicy::default(), T0);
    assert!(e.queue_id(b"q").is_none());
}

#[test]
fn replayed_pause_ends_that_mean_never_or_now_set_no_timer() {
    let mut r = EngineCore::new();
    for (name, at) in [("never", Millis::MAX), ("now", 0)] {
        r.replay(Change::Policy {
            queue: Bytes::copy_from_slice(name.as_bytes()),
            policy: QueuePolicy {
                lease_limit: 1,
                pause: Pause::Until { at, secs: 5 },
                rate_limit: None,
                retry: None,
            },
        });
    }
    assert_eq!(r.next_deadline(), None);
    let never = r.queue_id(b"never").unwrap();
    assert_eq!(r.queue(never).policy().pause, Pause::Forever);
    let now = r.queue_id(b"now").unwrap();
    assert!(!r.queue(now).is_paused(T0));
}

#[test]
fn a_replayed_bucket_starts_empty_when_the_clock_first_ticks() {
    let mut e = EngineCore::new();
    let q = limited(&mut e, "q", "4/s");
    put_n(&mut e, q, 20);
    assert_eq!(drain(&mut e, A, q, T0), 4, "a limit set now: a full burst");
    let log = changes(&mut e);

    // The restart comes 100 ms later: the four just handed out are not known to it.
    let restart = T0 + 100;
    let mut r = rebuild(log);
    let rq = r.queue_id(b"q").unwrap();
    assert_eq!(
        drain(&mut r, A, rq, restart),
        0,
        "empty before the clock ticks"
    );
    assert_eq!(r.next_deadline(), Some(0), "the first tick is due at once");
    r.tick(restart);
    assert_eq!(drain(&mut r, A, rq, restart), 0, "no burst after a restart");
    assert_eq!(drain(&mut r, A, rq, restart + 249), 0);
    assert_eq!(
        drain(&mut r, A, rq, restart + 250),
        1,
        "then the rate itself"
    );
    assert_eq!(drain(&mut r, A, rq, restart + SEC), 3);
    // Across the restart, the second from T0 let out 4, and the one from the restart 4.
    assert_eq!(
        drain(&mut r, A, rq, restart + 60 * SEC),
        4,
        "refilled as before"
    );

    // The same from a snapshot.
    let mut s = rebuild(e.snapshot());
    let sq = s.queue_id(b"q").unwrap();
    put_n(&mut s, sq, 4);
    s.tick(restart);
    assert_eq!(drain(&mut s, A, sq, restart), 0);
    assert_eq!(drain(&mut s, A, sq, restart + 250), 1);
}

#[test]
fn a_waiter_on_a_replayed_bucket_is_served_when_its_first_token_is_due() {
    let mut e = EngineCore::new();
    let q = limited(&mut e, "q", "2/s");
    put_n(&mut e, q, 3);
    let mut r = rebuild(changes(&mut e));
    let rq = r.queue_id(b"q").unwrap();
    assert!(matches!(
        reserve(&mut r, A, rq, None, T0),
        ReserveOutcome::Waiting
    ));
    r.tick(T0);
    assert!(notices(&mut r).is_empty());
    assert_eq!(r.next_deadline(), Some(T0 + 500));
    r.tick(T0 + 500);
    assert!(matches!(
        notices(&mut r).as_slice(),
        [Notice {
            conn: A,
            kind: NoticeKind::Reserved(_)
        }]
    ));
}

#[test]
fn handing_out_again_after_a_pause_in_leadership_starts_the_bucket_empty() {
    let mut e = EngineCore::new();
    let q = limited(&mut e, "q", "4/s");
    put_n(&mut e, q, 20);
    assert_eq!(drain(&mut e, A, q, T0), 4);
    e.set_handing_out(true);
    assert_eq!(
        drain(&mut e, A, q, T0 + 60 * SEC),
        4,
        "still leading: no restart"
    );
    // Another node may have led meanwhile (a standby taking over, or a leader unsure of
    // its lease): the bucket is emptied when hand-outs resume.
    e.set_handing_out(false);
    e.set_handing_out(true);
    e.tick(T0 + 120 * SEC);
    assert_eq!(drain(&mut e, A, q, T0 + 120 * SEC), 0);
    assert_eq!(drain(&mut e, A, q, T0 + 120 * SEC + 250), 1);
}
