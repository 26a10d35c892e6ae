//! Every Gearman admin text command against the real binary, with gearmand's formats.

mod gearman_common;

use gearman_common::{t, GServer};

#[test]
fn status_prioritystatus_and_workers() {
    let s = GServer::start(&[]);
    let mut w = s.gear();
    w.can_do("fa");
    w.can_do("fb");
    w.can_do("fb");
    let mut c = s.gear();
    c.submit(t::SUBMIT_JOB_HIGH_BG, "fa", "", b"");
    c.submit(t::SUBMIT_JOB_BG, "fa", "", b"");
    c.submit(t::SUBMIT_JOB_LOW_BG, "fa", "", b"");
    w.send(t::CANT_DO, &[b"fb"]);
    w.barrier();
    w.can_do("fb");
    w.can_do("fb");
    // fb (newest) has no jobs, so the grab takes fa's HIGH job: one running.
    assert!(w.grab().is_some());
    let status = c.admin_list("STATUS");
    assert_eq!(status, vec!["fa\t3\t1\t1", "fb\t0\t0\t2"]);
    let prio = c.admin_list("prioritystatus");
    assert_eq!(prio, vec!["fa\t0\t1\t1\t1", "fb\t0\t0\t0\t2"]);
    c.send(t::SET_CLIENT_ID, &[b"me"]);
    let workers = c.admin_list("workers");
    assert_eq!(workers.len(), 2, "{workers:?}");
    assert!(
        workers
            .iter()
            .any(|l| l.ends_with(" 127.0.0.1 - : fb fb fa")),
        "{workers:?}"
    );
    assert!(
        workers.iter().any(|l| l.ends_with(" 127.0.0.1 me :")),
        "{workers:?}"
    );
}

#[test]
fn show_jobs_and_show_unique_jobs() {
    let s = GServer::start(&[]);
    let mut c = s.gear();
    let bg = c.submit(t::SUBMIT_JOB_BG, "sj", "u1", b"");
    let fg = c.submit(t::SUBMIT_JOB, "sj", "", b"");
    assert_eq!(
        c.admin_list("show jobs"),
        vec![format!("{bg}\t0\t0\t1"), format!("{fg}\t0\t0\t0")]
    );
    assert_eq!(c.admin_list("Show Unique Jobs"), vec!["u1", ""]);
    assert_eq!(
        c.admin("show"),
        "ERR UNKNOWN_COMMAND Unknown+server+commandshow\r"
    );
    assert_eq!(c.admin("show things"), "ERR UNKNOWN_SHOW_ARGUMENTS\r");
}

#[test]
fn cancel_job_fails_waiting_clients_and_frees_the_unique() {
    let s = GServer::start(&[]);
    let mut c = s.gear();
    let mut admin = s.gear();
    let h = c.submit(t::SUBMIT_JOB, "cj", "key", b"");
    assert_eq!(admin.admin(&format!("cancel job {h}")), "OK\r");
    assert_eq!(c.expect(t::WORK_FAIL), vec![h.clone()]);
    assert_eq!(admin.admin(&format!("cancel job {h}")), "ERR UNKNOWN_JOB\r");
    // gearmand keeps the cancelled job's unique until it is dequeued (submits then hang);
    // jobyard frees it at once.
    assert_ne!(c.submit(t::SUBMIT_JOB, "cj", "key", b""), h);
    assert_eq!(
        admin.admin("cancel job"),
        "ERR UNKNOWN_COMMAND Unknown+server+commandcancel\r"
    );
    assert_eq!(admin.admin("cancel job a b"), "ERR UNKNOWN_ERROR\r");
    // Cancelling a running job: its worker's later result is refused.
    let mut w = s.gear();
    w.can_do("cj");
    let h2 = w.grab().unwrap()[0].clone();
    assert_eq!(admin.admin(&format!("cancel job {h2}")), "OK\r");
    assert_eq!(c.expect(t::WORK_FAIL), vec![h2.clone()]);
    w.send(t::WORK_COMPLETE, &[h2.as_bytes(), b"late"]);
    w.expect_error("JOB_NOT_FOUND");
    c.barrier(); // and the client got nothing more
}

#[test]
fn create_and_drop_function() {
    let s = GServer::start(&[]);
    let mut a = s.gear();
    assert_eq!(a.admin("create function NewFn"), "OK\r");
    assert_eq!(a.admin("create function NewFn"), "OK\r");
    assert_eq!(a.admin_list("status"), vec!["NewFn\t0\t0\t0"]);
    assert!(a.admin("create function").ends_with("command+create\r"));
    assert!(a.admin("drop function").ends_with("command+drop\r"));
    assert_eq!(a.admin("drop function nope"), "ERR function not found\r");
    let mut w = s.gear();
    w.can_do("NewFn");
    w.barrier();
    assert_eq!(
        a.admin("drop function newfn"),
        "ERR there are still connected workers or executing clients\r"
    );
    w.send(t::RESET_ABILITIES, &[]);
    w.barrier();
    a.submit(t::SUBMIT_JOB_BG, "NewFn", "", b"");
    // gearmand orphans queued jobs here; jobyard refuses.
    assert_eq!(
        a.admin("drop function NewFn"),
        "ERR there are still queued jobs\r"
    );
    w.can_do("NewFn");
    let h = w.grab().unwrap()[0].clone();
    w.send(t::WORK_COMPLETE, &[h.as_bytes(), b""]);
    w.send(t::RESET_ABILITIES, &[]);
    w.barrier();
    assert_eq!(a.admin("drop function NEWFN"), "OK\r");
    assert_eq!(a.admin_list("status"), Vec::<String>::new());
}

#[test]
fn maxqueue_version_getpid_verbose_and_unknown() {
    let s = GServer::start(&[]);
    let mut a = s.gear();
    assert_eq!(
        a.admin("maxqueue"),
        "ERR INVALID_ARGUMENTS An+incomplete+set+of+arguments+was+sent+to+this+command+maxqueue\r"
    );
    assert_eq!(a.admin("maxqueue unknown 5"), "OK\r");
    assert_eq!(
        a.admin_list("status"),
        Vec::<String>::new(),
        "unknown function not created"
    );
    // One token, as tools parse it; jobyard's own version has a command of its own.
    assert_eq!(a.admin("version").trim_end(), "OK 1.1.20");
    assert_eq!(
        a.admin("jobyard-version").trim_end(),
        format!("OK {}", env!("CARGO_PKG_VERSION"))
    );
    let pid = a.admin("getpid");
    assert!(
        pid.strip_prefix("OK ").unwrap().parse::<u32>().is_ok(),
        "{pid}"
    );
    assert!(!pid.ends_with('\r'), "getpid ends with a bare LF");
    assert_eq!(a.admin("verbose"), "OK INFO");
    assert_eq!(
        a.admin("frobnicate"),
        "ERR UNKNOWN_COMMAND Unknown+server+commandfrobnicate\r"
    );
    assert_eq!(a.admin(""), "ERR UNKNOWN_COMMAND Unknown+server+command\r");
}

#[test]
fn shutdown_is_unknown_unless_allowed() {
    let s = GServer::start(&[]);
    let mut a = s.gear();
    assert_eq!(
        a.admin("shutdown"),
        "ERR UNKNOWN_COMMAND Unknown+server+commandshutdown\r"
    );
    a.barrier();

    let mut s = GServer::start(&["--gearman-allow-shutdown"]);
    let mut c = s.gear();
    let h = c.submit(t::SUBMIT_JOB_BG, "keep", "", b"durable");
    let mut a = s.gear();
    assert!(a.admin("shutdown bogus").ends_with("command+shutdown\r"));
    assert_eq!(a.admin("shutdown graceful"), "OK\r");
    assert_eq!(s.wait_exit(), Some(0));
    // Background jobs survive an admin shutdown.
    let mut s2 = GServer::on(s.data.clone(), &[]);
    let mut w = s2.gear();
    w.can_do("keep");
    assert_eq!(w.grab().unwrap(), vec![h, "keep".into(), "durable".into()]);
    s2.kill();
}
