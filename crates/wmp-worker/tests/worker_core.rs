//! The worker's protocol state machine (docs/wmp.md, "Worker behaviour"), driven with
//! synthetic instants: locks, READY on free capacity, late TAKE, roles, retries, stopping.

use std::time::{Duration, Instant};

use bytes::Bytes;
use jobyard_wmp_wire::*;
use jobyard_wmp_worker::worker::core::{Core, Out};
use jobyard_wmp_worker::worker::{Outcome, WorkerConfig};

fn cfg(concurrency: usize) -> WorkerConfig {
    WorkerConfig {
        concurrency,
        lock_timeout: Duration::from_secs(5),
        ready_retry_min: Duration::from_secs(1),
        ready_retry_max: Duration::from_secs(30),
        ..WorkerConfig::default()
    }
}

fn core(concurrency: usize, links: usize) -> (Core, Instant) {
    let now = Instant::now();
    let mut c = Core::new(&cfg(concurrency), Some(vec!["q".into()]), links);
    for l in 0..links {
        let out = c.link_up(l, now);
        assert_eq!(commands(&out), vec![(l, "READY".to_string())]);
    }
    (c, now)
}

fn decoded(out: &[Out]) -> Vec<(usize, Message)> {
    out.iter()
        .map(|(l, f)| {
            (
                *l,
                decode(f, &Limits::default()).expect("the core sends valid WMP/1"),
            )
        })
        .collect()
}

fn commands(out: &[Out]) -> Vec<(usize, String)> {
    decoded(out)
        .into_iter()
        .map(|(l, m)| (l, m.command.name().to_string()))
        .collect()
}

fn path(alias: &str) -> Path {
    vec![Bytes::copy_from_slice(alias.as_bytes())]
}

fn wake(queue: &str) -> Message {
    Message::new(
        path("u0"),
        Command::Wake(Wake {
            queue: Some(queue.into()),
            manager: None,
        }),
    )
}

fn take(lock: &str, job: u64, queue: &str) -> Message {
    Message::new(
        path("u0"),
        Command::Take(Take {
            lock: lock.into(),
            manager: "m".into(),
            job,
            attempt: 1,
            queue: queue.into(),
            timeout_ms: 1000,
            body: Bytes::from_static(b"body"),
        }),
    )
}

/// WAKE on link 0 and return the lock of the GIVE it produced.
fn give_lock(c: &mut Core, now: Instant) -> String {
    let (out, start) = c.on_message(0, wake("q"), now);
    assert!(start.is_none());
    let msgs = decoded(&out);
    assert_eq!(msgs.len(), 1);
    match &msgs[0].1.command {
        Command::Give(g) => g.lock.clone(),
        other => panic!("expected GIVE, got {other:?}"),
    }
}

#[test]
fn wake_locks_a_slot_and_gives_on_the_same_path() {
    let (mut c, now) = core(1, 1);
    let (out, _) = c.on_message(0, wake("q"), now);
    let msgs = decoded(&out);
    assert_eq!(msgs[0].1.path, path("u0"));
    match &msgs[0].1.command {
        Command::Give(g) => {
            assert_eq!(g.queue.as_deref(), Some("q"));
            assert_eq!(g.roles, Some(vec!["q".to_string()]));
        }
        other => panic!("{other:?}"),
    }
    assert_eq!((c.free(), c.locks()), (0, 1));
    // Busy now: the next WAKE is ignored.
    assert!(c.on_message(0, wake("q"), now).0.is_empty());
}

#[test]
fn wake_for_a_queue_outside_roles_is_ignored() {
    let (mut c, now) = core(1, 1);
    assert!(c.on_message(0, wake("other"), now).0.is_empty());
    assert_eq!(c.free(), 1);
}

#[test]
fn locks_are_unique_tokens() {
    let (mut c, now) = core(3, 1);
    let a = give_lock(&mut c, now);
    let b = give_lock(&mut c, now);
    assert_ne!(a, b);
}

#[test]
fn take_with_lock_starts_the_job_and_asks_for_more_when_room_is_left() {
    let (mut c, now) = core(2, 1);
    let lock = give_lock(&mut c, now);
    let (out, start) = c.on_message(0, take(&lock, 7, "q"), now);
    let start = start.expect("job starts");
    assert_eq!(start.key, ("m".to_string(), 7, 1));
    assert_eq!(start.job.body, Bytes::from_static(b"body"));
    assert_eq!(commands(&out), vec![(0, "READY".to_string())]);
    assert_eq!((c.running(), c.locks(), c.free()), (1, 0, 1));
}

#[test]
fn take_filling_the_last_slot_sends_no_ready() {
    let (mut c, now) = core(1, 1);
    let lock = give_lock(&mut c, now);
    let (out, start) = c.on_message(0, take(&lock, 7, "q"), now);
    assert!(start.is_some());
    assert!(out.is_empty());
}

#[test]
fn late_take_runs_if_free_else_is_rejected() {
    let (mut c, now) = core(1, 1);
    let (_, start) = c.on_message(0, take("gone", 1, "q"), now);
    assert!(
        start.is_some(),
        "free slot: a TAKE for an unknown lock still runs"
    );
    let (out, start) = c.on_message(0, take("gone2", 2, "q"), now);
    assert!(start.is_none());
    let msgs = decoded(&out);
    match &msgs[0].1.command {
        Command::Done(d) => {
            assert_eq!((d.job, d.status), (2, Status::Reject));
            assert_eq!(msgs[0].1.path, path("u0"));
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(c.stats.rejected, 1);
}

#[test]
fn take_outside_roles_is_rejected_and_frees_its_lock() {
    let (mut c, now) = core(1, 2);
    let lock = give_lock(&mut c, now);
    let (out, start) = c.on_message(0, take(&lock, 3, "other"), now);
    assert!(start.is_none());
    let cmds = commands(&out);
    assert_eq!(cmds[0], (0, "DONE".to_string()));
    // The slot came back from zero: READY to every manager.
    assert_eq!(
        &cmds[1..],
        &[(0, "READY".to_string()), (1, "READY".to_string())]
    );
    assert_eq!(c.free(), 1);
}

#[test]
fn a_lock_only_answers_on_its_own_link() {
    let (mut c, now) = core(1, 2);
    let lock = give_lock(&mut c, now);
    // Same token from the other manager: not our lock there, and no free slot: reject.
    let (out, start) = c.on_message(1, take(&lock, 4, "q"), now);
    assert!(start.is_none());
    assert_eq!(commands(&out), vec![(1, "DONE".to_string())]);
    assert_eq!(c.locks(), 1);
}

#[test]
fn duplicate_take_is_ignored() {
    let (mut c, now) = core(2, 1);
    assert!(c.on_message(0, take("a", 1, "q"), now).1.is_some());
    let (out, start) = c.on_message(0, take("a", 1, "q"), now);
    assert!(start.is_none() && out.is_empty());
    assert_eq!(c.running(), 1);
}

#[test]
fn no_releases_the_lock_and_ready_goes_to_all_managers() {
    let (mut c, now) = core(1, 2);
    let lock = give_lock(&mut c, now);
    let no = Message::new(
        path("u0"),
        Command::No(No {
            lock,
            manager: None,
        }),
    );
    let (out, _) = c.on_message(0, no, now);
    assert_eq!(
        commands(&out),
        vec![(0, "READY".to_string()), (1, "READY".to_string())]
    );
    assert_eq!(c.free(), 1);
}

#[test]
fn unknown_no_is_ignored() {
    let (mut c, now) = core(1, 1);
    let no = Message::new(
        path("u0"),
        Command::No(No {
            lock: "x".into(),
            manager: None,
        }),
    );
    assert!(c.on_message(0, no, now).0.is_empty());
}

#[test]
fn lock_times_out() {
    let (mut c, now) = core(1, 1);
    give_lock(&mut c, now);
    assert_eq!(c.next_deadline(), Some(now + Duration::from_secs(5)));
    assert!(c.tick(now + Duration::from_millis(4999)).is_empty());
    let out = c.tick(now + Duration::from_secs(5));
    assert_eq!(commands(&out), vec![(0, "READY".to_string())]);
    assert_eq!((c.locks(), c.stats.locks_expired), (0, 1));
}

#[test]
fn finished_job_sends_done_on_the_take_path_and_ready_when_room_returns() {
    let (mut c, now) = core(1, 2);
    let lock = give_lock(&mut c, now);
    let (_, start) = c.on_message(0, take(&lock, 9, "q"), now);
    let key = start.unwrap().key;
    let out = c.job_finished(key, Outcome::Ok(Bytes::from_static(b"r")), now);
    let msgs = decoded(&out);
    assert_eq!(msgs[0].0, 0);
    assert_eq!(msgs[0].1.path, path("u0"));
    match &msgs[0].1.command {
        Command::Done(d) => {
            assert_eq!(
                (d.manager.as_str(), d.job, d.attempt, d.status),
                ("m", 9, 1, Status::Ok)
            );
            assert_eq!(d.result, Bytes::from_static(b"r"));
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        commands(&out[1..]),
        vec![(0, "READY".to_string()), (1, "READY".to_string())]
    );
}

#[test]
fn fail_outcome_carries_code_and_text() {
    let (mut c, now) = core(1, 1);
    let key = c.on_message(0, take("x", 1, "q"), now).1.unwrap().key;
    let out = c.job_finished(
        key,
        Outcome::Fail {
            error: Some("exit_2".into()),
            message: Bytes::from_static(b"bad"),
        },
        now,
    );
    match &decoded(&out)[0].1.command {
        Command::Done(d) => {
            assert_eq!(d.status, Status::Fail);
            assert_eq!(d.error.as_deref(), Some("exit_2"));
            assert_eq!(d.result, Bytes::from_static(b"bad"));
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn ready_retry_backs_off_to_the_maximum_and_resets_on_traffic() {
    let (mut c, start) = core(1, 1);
    let mut now = start;
    let mut gaps = Vec::new();
    for _ in 0..10 {
        let due = c.next_deadline().expect("a retry is scheduled");
        gaps.push(due - now);
        now = due;
        assert_eq!(commands(&c.tick(now)), vec![(0, "READY".to_string())]);
    }
    // 1 s doubling to 30 s, each within ±20 %.
    let nominal = [1, 2, 4, 8, 16, 30, 30, 30, 30, 30];
    for (gap, n) in gaps.iter().zip(nominal) {
        let n = Duration::from_secs(n);
        assert!(
            *gap >= n * 8 / 10 && *gap <= n * 12 / 10,
            "{gap:?} vs {n:?}"
        );
    }
    // Any message from the manager restarts at the minimum.
    c.on_message(0, wake("other"), now);
    assert_eq!(c.next_deadline(), Some(now + Duration::from_secs(1)));
}

#[test]
fn no_ready_retry_while_full_or_down() {
    let (mut c, now) = core(1, 2);
    c.link_down(1);
    let key = c.on_message(0, take("x", 1, "q"), now).1.unwrap().key;
    assert_eq!(c.next_deadline(), None, "full: nothing to announce");
    let out = c.job_finished(key, Outcome::Ok(Bytes::new()), now);
    // READY only on the link that is up.
    assert_eq!(commands(&out[1..]), vec![(0, "READY".to_string())]);
}

#[test]
fn stopping_rejects_takes_sends_no_ready_and_finishes_when_idle() {
    let (mut c, now) = core(2, 1);
    let key = c.on_message(0, take("a", 1, "q"), now).1.unwrap().key;
    c.stop();
    assert!(!c.finished());
    assert!(
        c.on_message(0, wake("q"), now).0.is_empty(),
        "no GIVE while stopping"
    );
    let (out, start) = c.on_message(0, take("b", 2, "q"), now);
    assert!(start.is_none());
    assert_eq!(commands(&out), vec![(0, "DONE".to_string())]);
    let out = c.job_finished(key, Outcome::Ok(Bytes::new()), now);
    assert_eq!(
        commands(&out),
        vec![(0, "DONE".to_string())],
        "no READY after the last DONE"
    );
    assert!(c.finished());
}

#[test]
fn any_queue_worker_takes_every_queue() {
    let now = Instant::now();
    let mut c = Core::new(&cfg(1), None, 1);
    let out = c.link_up(0, now);
    match &decoded(&out)[0].1.command {
        Command::Ready(r) => assert_eq!(r.roles, None),
        other => panic!("{other:?}"),
    }
    assert!(c.on_message(0, take("x", 1, "anything"), now).1.is_some());
}
