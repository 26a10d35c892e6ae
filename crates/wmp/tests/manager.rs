//! The engine-independent manager rules: remembered READYs, wake throttling with owed wakes
//! (decision 1), and effective roles for GIVE (decision 4). Synthetic instants throughout.

use std::time::{Duration, Instant};

use bytes::Bytes;
use jobyard_wmp::*;
use jobyard_wmp_wire::*;

fn path(id: &str) -> Path {
    vec![Bytes::copy_from_slice(id.as_bytes())]
}

fn ready(roles: Option<&[&str]>) -> Ready {
    Ready {
        roles: roles.map(|r| r.iter().map(|s| s.to_string()).collect()),
        worker: None,
    }
}

fn cfg() -> RegistryConfig {
    RegistryConfig {
        ready_ttl: Duration::from_secs(90),
        wake_interval: Duration::from_secs(1),
        max_entries: 3,
    }
}

const S: Duration = Duration::from_secs(1);
const MS: Duration = Duration::from_millis(1);

#[test]
fn new_ready_is_offered_and_duplicate_only_refreshes() {
    let now = Instant::now();
    let mut r = ReadyRegistry::new(cfg());
    assert_eq!(
        r.on_ready(&path("w1"), &ready(Some(&["q"])), now),
        ReadyOutcome::New { offer: true }
    );
    r.mark_woken(&path("w1"), now);
    assert_eq!(
        r.on_ready(&path("w1"), &ready(Some(&["q"])), now + 10 * MS),
        ReadyOutcome::Refreshed { offer: false }
    );
    assert_eq!(
        r.on_ready(&path("w1"), &ready(Some(&["q"])), now + S),
        ReadyOutcome::Refreshed { offer: true }
    );
    assert_eq!(r.len(), 1);
}

#[test]
fn registry_is_bounded() {
    let now = Instant::now();
    let mut r = ReadyRegistry::new(cfg());
    for w in ["a", "b", "c"] {
        assert!(matches!(
            r.on_ready(&path(w), &ready(None), now),
            ReadyOutcome::New { .. }
        ));
    }
    assert_eq!(
        r.on_ready(&path("d"), &ready(None), now),
        ReadyOutcome::Full
    );
    // A known path still refreshes when full.
    assert!(matches!(
        r.on_ready(&path("a"), &ready(None), now),
        ReadyOutcome::Refreshed { .. }
    ));
}

#[test]
fn wake_picks_matching_workers_least_recently_woken_first_up_to_twice_the_jobs() {
    let t0 = Instant::now();
    let mut r = ReadyRegistry::new(RegistryConfig {
        max_entries: 100,
        ..cfg()
    });
    for w in ["a", "b", "c", "d"] {
        r.on_ready(&path(w), &ready(Some(&["q"])), t0);
    }
    r.on_ready(&path("other"), &ready(Some(&["z"])), t0);
    r.on_ready(&path("any"), &ready(None), t0);
    let first = r.wake_candidates("q", 1, t0);
    assert_eq!(first.len(), 2);
    assert!(!first.contains(&path("other")));
    // 2 s later: the two not yet woken come first.
    let second = r.wake_candidates("q", 1, t0 + 2 * S);
    assert_eq!(second.len(), 2);
    assert!(second.iter().all(|p| !first.contains(p)));
    // A worker without roles serves every queue.
    let mut z = r.wake_candidates("z", 1, t0);
    z.sort();
    assert_eq!(z, vec![path("any"), path("other")]);
}

#[test]
fn no_ready_jobs_no_wake() {
    let now = Instant::now();
    let mut r = ReadyRegistry::new(cfg());
    r.on_ready(&path("w"), &ready(Some(&["q"])), now);
    assert!(r.wake_candidates("q", 0, now).is_empty());
    assert_eq!(r.next_deadline(), Some(now + Duration::from_secs(90)));
}

#[test]
fn a_job_ready_while_all_workers_were_just_woken_gets_an_owed_wake() {
    let t0 = Instant::now();
    let mut r = ReadyRegistry::new(cfg());
    r.on_ready(&path("w1"), &ready(Some(&["q"])), t0);
    r.on_ready(&path("w2"), &ready(Some(&["q"])), t0 + 300 * MS);
    r.mark_woken(&path("w1"), t0);
    r.mark_woken(&path("w2"), t0 + 300 * MS);
    // A job arrives 500 ms later: nobody may be woken yet.
    assert!(r.wake_candidates("q", 1, t0 + 500 * MS).is_empty());
    // The wake is owed for when the first interval ends.
    assert_eq!(r.next_deadline(), Some(t0 + S));
    assert!(r.due_wakes(t0 + 999 * MS).is_empty());
    assert_eq!(r.due_wakes(t0 + S), vec!["q".to_string()]);
    assert_eq!(r.wake_candidates("q", 1, t0 + S), vec![path("w1")]);
    assert!(
        r.due_wakes(t0 + 10 * S).is_empty(),
        "paid: nothing owed any more"
    );
}

#[test]
fn owed_wake_is_dropped_once_the_queue_is_empty() {
    let t0 = Instant::now();
    let mut r = ReadyRegistry::new(cfg());
    r.on_ready(&path("w1"), &ready(Some(&["q"])), t0);
    r.mark_woken(&path("w1"), t0);
    assert!(r.wake_candidates("q", 1, t0).is_empty());
    assert!(r.wake_candidates("q", 0, t0 + 100 * MS).is_empty());
    assert!(r.due_wakes(t0 + 10 * S).is_empty());
}

#[test]
fn take_consumes_and_ttl_expires() {
    let t0 = Instant::now();
    let mut r = ReadyRegistry::new(cfg());
    r.on_ready(&path("w1"), &ready(Some(&["q"])), t0);
    r.on_ready(&path("w2"), &ready(Some(&["q"])), t0);
    r.consume(&path("w1"));
    assert_eq!(r.roles(&path("w1")), None);
    assert_eq!(r.wake_candidates("q", 5, t0), vec![path("w2")]);
    r.on_ready(&path("w3"), &ready(Some(&["q"])), t0 + 60 * S);
    assert_eq!(r.expire(t0 + 89 * S), 0);
    assert_eq!(r.expire(t0 + 90 * S), 1);
    assert_eq!(r.len(), 1);
    r.forget(&path("w3"));
    assert!(r.is_empty());
    assert!(r.wake_candidates("q", 1, t0 + 100 * S).is_empty());
}

#[test]
fn roles_change_on_refresh_moves_the_worker_between_queues() {
    let t0 = Instant::now();
    let mut r = ReadyRegistry::new(cfg());
    r.on_ready(&path("w"), &ready(Some(&["a"])), t0);
    r.on_ready(&path("w"), &ready(Some(&["b"])), t0);
    assert!(r.wake_candidates("a", 1, t0).is_empty());
    assert_eq!(r.wake_candidates("b", 1, t0), vec![path("w")]);
}

fn give(roles: Option<&[&str]>, queue: Option<&str>) -> Give {
    Give {
        lock: "1".into(),
        roles: roles.map(|r| r.iter().map(|s| s.to_string()).collect()),
        queue: queue.map(str::to_string),
    }
}

fn only(v: &[&str]) -> Choice {
    Choice::Only(v.iter().map(|s| s.to_string()).collect())
}

#[test]
fn give_roles_win_and_queue_is_preferred_only_if_allowed() {
    let remembered = vec!["x".to_string()];
    assert_eq!(
        effective_roles(&give(Some(&["a", "b"]), Some("b")), Some(Some(&remembered))),
        only(&["b", "a"])
    );
    assert_eq!(
        effective_roles(&give(Some(&["a"]), Some("evil")), None),
        only(&["a"])
    );
}

#[test]
fn remembered_roles_when_give_has_none() {
    let remembered = vec!["x".to_string(), "y".to_string()];
    assert_eq!(
        effective_roles(&give(None, Some("y")), Some(Some(&remembered))),
        only(&["y", "x"])
    );
    assert_eq!(
        effective_roles(&give(None, Some("z")), Some(Some(&remembered))),
        only(&["x", "y"])
    );
}

#[test]
fn any_queue_only_from_a_remembered_ready_without_roles() {
    assert_eq!(
        effective_roles(&give(None, Some("q")), Some(None)),
        Choice::Any {
            prefer: Some("q".into())
        }
    );
    // Not remembered: GIVE's queue alone, or nothing at all.
    assert_eq!(effective_roles(&give(None, Some("q")), None), only(&["q"]));
    assert_eq!(effective_roles(&give(None, None), None), Choice::Nothing);
}

#[test]
fn a_worker_whose_give_got_no_may_be_woken_again_at_once() {
    let now = Instant::now();
    let mut r = ReadyRegistry::new(cfg());
    r.on_ready(&path("w1"), &ready(Some(&["q"])), now);
    assert_eq!(r.wake_candidates("q", 1, now), vec![path("w1")]);
    // Woken and silent: throttled, the queue owes a wake.
    assert!(r.wake_candidates("q", 1, now + 10 * MS).is_empty());
    // Its GIVE got NO (decision 14): the throttle restarts.
    r.answered(&path("w1"));
    assert_eq!(r.wake_candidates("q", 1, now + 20 * MS), vec![path("w1")]);
    r.answered(&path("w1"));
    assert_eq!(
        r.on_ready(&path("w1"), &ready(Some(&["q"])), now + 30 * MS),
        ReadyOutcome::Refreshed { offer: true }
    );
    // Unknown paths are ignored.
    r.answered(&path("nobody"));
    assert_eq!(r.len(), 1);
}
