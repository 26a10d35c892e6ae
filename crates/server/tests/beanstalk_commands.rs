//! Every beanstalkd command against the real binary, with each of its replies.

mod common;

use std::time::Duration;

use common::{serve, Client};

fn job_state(c: &mut Client, id: u64) -> String {
    c.job_stat(id, "state")
}

#[test]
fn put_stores_any_bytes_and_peek_returns_them_exactly() {
    let (s, _dir) = serve();
    let mut c = s.client();
    let body = b"line one\r\nline two\0\r\n\n\r";
    let id = c.put(10, 0, 60, body);
    assert_eq!(id, 1, "ids start at 1");
    assert_eq!(c.peek("peek 1"), Some((1, body.to_vec())));
    // An empty body is legal.
    assert_eq!(c.put(10, 0, 60, b""), 2);
    assert_eq!(c.peek("peek 2"), Some((2, Vec::new())));
    // Binary bytes, all 256 values.
    let all: Vec<u8> = (0..=255u8).collect();
    let id = c.put(10, 0, 60, &all);
    assert_eq!(c.peek(&format!("peek {id}")), Some((id, all.clone())));
    let (got, b) = c.reserve();
    assert_eq!(
        (got, b),
        (1, body.to_vec()),
        "lowest id first at equal priority"
    );
    assert_eq!(c.peek("peek 99"), None);
    assert_eq!(c.peek("peek 0"), None);
    assert_eq!(c.peek("peek 18446744073709551615"), None);
}

#[test]
fn put_sets_state_priority_delay_and_ttr() {
    let (s, _dir) = serve();
    let mut c = s.client();
    let ready = c.put(4294967295, 0, 7, b"r");
    let delayed = c.put(0, 1000, 9, b"d");
    let st = c.yaml(&format!("stats-job {ready}"));
    assert_eq!(st["state"], "ready");
    assert_eq!(st["pri"], "4294967295");
    assert_eq!(st["ttr"], "7");
    assert_eq!(st["delay"], "0");
    assert_eq!(st["tube"], "default");
    let st = c.yaml(&format!("stats-job {delayed}"));
    assert_eq!(st["state"], "delayed");
    assert_eq!(st["pri"], "0");
    assert_eq!(st["delay"], "1000");
    let left: u64 = st["time-left"].parse().unwrap();
    assert!((900..=1000).contains(&left), "time-left {left}");
}

#[test]
fn use_and_list_tube_used() {
    let (s, _dir) = serve();
    let mut c = s.client();
    c.check("list-tube-used", "USING default");
    c.check("use jobs.v1", "USING jobs.v1");
    c.check("list-tube-used", "USING jobs.v1");
    let id = c.put(1, 0, 10, b"x");
    assert_eq!(c.job_stat(id, "tube"), "jobs.v1");
    assert_eq!(c.peek_id("peek-ready"), id);
    c.check("use default", "USING default");
    assert_eq!(
        c.peek("peek-ready"),
        None,
        "peek-ready looks at the used tube only"
    );
    // Using the same tube again changes nothing.
    c.check("use default", "USING default");
    c.check("list-tube-used", "USING default");
    // Another connection has its own used tube.
    let mut d = s.client();
    d.check("list-tube-used", "USING default");
}

#[test]
fn watch_and_ignore_maintain_the_watch_list_in_beanstalkd_order() {
    let (s, _dir) = serve();
    let mut c = s.client();
    assert_eq!(c.list("list-tubes-watched"), ["default"]);
    c.check("watch a", "WATCHING 2");
    c.check("watch a", "WATCHING 2");
    c.check("watch b", "WATCHING 3");
    c.check("watch c", "WATCHING 4");
    assert_eq!(c.list("list-tubes-watched"), ["default", "a", "b", "c"]);
    // Removing one moves the last into its place.
    c.check("ignore default", "WATCHING 3");
    assert_eq!(c.list("list-tubes-watched"), ["c", "a", "b"]);
    // Ignoring a tube that is not watched (or does not exist) is a no-op.
    c.check("ignore default", "WATCHING 3");
    c.check("ignore nosuchtube", "WATCHING 3");
    assert!(!c.list("list-tubes").contains(&"nosuchtube".to_string()));
    c.check("ignore a", "WATCHING 2");
    c.check("ignore c", "WATCHING 1");
    assert_eq!(c.list("list-tubes-watched"), ["b"]);
    c.check("ignore b", "NOT_IGNORED");
    assert_eq!(c.list("list-tubes-watched"), ["b"]);
    // A second connection starts with the default watch list.
    let mut d = s.client();
    d.check("ignore default", "NOT_IGNORED");
    assert_eq!(d.list("list-tubes-watched"), ["default"]);
}

#[test]
fn reserve_touch_release_bury_kick_delete_lifecycle() {
    let (s, _dir) = serve();
    let mut c = s.client();
    let id = c.put(100, 0, 60, b"work");
    assert_eq!(c.reserve(), (id, b"work".to_vec()));
    let st = c.yaml(&format!("stats-job {id}"));
    assert_eq!(st["state"], "reserved");
    assert_eq!(st["reserves"], "1");
    c.check(&format!("touch {id}"), "TOUCHED");
    c.check(&format!("release {id} 7 0"), "RELEASED");
    let st = c.yaml(&format!("stats-job {id}"));
    assert_eq!(st["state"], "ready");
    assert_eq!(st["pri"], "7");
    assert_eq!(st["releases"], "1");
    assert_eq!(c.reserve().0, id);
    c.check(&format!("bury {id} 3"), "BURIED");
    let st = c.yaml(&format!("stats-job {id}"));
    assert_eq!(st["state"], "buried");
    assert_eq!(st["pri"], "3");
    assert_eq!(st["buries"], "1");
    assert_eq!(c.peek_id("peek-buried"), id);
    assert_eq!(c.peek("peek-ready"), None);
    c.check("kick 1", "KICKED 1");
    let st = c.yaml(&format!("stats-job {id}"));
    assert_eq!(st["state"], "ready");
    assert_eq!(st["kicks"], "1");
    assert_eq!(c.reserve().0, id);
    assert_eq!(c.job_stat(id, "reserves"), "3");
    c.check(&format!("delete {id}"), "DELETED");
    c.check(&format!("delete {id}"), "NOT_FOUND");
    assert_eq!(c.peek(&format!("peek {id}")), None);
    c.check(&format!("stats-job {id}"), "NOT_FOUND");
}

#[test]
fn release_with_a_delay_makes_the_job_delayed() {
    let (s, _dir) = serve();
    let mut c = s.client();
    let id = c.put(1, 0, 60, b"x");
    c.reserve();
    c.check(&format!("release {id} 2 500"), "RELEASED");
    let st = c.yaml(&format!("stats-job {id}"));
    assert_eq!(st["state"], "delayed");
    assert_eq!(st["delay"], "500");
    assert_eq!(st["pri"], "2");
    assert_eq!(c.peek_id("peek-delayed"), id);
    c.check("reserve-with-timeout 0", "TIMED_OUT");
}

#[test]
fn commands_on_unknown_jobs_are_not_found() {
    let (s, _dir) = serve();
    let mut c = s.client();
    for line in [
        "delete 42",
        "release 42 0 0",
        "bury 42 0",
        "touch 42",
        "peek 42",
        "kick-job 42",
        "stats-job 42",
        "reserve-job 42",
        "delete 18446744073709551615",
    ] {
        c.check(line, "NOT_FOUND");
    }
    for line in ["peek-ready", "peek-delayed", "peek-buried"] {
        c.check(line, "NOT_FOUND");
    }
}

#[test]
fn release_bury_and_touch_need_a_job_reserved_by_this_connection() {
    let (s, _dir) = serve();
    let mut a = s.client();
    let mut b = s.client();
    let id = a.put(1, 0, 60, b"x");
    // Ready, not reserved: only delete works.
    for line in [
        format!("release {id} 0 0"),
        format!("bury {id} 0"),
        format!("touch {id}"),
    ] {
        a.check(&line, "NOT_FOUND");
    }
    assert_eq!(a.reserve().0, id);
    // Reserved by a: b can neither change nor delete it, but can look at it.
    for line in [
        format!("release {id} 0 0"),
        format!("bury {id} 0"),
        format!("touch {id}"),
        format!("delete {id}"),
        format!("kick-job {id}"),
        format!("reserve-job {id}"),
    ] {
        b.check(&line, "NOT_FOUND");
    }
    assert_eq!(b.peek(&format!("peek {id}")), Some((id, b"x".to_vec())));
    assert_eq!(b.job_stat(id, "state"), "reserved");
    a.check(&format!("touch {id}"), "TOUCHED");
    a.check(&format!("delete {id}"), "DELETED");
}

#[test]
fn anyone_may_delete_ready_delayed_and_buried_jobs() {
    let (s, _dir) = serve();
    let mut a = s.client();
    let mut b = s.client();
    let ready = a.put(5, 0, 60, b"r");
    let delayed = a.put(5, 100, 60, b"d");
    let buried = a.put(1, 0, 60, b"b");
    assert_eq!(a.reserve().0, buried);
    a.check(&format!("bury {buried} 1"), "BURIED");
    for id in [ready, delayed, buried] {
        b.check(&format!("delete {id}"), "DELETED");
    }
    assert_eq!(a.stat("current-jobs-ready"), "0");
    assert_eq!(a.stat("current-jobs-delayed"), "0");
    assert_eq!(a.stat("current-jobs-buried"), "0");
}

#[test]
fn reserve_with_timeout_polls_waits_and_times_out() {
    let (s, _dir) = serve();
    let mut c = s.client();
    c.check("reserve-with-timeout 0", "TIMED_OUT");
    c.check("reserve-with-timeout 1", "TIMED_OUT");
    let id = c.put(1, 0, 60, b"x");
    assert_eq!(c.reserve_with("reserve-with-timeout 0").0, id);
    let id2 = c.put(1, 0, 60, b"y");
    assert_eq!(c.reserve_with("reserve-with-timeout 4294967295").0, id2);
}

#[test]
fn blocking_reserve_is_served_by_a_later_put() {
    let (s, _dir) = serve();
    let mut worker = s.client();
    let mut producer = s.client();
    worker.cmd("reserve");
    worker.expect_silence(Duration::from_millis(200));
    let id = producer.put(1, 0, 60, b"late");
    assert_eq!(worker.read_job("RESERVED"), (id, b"late".to_vec()));
    // Commands pipelined behind a blocking reserve are answered after it.
    worker.send("reserve\r\nlist-tube-used\r\n");
    worker.expect_silence(Duration::from_millis(200));
    let id2 = producer.put(1, 0, 60, b"later");
    assert_eq!(worker.read_job("RESERVED").0, id2);
    worker.expect("USING default");
}

#[test]
fn reserve_job_takes_ready_delayed_or_buried_jobs_from_any_tube() {
    let (s, _dir) = serve();
    let mut p = s.client();
    p.check("use elsewhere", "USING elsewhere");
    let ready = p.put(5, 0, 60, b"r");
    let delayed = p.put(5, 1000, 60, b"d");
    let buried = p.put(0, 0, 60, b"b");
    p.check("watch elsewhere", "WATCHING 2");
    assert_eq!(p.reserve().0, buried);
    p.check(&format!("bury {buried} 0"), "BURIED");
    p.check("pause-tube elsewhere 1000", "PAUSED");

    // The worker does not watch `elsewhere`, and the tube is paused: reserve-job still works.
    let mut w = s.client();
    for (id, body, reserves) in [(ready, "r", "1"), (delayed, "d", "1"), (buried, "b", "2")] {
        assert_eq!(
            w.reserve_with(&format!("reserve-job {id}")),
            (id, body.as_bytes().to_vec())
        );
        let st = w.yaml(&format!("stats-job {id}"));
        assert_eq!(st["state"], "reserved");
        assert_eq!(st["reserves"], reserves, "job {id}");
    }
    // Already reserved (by itself or anyone) → NOT_FOUND.
    w.check(&format!("reserve-job {ready}"), "NOT_FOUND");
    p.check(&format!("reserve-job {ready}"), "NOT_FOUND");
    // Released, they become ready (or delayed if asked), whatever they were before.
    w.check(&format!("release {buried} 0 0"), "RELEASED");
    assert_eq!(job_state(&mut w, buried), "ready");
    w.check(&format!("release {delayed} 0 0"), "RELEASED");
    assert_eq!(job_state(&mut w, delayed), "ready");
    w.check(&format!("release {ready} 0 300"), "RELEASED");
    assert_eq!(job_state(&mut w, ready), "delayed");
    // The lease belongs to the connection that used reserve-job.
    assert_eq!(w.reserve_with(&format!("reserve-job {buried}")).0, buried);
    p.check(&format!("delete {buried}"), "NOT_FOUND");
    w.check(&format!("delete {buried}"), "DELETED");
}

#[test]
fn kick_job_kicks_one_buried_or_delayed_job_in_any_tube() {
    let (s, _dir) = serve();
    let mut c = s.client();
    c.check("use other", "USING other");
    let delayed = c.put(1, 1000, 60, b"d");
    let buried = c.put(1, 0, 60, b"b");
    let ready = c.put(1, 0, 60, b"r");
    c.check("watch other", "WATCHING 2");
    assert_eq!(c.reserve().0, buried);
    c.check(&format!("bury {buried} 1"), "BURIED");
    assert_eq!(c.reserve().0, ready);
    // Not in the used tube any more: kick-job works across tubes.
    c.check("use default", "USING default");
    c.check(&format!("kick-job {ready}"), "NOT_FOUND"); // reserved
    c.check(&format!("kick-job {buried}"), "KICKED");
    c.check(&format!("kick-job {delayed}"), "KICKED");
    for id in [buried, delayed] {
        let st = c.yaml(&format!("stats-job {id}"));
        assert_eq!(st["state"], "ready");
        assert_eq!(st["kicks"], "1");
    }
    c.check(&format!("kick-job {buried}"), "NOT_FOUND"); // ready now
    c.check("kick-job 999", "NOT_FOUND");
}

#[test]
fn kick_takes_buried_jobs_first_oldest_first_and_only_then_delayed_ones() {
    let (s, _dir) = serve();
    let mut c = s.client();
    let d1 = c.put(1, 1000, 60, b"d1");
    let d2 = c.put(1, 500, 60, b"d2"); // ready sooner than d1
    let b1 = c.put(1, 0, 60, b"b1");
    let b2 = c.put(1, 0, 60, b"b2");
    let b3 = c.put(1, 0, 60, b"b3");
    // Bury in the order b2, b3, b1.
    for id in [b2, b3, b1] {
        assert_eq!(c.reserve_with(&format!("reserve-job {id}")).0, id);
        c.check(&format!("bury {id} 1"), "BURIED");
    }
    // Buried jobs in another tube are not touched by kick in this one.
    c.check("use other", "USING other");
    let elsewhere = c.put(1, 0, 60, b"e");
    assert_eq!(
        c.reserve_with(&format!("reserve-job {elsewhere}")).0,
        elsewhere
    );
    c.check(&format!("bury {elsewhere} 1"), "BURIED");
    c.check("use default", "USING default");

    assert_eq!(c.peek_id("peek-buried"), b2, "the head of the buried FIFO");
    c.check("kick 0", "KICKED 0");
    c.check("kick 1", "KICKED 1");
    assert_eq!(job_state(&mut c, b2), "ready");
    assert_eq!(c.peek_id("peek-buried"), b3);
    c.check("kick 10", "KICKED 2");
    for id in [b3, b1] {
        assert_eq!(job_state(&mut c, id), "ready");
    }
    // No buried jobs left here: now the delayed ones, soonest first.
    assert_eq!(c.peek_id("peek-delayed"), d2);
    c.check("kick 1", "KICKED 1");
    assert_eq!(job_state(&mut c, d2), "ready");
    assert_eq!(job_state(&mut c, d1), "delayed");
    c.check("kick 4294967295", "KICKED 1");
    assert_eq!(job_state(&mut c, d1), "ready");
    c.check("kick 5", "KICKED 0");
    assert_eq!(job_state(&mut c, elsewhere), "buried");
}

#[test]
fn kick_does_not_touch_delayed_jobs_while_buried_ones_exist() {
    let (s, _dir) = serve();
    let mut c = s.client();
    let delayed = c.put(1, 1000, 60, b"d");
    let buried = c.put(1, 0, 60, b"b");
    assert_eq!(c.reserve().0, buried);
    c.check(&format!("bury {buried} 1"), "BURIED");
    c.check("kick 100", "KICKED 1");
    assert_eq!(job_state(&mut c, delayed), "delayed");
    c.check("kick 100", "KICKED 1");
    assert_eq!(job_state(&mut c, delayed), "ready");
}

#[test]
fn peek_commands_look_at_the_used_tube() {
    let (s, _dir) = serve();
    let mut c = s.client();
    c.check("use t", "USING t");
    let low = c.put(10, 0, 60, b"low");
    let high = c.put(2, 0, 60, b"high");
    let d_late = c.put(0, 900, 60, b"late");
    let d_soon = c.put(0, 300, 60, b"soon");
    assert_eq!(c.peek("peek-ready"), Some((high, b"high".to_vec())));
    assert_eq!(c.peek("peek-delayed"), Some((d_soon, b"soon".to_vec())));
    assert_eq!(c.peek("peek-buried"), None);
    c.check("watch t", "WATCHING 2");
    assert_eq!(c.reserve().0, high);
    assert_eq!(c.peek_id("peek-ready"), low, "a reserved job is not ready");
    c.check(&format!("bury {high} 0"), "BURIED");
    assert_eq!(c.peek("peek-buried"), Some((high, b"high".to_vec())));
    // Peek by id works from a connection using another tube, in any state.
    let mut d = s.client();
    assert_eq!(d.peek("peek-ready"), None);
    for id in [low, high, d_late, d_soon] {
        assert_eq!(d.peek(&format!("peek {id}")).map(|j| j.0), Some(id));
    }
}

#[test]
fn pause_tube_holds_jobs_back_and_unpausing_serves_waiters() {
    let (s, _dir) = serve();
    let mut c = s.client();
    c.check("pause-tube nosuch 10", "NOT_FOUND");
    c.check("stats-tube nosuch", "NOT_FOUND"); // pause-tube does not create tubes
    let id = c.put(1, 0, 60, b"x");
    c.check("pause-tube default 1000", "PAUSED");
    let st = c.yaml("stats-tube default");
    assert_eq!(st["pause"], "1000");
    let left: u64 = st["pause-time-left"].parse().unwrap();
    assert!((900..=1000).contains(&left), "pause-time-left {left}");
    assert_eq!(st["cmd-pause-tube"], "1");
    // Nothing is handed out, but peek still sees the job.
    c.check("reserve-with-timeout 0", "TIMED_OUT");
    assert_eq!(c.peek_id("peek-ready"), id);
    // A waiting worker is served as soon as the tube is unpaused.
    let mut w = s.client();
    w.cmd("reserve");
    w.expect_silence(Duration::from_millis(300));
    c.check("pause-tube default 0", "PAUSED");
    assert_eq!(w.read_job("RESERVED").0, id);
    let st = c.yaml("stats-tube default");
    assert_eq!(st["pause"], "0");
    assert_eq!(st["pause-time-left"], "0");
    assert_eq!(st["cmd-pause-tube"], "2");
}

#[test]
fn a_pause_ends_by_itself() {
    let (s, _dir) = serve();
    let mut c = s.client();
    let id = c.put(1, 0, 60, b"x");
    c.check("pause-tube default 1", "PAUSED");
    // Blocks until the pause is over, then gets the job.
    c.cmd("reserve");
    assert_eq!(c.read_job("RESERVED").0, id);
    let st = c.yaml("stats-tube default");
    assert_eq!(st["pause"], "0");
    assert_eq!(st["pause-time-left"], "0");
}

#[test]
fn a_reserve_watching_a_paused_and_an_active_tube_gets_jobs_from_the_active_one() {
    let (s, _dir) = serve();
    let mut c = s.client();
    c.check("use p", "USING p");
    c.put(0, 0, 60, b"paused");
    c.check("use a", "USING a");
    let active = c.put(100, 0, 60, b"active");
    c.check("pause-tube p 1000", "PAUSED");
    c.check("watch p", "WATCHING 2");
    c.check("watch a", "WATCHING 3");
    assert_eq!(c.reserve().0, active);
    c.check("reserve-with-timeout 0", "TIMED_OUT");
}

#[test]
fn quit_closes_the_connection_and_returns_its_jobs() {
    let (s, _dir) = serve();
    let mut a = s.client();
    let id = a.put(1, 0, 60, b"x");
    assert_eq!(a.reserve().0, id);
    a.cmd("quit");
    a.expect_closed();
    let mut b = s.client();
    assert_eq!(b.reserve_with("reserve-with-timeout 10").0, id);
    let st = b.yaml(&format!("stats-job {id}"));
    assert_eq!(st["reserves"], "2");
    assert_eq!(st["releases"], "0");
    assert_eq!(st["timeouts"], "0");
    // `quitx` is read as quit, as in beanstalkd.
    let mut q = s.client();
    q.cmd("quitx");
    q.expect_closed();
    // Replies to commands before quit in the same write are still sent.
    let mut r = s.client();
    r.send("list-tube-used\r\nquit\r\nlist-tube-used\r\n");
    r.expect("USING default");
    r.expect_closed();
}

#[test]
fn stats_tube_and_list_tubes() {
    let (s, _dir) = serve();
    let mut c = s.client();
    assert_eq!(c.list("list-tubes"), ["default"]);
    c.check("use one", "USING one");
    c.check("watch two", "WATCHING 2");
    assert_eq!(c.list("list-tubes"), ["default", "one", "two"]);
    let st = c.yaml("stats-tube one");
    assert_eq!(st["name"], "one");
    assert_eq!(st["current-using"], "1");
    assert_eq!(st["current-watching"], "0");
    let st = c.yaml("stats-tube two");
    assert_eq!(st["current-using"], "0");
    assert_eq!(st["current-watching"], "1");
    c.check("stats-tube three", "NOT_FOUND");
    assert_eq!(c.list("list-tubes"), ["default", "one", "two"]);
}
