//! Every Gearman packet type against the real binary, with raw packets.

mod gearman_common;

use gearman_common::{packet, t, GServer};

fn id_of(handle: &str) -> u64 {
    handle.rsplit(':').next().unwrap().parse().unwrap()
}

#[test]
fn foreground_job_round_trip_forwards_every_work_packet_in_order() {
    let s = GServer::start(&[]);
    let mut w = s.gear();
    let mut c = s.gear();
    w.can_do("rev");
    let h = c.submit(t::SUBMIT_JOB, "rev", "", b"hello");
    assert!(h.starts_with("H:"), "{h}");
    let a = w.grab().expect("job");
    assert_eq!(a, vec![h.clone(), "rev".into(), "hello".into()]);
    w.send(t::WORK_DATA, &[h.as_bytes(), b"d\0ata"]);
    w.send(t::WORK_WARNING, &[h.as_bytes(), b"warn"]);
    w.send(t::WORK_STATUS, &[h.as_bytes(), b"1", b"4"]);
    w.send(t::WORK_COMPLETE, &[h.as_bytes(), b"olleh"]);
    w.barrier();
    let p = c.recv();
    assert_eq!(
        (p.kind, p.body.clone()),
        (t::WORK_DATA, [h.as_bytes(), b"\0d\0ata"].concat())
    );
    assert_eq!(c.expect(t::WORK_WARNING), vec![h.clone(), "warn".into()]);
    assert_eq!(
        c.expect(t::WORK_STATUS),
        vec![h.clone(), "1".into(), "4".into()]
    );
    assert_eq!(c.expect(t::WORK_COMPLETE), vec![h.clone(), "olleh".into()]);
    // The job is gone: reporting again is refused, status is unknown.
    w.send(t::WORK_COMPLETE, &[h.as_bytes(), b"again"]);
    assert_eq!(
        w.expect_error("JOB_NOT_FOUND"),
        "Job given in work result not found"
    );
    c.send(t::GET_STATUS, &[h.as_bytes()]);
    assert_eq!(
        c.expect(t::STATUS_RES),
        vec![h, "0".into(), "0".into(), "0".into(), "0".into()]
    );
}

#[test]
fn work_fail_and_exception_reach_clients_by_their_exceptions_option() {
    let s = GServer::start(&[]);
    let mut w = s.gear();
    let mut plain = s.gear();
    let mut exc = s.gear();
    exc.send(t::OPTION_REQ, &[b"EXCEPTIONS"]);
    assert_eq!(
        exc.expect(t::OPTION_RES),
        vec!["EXCEPTIONS"],
        "echoes the text as sent"
    );
    plain.send(t::OPTION_REQ, &[b"bogus"]);
    assert_eq!(
        plain.expect_error("UNKNOWN_OPTION"),
        "Server does not recognize given option"
    );
    w.can_do("f");
    let h = plain.submit(t::SUBMIT_JOB, "f", "same", b"x");
    assert_eq!(
        exc.submit(t::SUBMIT_JOB, "f", "same", b"ignored"),
        h,
        "coalesced"
    );
    w.grab().unwrap();
    w.send(t::WORK_EXCEPTION, &[h.as_bytes(), b"boom"]);
    w.barrier();
    let p = plain.recv();
    assert_eq!(
        (p.kind, p.body),
        (t::WORK_FAIL, h.as_bytes().to_vec()),
        "no trailing NUL"
    );
    assert_eq!(
        exc.expect(t::WORK_EXCEPTION),
        vec![h.clone(), "boom".into()]
    );
    w.send(t::WORK_EXCEPTION, &[h.as_bytes(), b"late"]);
    assert_eq!(
        w.expect_error("JOB_NOT_FOUND"),
        "An exception was received for a job that does not exist"
    );
    // WORK_FAIL.
    let h = plain.submit(t::SUBMIT_JOB, "f", "", b"y");
    w.grab().unwrap();
    w.send(t::WORK_FAIL, &[h.as_bytes()]);
    w.barrier();
    assert_eq!(plain.expect(t::WORK_FAIL), vec![h]);
}

#[test]
fn background_jobs_all_priorities_and_grab_order() {
    let s = GServer::start(&[]);
    let mut c = s.gear();
    let low = c.submit(t::SUBMIT_JOB_LOW_BG, "p", "", b"low");
    let normal = c.submit(t::SUBMIT_JOB_BG, "p", "", b"normal");
    let high = c.submit(t::SUBMIT_JOB_HIGH_BG, "p", "", b"high");
    let fg_low = c.submit(t::SUBMIT_JOB_LOW, "q", "", b"l");
    let fg_high = c.submit(t::SUBMIT_JOB_HIGH, "q", "", b"h");
    let mut w = s.gear();
    w.can_do("p");
    let order: Vec<String> = (0..3).map(|_| w.grab().unwrap()[0].clone()).collect();
    assert_eq!(order, vec![high, normal, low]);
    assert_eq!(w.grab(), None);
    // Abilities are walked newest CAN_DO first; priority is per function.
    w.can_do("q");
    assert_eq!(w.grab().unwrap()[0], fg_high);
    assert_eq!(w.grab().unwrap()[0], fg_low);
    // Background jobs forward nothing, but WORK_STATUS is stored.
    let bg = c.submit(t::SUBMIT_JOB_BG, "p", "", b"z");
    assert_eq!(w.grab().unwrap()[0], bg);
    w.send(t::WORK_STATUS, &[bg.as_bytes(), b"3", b"7"]);
    w.barrier();
    c.send(t::GET_STATUS, &[bg.as_bytes()]);
    assert_eq!(
        c.expect(t::STATUS_RES),
        vec![bg.clone(), "1".into(), "1".into(), "3".into(), "7".into()]
    );
    w.send(t::WORK_COMPLETE, &[bg.as_bytes(), b""]);
    c.barrier();
}

#[test]
fn newest_ability_first_even_over_higher_priority() {
    let s = GServer::start(&[]);
    let mut c = s.gear();
    let a_high = c.submit(t::SUBMIT_JOB_HIGH_BG, "a", "", b"");
    let b_low = c.submit(t::SUBMIT_JOB_LOW_BG, "b", "", b"");
    let mut w = s.gear();
    w.can_do("a");
    w.can_do("b");
    assert_eq!(w.grab().unwrap()[0], b_low);
    assert_eq!(w.grab().unwrap()[0], a_high);
}

#[test]
fn grab_uniq_and_grab_all_with_reduce_jobs() {
    let s = GServer::start(&[]);
    let mut c = s.gear();
    let mut w = s.gear();
    w.can_do("m");
    let h = c.submit(t::SUBMIT_JOB_BG, "m", "u-1", b"data");
    w.send(t::GRAB_JOB_UNIQ, &[]);
    assert_eq!(
        w.expect(t::JOB_ASSIGN_UNIQ),
        vec![h, "m".into(), "u-1".into(), "data".into()]
    );
    c.send(
        t::SUBMIT_REDUCE_JOB_BACKGROUND,
        &[b"m", b"u-2", b"red", b"agg", b"rd"],
    );
    let h2 = c.expect(t::JOB_CREATED).remove(0);
    w.send(t::GRAB_JOB_ALL, &[]);
    assert_eq!(
        w.expect(t::JOB_ASSIGN_ALL),
        vec![h2, "m".into(), "u-2".into(), "red".into(), "rd".into()]
    );
    // GRAB_JOB_ALL on a job without a reducer answers JOB_ASSIGN_UNIQ (as gearmand).
    let h3 = c.submit(t::SUBMIT_JOB_BG, "m", "", b"plain");
    w.send(t::GRAB_JOB_ALL, &[]);
    assert_eq!(
        w.expect(t::JOB_ASSIGN_UNIQ),
        vec![h3, "m".into(), "".into(), "plain".into()]
    );
    w.send(t::GRAB_JOB_UNIQ, &[]);
    w.expect(t::NO_JOB);
    // Foreground reduce job: the submitter gets the result.
    c.send(t::SUBMIT_REDUCE_JOB, &[b"m", b"", b"r", b"", b"fg"]);
    let h4 = c.expect(t::JOB_CREATED).remove(0);
    assert_eq!(w.grab().unwrap()[0], h4);
    w.send(t::WORK_COMPLETE, &[h4.as_bytes(), b"done"]);
    w.barrier();
    assert_eq!(c.expect(t::WORK_COMPLETE), vec![h4, "done".into()]);
}

#[test]
fn coalescing_follows_gearmands_rules() {
    let s = GServer::start(&[]);
    let mut c1 = s.gear();
    let mut c2 = s.gear();
    let h = c1.submit(t::SUBMIT_JOB, "f", "key", b"first");
    assert_eq!(c2.submit(t::SUBMIT_JOB_HIGH, "f", "key", b"second"), h);
    assert_eq!(
        c2.submit(t::SUBMIT_JOB_BG, "f", "key", b"third"),
        h,
        "bg just gets the handle"
    );
    assert_ne!(
        c2.submit(t::SUBMIT_JOB, "g", "key", b"x"),
        h,
        "other function, other job"
    );
    let e1 = c1.submit(t::SUBMIT_JOB, "f", "", b"same");
    assert_ne!(
        c1.submit(t::SUBMIT_JOB, "f", "", b"same"),
        e1,
        "empty unique never coalesces"
    );
    let d = c1.submit(t::SUBMIT_JOB_BG, "f", "-", b"payload");
    assert_eq!(
        c2.submit(t::SUBMIT_JOB_BG, "f", "-", b"payload"),
        d,
        "'-' keys on the payload"
    );
    assert_ne!(c2.submit(t::SUBMIT_JOB_BG, "f", "-", b"other"), d);
    let mut w = s.gear();
    w.can_do("f");
    let a = w.grab().unwrap();
    assert_eq!(
        a,
        vec![h.clone(), "f".into(), "first".into()],
        "first submitter's data"
    );
    // Running jobs still coalesce; every waiting client gets every packet.
    let mut c3 = s.gear();
    assert_eq!(c3.submit(t::SUBMIT_JOB, "f", "key", b""), h);
    c3.send(t::GET_STATUS_UNIQUE, &[b"key"]);
    assert_eq!(
        c3.expect(t::STATUS_RES_UNIQUE),
        vec!["key", "1", "1", "0", "0", "3"]
    );
    w.send(t::WORK_COMPLETE, &[h.as_bytes(), b"r"]);
    w.barrier();
    for c in [&mut c1, &mut c2, &mut c3] {
        assert_eq!(c.expect(t::WORK_COMPLETE), vec![h.clone(), "r".into()]);
    }
    // The key is free again.
    assert_ne!(c1.submit(t::SUBMIT_JOB_BG, "f", "key", b""), h);
    // Unique limits: 64 bytes fine (and intact), 65 refused.
    let u64b = "u".repeat(64);
    let hu = c1.submit(t::SUBMIT_JOB_BG, "long", &u64b, b"");
    let mut w2 = s.gear();
    w2.can_do("long");
    w2.send(t::GRAB_JOB_UNIQ, &[]);
    assert_eq!(
        w2.expect(t::JOB_ASSIGN_UNIQ),
        vec![hu, "long".into(), u64b, "".into()]
    );
    c1.send(t::SUBMIT_JOB, &[b"long", "u".repeat(65).as_bytes(), b""]);
    assert_eq!(
        c1.expect_error("ARGUMENT_TOO_LARGE"),
        "Unique value too large"
    );
}

#[test]
fn status_and_status_unique_report_known_running_and_progress() {
    let s = GServer::start(&[]);
    let mut c = s.gear();
    let h = c.submit(t::SUBMIT_JOB_BG, "st", "uq", b"");
    c.send(t::GET_STATUS, &[h.as_bytes()]);
    assert_eq!(
        c.expect(t::STATUS_RES),
        vec![h.clone(), "1".into(), "0".into(), "0".into(), "0".into()]
    );
    c.send(t::GET_STATUS_UNIQUE, &[b"uq"]);
    assert_eq!(
        c.expect(t::STATUS_RES_UNIQUE),
        vec!["uq", "1", "0", "0", "0", "0"]
    );
    c.send(t::GET_STATUS, &[b"H:nosuch:1"]);
    assert_eq!(
        c.expect(t::STATUS_RES),
        vec!["H:nosuch:1", "0", "0", "0", "0"]
    );
    let long = "H".repeat(100);
    c.send(t::GET_STATUS, &[long.as_bytes()]);
    assert_eq!(
        c.expect(t::STATUS_RES)[1],
        "0",
        "over-long handle: unknown, not silence"
    );
    c.send(t::GET_STATUS_UNIQUE, &[long.as_bytes()]);
    assert_eq!(c.expect(t::STATUS_RES_UNIQUE)[1], "0");
}

#[test]
fn pre_sleep_gets_one_noop_per_sleep_and_grab_clears_it() {
    let s = GServer::start(&[]);
    let mut w = s.gear();
    let mut c = s.gear();
    w.can_do("sl");
    w.send(t::PRE_SLEEP, &[]);
    w.barrier(); // no NOOP: nothing queued
    c.submit(t::SUBMIT_JOB_BG, "sl", "", b"1");
    c.submit(t::SUBMIT_JOB_BG, "sl", "", b"2");
    c.submit(t::SUBMIT_JOB_BG, "other", "", b"x");
    w.expect(t::NOOP);
    w.barrier(); // only one NOOP per sleep
    assert!(w.grab().is_some());
    // A job is queued right now: PRE_SLEEP answers NOOP at once.
    w.send(t::PRE_SLEEP, &[]);
    w.expect(t::NOOP);
    // A worker that never sent PRE_SLEEP is not woken.
    let mut poller = s.gear();
    poller.can_do("sl");
    c.submit(t::SUBMIT_JOB_BG, "sl", "", b"3");
    poller.barrier();
}

#[test]
fn epoch_jobs_wait_for_their_time_and_then_wake_sleepers() {
    let s = GServer::start(&[]);
    let mut w = s.gear();
    let mut c = s.gear();
    w.can_do("ep");
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let when = (now + 2).to_string();
    c.send(
        t::SUBMIT_JOB_EPOCH,
        &[b"ep", b"", when.as_bytes(), b"later"],
    );
    let h = c.expect(t::JOB_CREATED).remove(0);
    assert_eq!(w.grab(), None, "not before its time");
    let status = c.admin_list("status");
    assert!(status.contains(&"ep\t1\t0\t1".to_string()), "{status:?}");
    w.send(t::PRE_SLEEP, &[]);
    // gearmand never sends this NOOP (issue #101); jobyard wakes the sleeper when due.
    w.expect(t::NOOP);
    assert_eq!(w.grab().unwrap(), vec![h, "ep".into(), "later".into()]);
    // Garbage epoch = now (as strtoll gives 0).
    c.send(t::SUBMIT_JOB_EPOCH, &[b"ep", b"", b"garbage", b"now"]);
    c.expect(t::JOB_CREATED);
    assert_eq!(w.grab().unwrap()[2], "now");
}

#[test]
fn only_the_holder_may_report_and_cant_do_reset_and_disconnect_requeue() {
    let s = GServer::start(&[]);
    let mut c = s.gear();
    let mut w1 = s.gear();
    let mut w2 = s.gear();
    w1.can_do("r");
    w2.can_do("r");
    let h = c.submit(t::SUBMIT_JOB, "r", "", b"job");
    assert_eq!(w1.grab().unwrap()[0], h);
    for (kind, text) in [
        (t::WORK_STATUS, "Job given in work result not found"),
        (t::WORK_DATA, "Job does not exist on server"),
        (t::WORK_WARNING, "Job does not exist on server"),
        (t::WORK_COMPLETE, "Job given in work result not found"),
    ] {
        let fields: Vec<&[u8]> = if kind == t::WORK_STATUS {
            vec![h.as_bytes(), b"1", b"2"]
        } else {
            vec![h.as_bytes(), b"x"]
        };
        w2.send(kind, &fields);
        assert_eq!(w2.expect_error("JOB_NOT_FOUND"), text);
        c.send(kind, &fields);
        assert_eq!(c.expect_error("JOB_NOT_FOUND"), text);
    }
    w2.send(t::WORK_FAIL, &["H".repeat(64).as_bytes()]);
    w2.expect_error("ARGUMENT_TOO_LARGE");
    // CANT_DO requeues the held job.
    w1.send(t::CANT_DO, &[b"r"]);
    w1.barrier();
    assert_eq!(w2.grab().unwrap()[0], h);
    // RESET_ABILITIES requeues too.
    w2.send(t::RESET_ABILITIES, &[]);
    w2.barrier();
    assert_eq!(w2.grab(), None, "no abilities left");
    w1.can_do("r");
    assert_eq!(w1.grab().unwrap()[0], h);
    // A worker that disconnects gives its job back; clients are told nothing.
    drop(w1);
    let mut w3 = s.gear();
    w3.can_do("r");
    let got = loop {
        // The disconnect is processed asynchronously: poll with GRAB (no timing assumed).
        if let Some(a) = w3.grab() {
            break a;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    };
    assert_eq!(got[0], h);
    w3.send(t::WORK_COMPLETE, &[h.as_bytes(), b"ok"]);
    w3.barrier();
    assert_eq!(c.expect(t::WORK_COMPLETE), vec![h, "ok".into()]);
}

#[test]
fn job_retries_fail_a_job_for_good_and_tell_the_client() {
    let s = GServer::start(&["--gearman-job-retries", "2"]);
    let mut c = s.gear();
    let h = c.submit(t::SUBMIT_JOB, "jr", "", b"");
    for round in 0..2 {
        let mut w = s.gear();
        w.can_do("jr");
        assert_eq!(w.grab().expect("handed out")[0], h, "round {round}");
        w.send(t::RESET_ABILITIES, &[]);
        w.barrier();
    }
    assert_eq!(c.expect(t::WORK_FAIL), vec![h.clone()]);
    let mut w = s.gear();
    w.can_do("jr");
    assert_eq!(w.grab(), None);
}

#[test]
fn can_do_timeout_requeues_and_a_finished_job_is_not_touched_by_its_timer() {
    let s = GServer::start(&[]);
    let mut c = s.gear();
    let mut w = s.gear();
    w.send(t::CAN_DO_TIMEOUT, &[b"to", b"1"]);
    // gearmand bug: the timer outlives a job finished in time and later corrupts counters
    // (and can hang). Finish one job quickly, then check the second runs normally.
    let h1 = c.submit(t::SUBMIT_JOB, "to", "", b"quick");
    assert_eq!(w.grab().unwrap()[0], h1);
    w.send(t::WORK_COMPLETE, &[h1.as_bytes(), b"ok"]);
    w.barrier();
    c.expect(t::WORK_COMPLETE);
    let h2 = c.submit(t::SUBMIT_JOB, "to", "", b"slow");
    assert_eq!(w.grab().unwrap()[0], h2);
    // Not reporting: after the timeout (>= 1 s) the job is requeued for another worker.
    let mut w2 = s.gear();
    w2.can_do("to");
    w2.send(t::PRE_SLEEP, &[]);
    w2.expect(t::NOOP);
    assert_eq!(w2.grab().unwrap()[0], h2);
    w.send(t::WORK_COMPLETE, &[h2.as_bytes(), b"late"]);
    w.expect_error("JOB_NOT_FOUND");
    w2.send(t::WORK_COMPLETE, &[h2.as_bytes(), b"ok2"]);
    w2.barrier();
    assert_eq!(c.expect(t::WORK_COMPLETE), vec![h2, "ok2".into()]);
    let status = c.admin_list("status");
    assert!(status.contains(&"to\t0\t0\t2".to_string()), "{status:?}");
}

#[test]
fn a_foreground_job_dies_with_its_last_client() {
    let s = GServer::start(&[]);
    let mut c = s.gear();
    let h = c.submit(t::SUBMIT_JOB, "gone", "", b"");
    let mut bg = s.gear();
    let hb = bg.submit(t::SUBMIT_JOB_BG, "gone", "bgu", b"");
    let mut c2 = s.gear();
    assert_eq!(c2.submit(t::SUBMIT_JOB, "gone", "bgu", b""), hb);
    drop(c);
    drop(c2);
    // Disconnects are processed asynchronously: wait until the server shows the effect.
    let mut admin = s.gear();
    let deadline = std::time::Instant::now() + gearman_common::START_TIMEOUT;
    while admin
        .admin_list("show jobs")
        .iter()
        .any(|l| l.starts_with(&format!("{h}\t")))
    {
        assert!(
            std::time::Instant::now() < deadline,
            "abandoned job never discarded"
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    // The background job survives its attached client (a deliberate difference from
    // gearmand, which discards it too; see docs/gearman.md).
    let mut w = s.gear();
    w.can_do("gone");
    assert_eq!(w.grab().unwrap()[0], hb);
    assert_eq!(w.grab(), None);
}

#[test]
fn echo_client_id_and_not_expected_types() {
    let s = GServer::start(&[]);
    let mut c = s.gear();
    let big = vec![0xAB; 1 << 20];
    c.send(t::ECHO_REQ, &[&big]);
    let p = c.recv();
    assert_eq!((p.kind, p.body.len()), (t::ECHO_RES, big.len()));
    c.send(t::SET_CLIENT_ID, &[b"worker-7"]);
    c.can_do("x");
    let workers = c.admin_list("workers");
    assert!(
        workers.iter().any(|l| l.ends_with(" worker-7 : x")),
        "{workers:?}"
    );
    for kind in [
        t::UNUSED,
        t::NOOP,
        t::JOB_CREATED,
        t::NO_JOB,
        t::JOB_ASSIGN,
        t::ECHO_RES,
        t::ERROR,
        t::STATUS_RES,
        t::ALL_YOURS,
        t::OPTION_RES,
        t::JOB_ASSIGN_UNIQ,
        t::SUBMIT_JOB_SCHED,
        t::JOB_ASSIGN_ALL,
        t::STATUS_RES_UNIQUE,
    ] {
        let fields: Vec<&[u8]> = if kind == t::SUBMIT_JOB_SCHED {
            vec![b"f", b"", b"0", b"0", b"1", b"1", b"0", b"d"]
        } else {
            vec![]
        };
        c.send(kind, &fields);
        assert_eq!(
            c.expect_error("INVALID_COMMAND"),
            "Command not expected",
            "type {kind}"
        );
    }
    c.raw(&packet(b"\0RES", t::NOOP, &[]));
    assert_eq!(c.expect_error("INVALID_MAGIC"), "Request magic expected");
    c.barrier();
}

#[test]
fn maxqueue_is_enforced_on_submit() {
    let s = GServer::start(&[]);
    let mut c = s.gear();
    c.admin("create function mq");
    assert_eq!(c.admin("maxqueue mq 1 2 3"), "OK\r");
    c.submit(t::SUBMIT_JOB_HIGH_BG, "mq", "", b"");
    c.submit(t::SUBMIT_JOB_BG, "mq", "u", b"");
    c.submit(t::SUBMIT_JOB_LOW_BG, "mq", "", b"");
    for kind in [t::SUBMIT_JOB_HIGH_BG, t::SUBMIT_JOB, t::SUBMIT_JOB_LOW] {
        c.send(kind, &[b"mq", b"", b""]);
        assert_eq!(c.expect_error("QUEUE_ERROR"), "Job queue is full");
    }
    c.send(t::SUBMIT_JOB_BG, &[b"mq", b"u", b""]);
    c.expect(t::JOB_CREATED); // coalesced submits are never rejected
    assert_eq!(c.admin("maxqueue mq"), "OK\r");
    c.submit(t::SUBMIT_JOB_BG, "mq", "", b"");
}

#[test]
fn bad_input_gets_the_documented_reply_and_others_keep_being_served() {
    let s = GServer::start(&["--gearman-max-packet", "1000"]);
    let mut bystander = s.gear();
    bystander.can_do("keep");
    // Too few fields: ERROR, connection usable.
    let mut g = s.gear();
    g.raw(&packet(b"\0REQ", t::SUBMIT_JOB, &[b"only-function"]));
    g.expect_error("INVALID_PACKET");
    g.raw(&packet(b"\0REQ", t::WORK_COMPLETE, &[b"H:x:1"]));
    g.expect_error("INVALID_PACKET");
    // A zero-field packet with a body: the body is consumed (not parsed as a text line).
    g.raw(&packet(b"\0REQ", t::GRAB_JOB, &[b"abc"]));
    g.expect(t::NO_JOB);
    g.barrier();
    // Oversize: ERROR then close.
    let mut g = s.gear();
    let mut hdr = b"\0REQ".to_vec();
    hdr.extend_from_slice(&t::ECHO_REQ.to_be_bytes());
    hdr.extend_from_slice(&1001u32.to_be_bytes());
    g.raw(&hdr);
    g.expect_error("ARGUMENT_TOO_LARGE");
    assert!(g.is_closed());
    let mut g = s.gear();
    g.raw(&packet(b"\0REQ", t::ECHO_REQ, &[&[1u8; 1000]]));
    assert_eq!(g.recv().body.len(), 1000, "exactly the maximum is accepted");
    // Bad magic, unknown types (including >= 2^31, which crashes gearmand): closed.
    for bytes in [
        packet(b"\0XYZ", 1, &[]),
        packet(b"\0REQ", 0, &[]),
        packet(b"\0REQ", 43, &[]),
        packet(b"\0REQ", 0x8000_0000, &[]),
        packet(b"\0REQ", 0xFFFF_FFFF, &[b"x"]),
    ] {
        let mut g = s.gear();
        g.barrier();
        g.raw(&bytes);
        assert!(g.is_closed(), "{bytes:?}");
    }
    // Earlier replies in the same read are still delivered before the close.
    let mut g = s.gear();
    let mut both = packet(b"\0REQ", t::ECHO_REQ, &[b"first"]);
    both.extend(packet(b"\0REQ", 99, &[]));
    g.raw(&both);
    assert_eq!(g.recv().body, b"first");
    assert!(g.is_closed());
    // A text line over 8191 bytes: closed.
    let mut g = s.gear();
    g.raw(&vec![b'a'; 9000]);
    assert!(g.is_closed());
    // Everyone else is still served.
    bystander.barrier();
    let mut c = s.gear();
    c.submit(t::SUBMIT_JOB_BG, "keep", "", b"");
    assert!(bystander.grab().is_some());
}

#[test]
fn text_and_binary_mix_on_one_connection() {
    let s = GServer::start(&[]);
    let mut g = s.gear();
    let mut bytes = b"version\r\n".to_vec();
    bytes.extend(packet(b"\0REQ", t::ECHO_REQ, &[b"e"]));
    bytes.extend(b"getpid\n");
    g.raw(&bytes);
    assert!(g.line().starts_with("OK 1.1.20"));
    assert_eq!(g.recv().body, b"e");
    assert!(g.line().starts_with("OK "));
}

#[test]
fn handles_name_engine_ids() {
    let s = GServer::start(&[]);
    let mut c = s.gear();
    let a = c.submit(t::SUBMIT_JOB_BG, "h", "", b"");
    let b = c.submit(t::SUBMIT_JOB_BG, "h", "", b"");
    assert_eq!(id_of(&b), id_of(&a) + 1);
}
