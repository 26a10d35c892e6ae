//! Who gets which job when: priorities, leases (TTR), DEADLINE_SOON, timeouts, delays and
//! disconnects, against the real binary. Waits are bounded generously; nothing here asserts
//! that the server is fast, only that it does what the protocol defines.

mod common;

use std::time::Duration;

use common::{serve, wait_stat};

#[test]
fn lowest_priority_then_lowest_id_across_all_watched_tubes() {
    let (s, _dir) = serve();
    let mut c = s.client();
    c.check("use a", "USING a");
    let a5 = c.put(5, 0, 60, b"a5");
    let a1 = c.put(1, 0, 60, b"a1");
    c.check("use b", "USING b");
    let b1 = c.put(1, 0, 60, b"b1");
    let b0 = c.put(0, 0, 60, b"b0");
    let b5 = c.put(5, 0, 60, b"b5");
    c.check("use unwatched", "USING unwatched");
    c.put(0, 0, 60, b"never");
    c.check("watch a", "WATCHING 2");
    c.check("watch b", "WATCHING 3");
    c.check("ignore default", "WATCHING 2");
    let order: Vec<u64> = (0..5).map(|_| c.reserve().0).collect();
    assert_eq!(order, [b0, a1, b1, a5, b5]);
    c.check("reserve-with-timeout 0", "TIMED_OUT");
}

#[test]
fn a_released_job_goes_back_ahead_of_newer_jobs_of_the_same_priority() {
    let (s, _dir) = serve();
    let mut c = s.client();
    let first = c.put(10, 0, 60, b"first");
    let second = c.put(10, 0, 60, b"second");
    assert_eq!(c.reserve().0, first);
    let third = c.put(10, 0, 60, b"third");
    c.check(&format!("release {first} 10 0"), "RELEASED");
    assert_eq!(c.reserve().0, first);
    assert_eq!(c.reserve().0, second);
    assert_eq!(c.reserve().0, third);
    // A release with a more urgent priority jumps the queue.
    c.check(&format!("release {third} 0 0"), "RELEASED");
    c.check(&format!("release {second} 20 0"), "RELEASED");
    c.check(&format!("release {first} 20 0"), "RELEASED");
    assert_eq!(c.reserve().0, third);
    assert_eq!(c.reserve().0, first);
    assert_eq!(c.reserve().0, second);
}

#[test]
fn ttr_zero_becomes_one() {
    let (s, _dir) = serve();
    let mut c = s.client();
    let id = c.put(0, 0, 0, b"x");
    assert_eq!(c.job_stat(id, "ttr"), "1");
}

#[test]
fn a_silent_workers_lease_expires_on_time() {
    let (s, _dir) = serve();
    let mut silent = s.client();
    let id = silent.put(0, 0, 1, b"slow");
    assert_eq!(silent.reserve().0, id);
    // The holder sends nothing from now on; another connection gets the job once the
    // 1-second lease is over.
    let mut other = s.client();
    other.timeout = Duration::from_secs(40);
    assert_eq!(other.reserve_with("reserve-with-timeout 30").0, id);
    let st = other.yaml(&format!("stats-job {id}"));
    assert_eq!(st["timeouts"], "1");
    assert_eq!(st["reserves"], "2");
    assert_eq!(st["releases"], "0");
    assert_eq!(st["state"], "reserved");
    assert_eq!(other.stat("job-timeouts"), "1");
    // The first holder lost the job.
    silent.check(&format!("release {id} 0 0"), "NOT_FOUND");
    silent.check(&format!("touch {id}"), "NOT_FOUND");
    silent.check(&format!("delete {id}"), "NOT_FOUND");
    other.check(&format!("delete {id}"), "DELETED");
}

#[test]
fn an_expired_lease_serves_a_waiting_reserve() {
    let (s, _dir) = serve();
    let mut holder = s.client();
    let mut waiter = s.client();
    let id = holder.put(0, 0, 1, b"x");
    assert_eq!(holder.reserve().0, id);
    waiter.cmd("reserve");
    // Bounded by the client's reply timeout (15 s), far beyond the 1 s lease.
    assert_eq!(waiter.read_job("RESERVED").0, id);
    assert_eq!(waiter.job_stat(id, "timeouts"), "1");
}

#[test]
fn touch_restarts_the_lease_with_the_full_ttr() {
    let (s, _dir) = serve();
    let mut c = s.client();
    let id = c.put(0, 0, 30, b"x");
    assert_eq!(c.reserve().0, id);
    std::thread::sleep(Duration::from_millis(2200));
    // Pipelined so that both stats are taken right around the touch.
    c.send(format!(
        "stats-job {id}\r\ntouch {id}\r\nstats-job {id}\r\n"
    ));
    let before = common::parse_dict(&c.read_ok());
    c.expect("TOUCHED");
    let after = common::parse_dict(&c.read_ok());
    let left = |st: &[(String, String)]| -> u64 {
        st.iter()
            .find(|(k, _)| k == "time-left")
            .unwrap()
            .1
            .parse()
            .unwrap()
    };
    assert!(
        left(&before) <= 27,
        "time-left before touch: {}",
        left(&before)
    );
    assert!(
        left(&after) >= 29,
        "time-left after touch: {}",
        left(&after)
    );
}

#[test]
fn deadline_soon_at_once_when_a_lease_is_in_the_safety_margin_and_nothing_is_ready() {
    let (s, _dir) = serve();
    let mut c = s.client();
    let id = c.put(0, 0, 1, b"x");
    // All in one write: the commands run within the 1 s lease, which with ttr 1 is entirely
    // inside the safety margin.
    c.send("reserve\r\nreserve\r\nreserve-with-timeout 5\r\nreserve-with-timeout 0\r\n");
    assert_eq!(c.read_job("RESERVED").0, id);
    c.expect("DEADLINE_SOON");
    c.expect("DEADLINE_SOON");
    c.expect("DEADLINE_SOON");
}

#[test]
fn a_ready_job_wins_over_deadline_soon() {
    let (s, _dir) = serve();
    let mut c = s.client();
    let a = c.put(0, 0, 1, b"a");
    let b = c.put(1, 0, 1, b"b");
    c.send("reserve\r\nreserve\r\nreserve-with-timeout 0\r\n");
    assert_eq!(c.read_job("RESERVED").0, a);
    assert_eq!(c.read_job("RESERVED").0, b);
    c.expect("DEADLINE_SOON");
}

#[test]
fn reserve_job_never_answers_deadline_soon() {
    let (s, _dir) = serve();
    let mut c = s.client();
    let a = c.put(0, 0, 1, b"a");
    let b = c.put(0, 0, 1, b"b");
    c.send(format!(
        "reserve-job {a}\r\nreserve-job {b}\r\nreserve-job 999\r\n"
    ));
    assert_eq!(c.read_job("RESERVED").0, a);
    assert_eq!(c.read_job("RESERVED").0, b);
    c.expect("NOT_FOUND");
}

#[test]
fn deadline_soon_ends_a_blocked_reserve() {
    let (s, _dir) = serve();
    let mut c = s.client();
    let mut watcher = s.client();
    // ttr 8: the reserve below blocks for about 7 s before the margin is reached, so the
    // watcher sees it waiting first.
    let id = c.put(0, 0, 8, b"x");
    assert_eq!(c.reserve().0, id);
    c.cmd("reserve");
    wait_stat(&mut watcher, "current-waiting", "1");
    c.timeout = Duration::from_secs(30);
    c.expect("DEADLINE_SOON");
    wait_stat(&mut watcher, "current-waiting", "0");
    // It changed nothing: the job is still reserved by c (or, if this machine is very slow,
    // its lease ran out and it is ready again); in no case was it released or buried.
    let st = watcher.yaml(&format!("stats-job {id}"));
    assert!(
        ["reserved", "ready"].contains(&st["state"].as_str()),
        "{st:?}"
    );
    assert_eq!(st["releases"], "0");
    assert_eq!(st["buries"], "0");
}

#[test]
fn reserve_with_timeout_times_out_while_blocked() {
    let (s, _dir) = serve();
    let mut c = s.client();
    let mut watcher = s.client();
    c.cmd("reserve-with-timeout 2");
    c.expect("TIMED_OUT");
    wait_stat(&mut watcher, "current-waiting", "0");
    // A job put afterwards is not handed to the timed-out reserve.
    let id = watcher.put(0, 0, 60, b"x");
    assert_eq!(watcher.job_stat(id, "state"), "ready");
    assert_eq!(c.reserve_with("reserve-with-timeout 0").0, id);
}

#[test]
fn a_delayed_job_becomes_ready_when_its_delay_ends() {
    let (s, _dir) = serve();
    let mut c = s.client();
    // One write, so the polls run well within the 1 s delay.
    c.send("put 0 1 60 5\r\nlater\r\nreserve-with-timeout 0\r\npeek-ready\r\n");
    let id: u64 = c
        .read_line()
        .strip_prefix("INSERTED ")
        .unwrap()
        .parse()
        .unwrap();
    c.expect("TIMED_OUT");
    c.expect("NOT_FOUND");
    assert_eq!(
        c.reserve_with("reserve-with-timeout 10"),
        (id, b"later".to_vec())
    );
    let st = c.yaml(&format!("stats-job {id}"));
    assert_eq!(st["delay"], "1");
    assert_eq!(st["reserves"], "1");
}

#[test]
fn a_waiting_reserve_is_served_by_release_kick_and_delay_end() {
    let (s, _dir) = serve();
    let mut a = s.client();
    let mut w = s.client();
    let id = a.put(0, 0, 60, b"x");
    assert_eq!(a.reserve().0, id);
    // Release.
    w.cmd("reserve");
    w.expect_silence(Duration::from_millis(200));
    a.check(&format!("release {id} 0 0"), "RELEASED");
    assert_eq!(w.read_job("RESERVED").0, id);
    // Kick of a buried job.
    w.check(&format!("bury {id} 0"), "BURIED");
    w.cmd("reserve");
    w.expect_silence(Duration::from_millis(200));
    a.check("kick 1", "KICKED 1");
    assert_eq!(w.read_job("RESERVED").0, id);
    // Kick-job of a delayed job.
    w.check(&format!("release {id} 0 1000"), "RELEASED");
    w.cmd("reserve");
    w.expect_silence(Duration::from_millis(200));
    a.check(&format!("kick-job {id}"), "KICKED");
    assert_eq!(w.read_job("RESERVED").0, id);
    // The end of a release delay.
    w.check(&format!("release {id} 0 1"), "RELEASED");
    w.cmd("reserve");
    assert_eq!(w.read_job("RESERVED").0, id);
}

#[test]
fn a_disconnect_returns_reserved_jobs_to_ready() {
    let (s, _dir) = serve();
    let mut a = s.client();
    let j1 = a.put(0, 0, 100, b"1");
    let j2 = a.put(0, 0, 100, b"2");
    assert_eq!(a.reserve().0, j1);
    assert_eq!(a.reserve().0, j2);
    let mut b = s.client();
    assert_eq!(b.stat("current-jobs-reserved"), "2");
    drop(a);
    assert_eq!(b.reserve_with("reserve-with-timeout 10").0, j1);
    assert_eq!(b.reserve_with("reserve-with-timeout 10").0, j2);
    for id in [j1, j2] {
        let st = b.yaml(&format!("stats-job {id}"));
        assert_eq!(st["reserves"], "2");
        assert_eq!(st["releases"], "0", "a disconnect is not a release");
        assert_eq!(st["timeouts"], "0", "a disconnect is not a timeout");
    }
}

#[test]
fn a_disconnect_serves_a_waiting_reserve() {
    let (s, _dir) = serve();
    let mut a = s.client();
    let mut w = s.client();
    let id = a.put(0, 0, 100, b"x");
    assert_eq!(a.reserve().0, id);
    w.cmd("reserve");
    w.expect_silence(Duration::from_millis(200));
    drop(a);
    assert_eq!(w.read_job("RESERVED").0, id);
}

#[test]
fn a_disconnected_waiter_is_not_given_jobs() {
    let (s, _dir) = serve();
    let mut gone = s.client();
    let mut c = s.client();
    gone.cmd("reserve");
    wait_stat(&mut c, "current-waiting", "1");
    drop(gone);
    wait_stat(&mut c, "current-waiting", "0");
    let id = c.put(0, 0, 60, b"x");
    assert_eq!(c.reserve_with("reserve-with-timeout 0").0, id);
}

#[test]
fn several_waiters_each_get_one_job() {
    let (s, _dir) = serve();
    let mut p = s.client();
    let mut waiters: Vec<_> = (0..4).map(|_| s.client()).collect();
    for w in &mut waiters {
        w.cmd("reserve");
    }
    wait_stat(&mut p, "current-waiting", "4");
    let mut ids: Vec<u64> = (0..4).map(|i| p.put(0, 0, 60, &[b'a' + i])).collect();
    let mut got: Vec<u64> = waiters
        .iter_mut()
        .map(|w| w.read_job("RESERVED").0)
        .collect();
    ids.sort();
    got.sort();
    assert_eq!(got, ids, "every job went to exactly one waiter");
    assert_eq!(p.stat("current-jobs-reserved"), "4");
}
