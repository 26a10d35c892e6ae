//! The hot GIVE (docs/wmp.md, worker rule 5 and decision 15): after a DONE whose TAKE said
//! `more=1`, the worker asks the same manager for the next job at once instead of sending
//! READY; a NO to it is followed by READY.

use std::time::{Duration, Instant};

use bytes::Bytes;
use jobyard_wmp_wire::*;
use jobyard_wmp_worker::worker::core::{Core, JobKey, Out};
use jobyard_wmp_worker::worker::{Outcome, WorkerConfig};

fn core(concurrency: usize, links: usize) -> (Core, Instant) {
    let now = Instant::now();
    let cfg = WorkerConfig {
        concurrency,
        lock_timeout: Duration::from_secs(5),
        ..WorkerConfig::default()
    };
    let mut c = Core::new(&cfg, Some(vec!["q".into(), "r".into()]), links);
    for l in 0..links {
        c.link_up(l, now);
    }
    (c, now)
}

fn decoded(out: &[Out]) -> Vec<(usize, Message)> {
    out.iter()
        .map(|(l, f)| (*l, decode(f, &Limits::default()).expect("valid WMP/1")))
        .collect()
}

fn commands(out: &[Out]) -> Vec<(usize, &'static str)> {
    decoded(out)
        .into_iter()
        .map(|(l, m)| (l, m.command.name()))
        .collect()
}

/// A TAKE on a direct connection (empty path), with `more=1` when `more`.
fn take(lock: &str, job: u64, more: bool, path: Path) -> Message {
    let mut msg = Message::new(
        path,
        Command::Take(Take {
            lock: lock.into(),
            manager: "m".into(),
            job,
            attempt: 1,
            queue: "r".into(),
            timeout_ms: 1000,
            body: Bytes::new(),
        }),
    );
    msg.extra.push("priority", "0");
    if more {
        msg.extra.push("more", "1");
    }
    msg
}

fn no(lock: &str) -> Message {
    Message::new(
        Vec::new(),
        Command::No(No {
            lock: lock.into(),
            manager: None,
        }),
    )
}

/// Runs a TAKE on `link` and finishes it; returns what the DONE went out with.
fn run(c: &mut Core, link: usize, msg: Message, now: Instant) -> Vec<Out> {
    let (_, start) = c.on_message(link, msg, now);
    let key: JobKey = start.expect("the job starts").key;
    c.job_finished(key, Outcome::Ok(Bytes::new()), now)
}

fn give_of(out: &[Out]) -> (usize, Path, Give) {
    let msgs = decoded(out);
    let (link, msg) = msgs
        .into_iter()
        .find(|(_, m)| matches!(m.command, Command::Give(_)))
        .expect("a GIVE");
    match msg.command {
        Command::Give(g) => (link, msg.path, g),
        _ => unreachable!(),
    }
}

#[test]
fn done_after_a_take_saying_more_is_followed_by_a_hot_give_not_ready() {
    let (mut c, now) = core(1, 1);
    let out = run(&mut c, 0, take("x", 1, true, Vec::new()), now);
    assert_eq!(commands(&out), vec![(0, "DONE"), (0, "GIVE")]);
    let (_, path, give) = give_of(&out);
    assert!(path.is_empty(), "the GIVE goes back the TAKE's way");
    assert_eq!(
        give.queue.as_deref(),
        Some("r"),
        "the queue the job came from"
    );
    assert_eq!(give.roles, Some(vec!["q".to_string(), "r".to_string()]));
    assert_eq!((c.free(), c.locks()), (0, 1), "the GIVE holds the slot");
    // Its TAKE runs like any other, and the next DONE asks again.
    let out = run(&mut c, 0, take(&give.lock, 2, true, Vec::new()), now);
    assert_eq!(commands(&out), vec![(0, "DONE"), (0, "GIVE")]);
}

#[test]
fn done_after_a_take_without_more_sends_ready_as_before() {
    let (mut c, now) = core(1, 1);
    let out = run(&mut c, 0, take("x", 1, false, Vec::new()), now);
    assert_eq!(commands(&out), vec![(0, "DONE"), (0, "READY")]);
    assert_eq!((c.free(), c.locks()), (1, 0));
}

#[test]
fn a_no_to_a_hot_give_is_followed_by_ready() {
    let (mut c, now) = core(1, 1);
    let out = run(&mut c, 0, take("x", 1, true, Vec::new()), now);
    let (_, _, give) = give_of(&out);
    let (out, start) = c.on_message(0, no(&give.lock), now);
    assert!(start.is_none());
    assert_eq!(commands(&out), vec![(0, "READY")]);
    assert_eq!((c.free(), c.locks()), (1, 0));
}

#[test]
fn a_no_to_a_hot_give_sends_ready_also_when_other_slots_were_free() {
    // Two slots, one job: the other slot was free all along, so the NO does not raise free
    // capacity from zero; the manager still has to learn that this worker waits.
    let (mut c, now) = core(2, 1);
    let out = run(&mut c, 0, take("x", 1, true, Vec::new()), now);
    let (_, _, give) = give_of(&out);
    assert_eq!((c.free(), c.locks()), (1, 1));
    let (out, _) = c.on_message(0, no(&give.lock), now);
    assert_eq!(commands(&out), vec![(0, "READY")]);
    // A NO to an ordinary GIVE with a slot still free sends nothing new.
    let wake = Message::new(
        Vec::new(),
        Command::Wake(Wake {
            queue: Some("q".into()),
            manager: None,
        }),
    );
    let (out, _) = c.on_message(0, wake, now);
    let (_, _, give) = give_of(&out);
    assert!(c.on_message(0, no(&give.lock), now).0.is_empty());
}

#[test]
fn an_unanswered_hot_give_times_out_into_ready() {
    let (mut c, now) = core(1, 1);
    run(&mut c, 0, take("x", 1, true, Vec::new()), now);
    let out = c.tick(now + Duration::from_secs(5));
    assert_eq!(commands(&out), vec![(0, "READY")]);
    assert_eq!(c.stats.locks_expired, 1);
}

#[test]
fn with_two_managers_a_job_from_a_hot_give_is_followed_by_ready_everywhere() {
    let (mut c, now) = core(1, 2);
    let out = run(&mut c, 0, take("x", 1, true, Vec::new()), now);
    assert_eq!(commands(&out), vec![(0, "DONE"), (0, "GIVE")]);
    let (_, _, give) = give_of(&out);
    // The job that hot GIVE fetched: the other manager gets its turn.
    let out = run(&mut c, 0, take(&give.lock, 2, true, Vec::new()), now);
    assert_eq!(
        commands(&out),
        vec![(0, "DONE"), (0, "READY"), (1, "READY")]
    );
    // With the other manager gone, hot GIVEs follow each other again.
    c.link_down(1);
    let out = run(&mut c, 0, take("y", 3, true, Vec::new()), now);
    let (_, _, give) = give_of(&out);
    let out = run(&mut c, 0, take(&give.lock, 4, true, Vec::new()), now);
    assert_eq!(commands(&out), vec![(0, "DONE"), (0, "GIVE")]);
}

#[test]
fn behind_a_device_hot_gives_do_not_follow_each_other() {
    // A device fans READY out to every manager behind it, so its path may lead to others.
    let (mut c, now) = core(1, 1);
    let via = vec![Bytes::from_static(b"u1")];
    let out = run(&mut c, 0, take("x", 1, true, via.clone()), now);
    let (_, path, give) = give_of(&out);
    assert_eq!(
        path, via,
        "the GIVE returns through the device to the same manager"
    );
    let out = run(&mut c, 0, take(&give.lock, 2, true, via), now);
    assert_eq!(commands(&out), vec![(0, "DONE"), (0, "READY")]);
}

#[test]
fn no_hot_give_while_stopping_or_after_a_reject() {
    let (mut c, now) = core(1, 1);
    let key = c
        .on_message(0, take("x", 1, true, Vec::new()), now)
        .1
        .unwrap()
        .key;
    let out = c.job_finished(key, Outcome::Reject, now);
    assert_eq!(commands(&out), vec![(0, "DONE"), (0, "READY")]);
    let key = c
        .on_message(0, take("y", 2, true, Vec::new()), now)
        .1
        .unwrap()
        .key;
    c.stop();
    let out = c.job_finished(key, Outcome::Ok(Bytes::new()), now);
    assert_eq!(commands(&out), vec![(0, "DONE")]);
    assert!(c.finished());
}
