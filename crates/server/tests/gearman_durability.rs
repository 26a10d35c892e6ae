//! Gearman durability across kill -9, and jobs crossing between Gearman and beanstalkd.

mod gearman_common;

use gearman_common::{t, GServer};

#[test]
fn acknowledged_background_jobs_survive_kill_9_and_foreground_ones_do_not() {
    let mut s = GServer::start(&["--fsync", "always"]);
    let mut c = s.gear();
    let handles: Vec<String> = (0..5)
        .map(|i| {
            c.submit(
                t::SUBMIT_JOB_BG,
                "dur",
                &format!("u{i}"),
                format!("job{i}").as_bytes(),
            )
        })
        .collect();
    let hi = c.submit(t::SUBMIT_JOB_HIGH_BG, "dur", "", b"high");
    c.send(t::SUBMIT_JOB_EPOCH, &[b"dur", b"", b"1", b"epoch"]);
    let he = c.expect(t::JOB_CREATED).remove(0);
    let _fg = c.submit(t::SUBMIT_JOB, "dur", "", b"foreground");
    s.kill_and_restart();
    let mut w = s.gear();
    w.can_do("dur");
    let mut got = Vec::new();
    while let Some(a) = w.grab() {
        w.send(t::WORK_COMPLETE, &[a[0].as_bytes(), b""]);
        got.push((a[0].clone(), a[2].clone()));
    }
    assert_eq!(got[0], (hi, "high".into()), "priority survives");
    for (i, h) in handles.iter().enumerate() {
        assert!(
            got.contains(&(h.clone(), format!("job{i}"))),
            "{h} lost: {got:?}"
        );
    }
    assert!(got.contains(&(he, "epoch".into())));
    assert_eq!(got.len(), 7, "the foreground job is not persisted: {got:?}");
    // Uniques survive too (coalescing works on replayed jobs), and completions are durable.
    let mut c = s.gear();
    let again = c.submit(t::SUBMIT_JOB_BG, "dur", "u0", b"");
    assert!(
        !handles.contains(&again),
        "u0 was completed, so its key is free"
    );
    s.kill_and_restart();
    let mut w = s.gear();
    w.can_do("dur");
    assert_eq!(w.grab().unwrap()[0], again);
    assert_eq!(w.grab(), None, "completed jobs stay completed");
}

#[test]
fn a_job_put_through_beanstalkd_is_done_by_a_gearman_worker() {
    let s = GServer::start(&[]);
    let mut b = s.beanstalk();
    assert_eq!(b.cmd("use cross"), "USING cross");
    b.send(b"put 100 0 60 5\r\nhello\r\n");
    let id: u64 = b.line().strip_prefix("INSERTED ").unwrap().parse().unwrap();
    let mut w = s.gear();
    w.can_do("cross");
    let a = w.grab().unwrap();
    assert!(
        a[0].ends_with(&format!(":{id}")),
        "handle names the beanstalkd id: {a:?}"
    );
    assert_eq!(&a[1..], ["cross", "hello"]);
    let hdr = b.cmd(&format!("stats-job {id}"));
    let n: usize = hdr
        .strip_prefix("OK ")
        .expect("still there")
        .parse()
        .unwrap();
    assert!(String::from_utf8(b.body(n))
        .unwrap()
        .contains("state: reserved"));
    w.send(t::WORK_COMPLETE, &[a[0].as_bytes(), b"done"]);
    w.barrier();
    assert_eq!(
        b.cmd(&format!("stats-job {id}")),
        "NOT_FOUND",
        "completion deletes it"
    );
}

#[test]
fn a_background_gearman_job_is_reserved_by_a_beanstalkd_consumer() {
    let s = GServer::start(&[]);
    let mut c = s.gear();
    let h = c.submit(t::SUBMIT_JOB_HIGH_BG, "tube", "", b"payload");
    let mut b = s.beanstalk();
    assert_eq!(b.cmd("watch tube"), "WATCHING 2");
    assert_eq!(b.cmd("ignore default"), "WATCHING 1");
    let reply = b.cmd("reserve-with-timeout 0");
    let id = h.rsplit(':').next().unwrap();
    assert_eq!(reply, format!("RESERVED {id} 7"));
    assert_eq!(b.body(7), b"payload");
    let stats = {
        b.send(format!("stats-job {id}\r\n").as_bytes());
        let hdr = b.line();
        let n: usize = hdr.strip_prefix("OK ").unwrap().parse().unwrap();
        String::from_utf8(b.body(n)).unwrap()
    };
    assert!(
        stats.contains("pri: 0\n"),
        "HIGH maps to priority 0: {stats}"
    );
    c.send(t::GET_STATUS, &[h.as_bytes()]);
    assert_eq!(c.expect(t::STATUS_RES)[1..3], ["1", "1"], "running");
    assert_eq!(b.cmd(&format!("delete {id}")), "DELETED");
    c.send(t::GET_STATUS, &[h.as_bytes()]);
    assert_eq!(c.expect(t::STATUS_RES)[1], "0", "gone");
}

#[test]
fn a_foreground_client_hears_when_a_beanstalkd_consumer_finishes_its_job() {
    let s = GServer::start(&[]);
    let mut c = s.gear();
    let h = c.submit(t::SUBMIT_JOB, "fg-tube", "", b"work");
    let mut b = s.beanstalk();
    assert_eq!(b.cmd("watch fg-tube"), "WATCHING 2");
    assert_eq!(b.cmd("ignore default"), "WATCHING 1");
    let id = h.rsplit(':').next().unwrap().to_string();
    assert_eq!(b.cmd("reserve-with-timeout 0"), format!("RESERVED {id} 4"));
    assert_eq!(b.body(4), b"work");
    assert_eq!(b.cmd(&format!("delete {id}")), "DELETED");
    // Deleting is how beanstalkd says "done": the waiting client gets WORK_COMPLETE with
    // an empty result (within the registry's once-a-second sweep; REPLY_TIMEOUT is 15 s).
    let f = c.expect(t::WORK_COMPLETE);
    assert_eq!(f[0], h);
    assert_eq!(f.get(1).map(String::as_str).unwrap_or(""), "");
    c.send(t::GET_STATUS, &[h.as_bytes()]);
    assert_eq!(c.expect(t::STATUS_RES)[1], "0", "forgotten");
}
