//! The server process as a whole: signals, persistence across restarts and crashes, the
//! beanstalkd-compatible command line, the data-directory lock, damaged logs and the
//! connection limit. Every test starts the real binary.

mod common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use common::{eventually, free_port, run_to_exit, wait_stat, Client, Server, REPLY_TIMEOUT};

fn path_str(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}

/// A connection that the server really serves (not one refused by the connection limit
/// while an earlier connection is still being torn down).
fn served_client(s: &Server) -> Client {
    let mut found = None;
    let ok = eventually(REPLY_TIMEOUT, || {
        let mut c = s.client();
        c.timeout = Duration::from_secs(5);
        if c.try_send("list-tube-used\r\n").is_err() {
            return false;
        }
        if c.try_line().as_deref() == Some("USING default") {
            c.timeout = common::REPLY_TIMEOUT;
            found = Some(c);
            true
        } else {
            false
        }
    });
    assert!(ok, "no connection was served");
    found.unwrap()
}

#[test]
fn sigterm_exits_0_and_everything_acknowledged_survives_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::serve(dir.path(), &[]);
    let mut c = s.client();
    c.check("use t1", "USING t1");
    let body: Vec<u8> = (0..=255u8).chain(b"\r\n\0end".iter().copied()).collect();
    let ready = c.put(5, 0, 60, &body);
    let delayed = c.put(6, 100, 60, b"delayed");
    let buried_second = c.put(7, 0, 60, b"buried second");
    let buried_first = c.put(7, 0, 60, b"buried first");
    let reserved = c.put(8, 0, 100, b"reserved");
    let released = c.put(500, 0, 60, b"released");
    c.check("use default", "USING default");
    let in_default = c.put(1, 0, 60, b"default tube");
    let deleted = c.put(1, 0, 60, b"deleted");
    for id in [buried_first, buried_second] {
        assert_eq!(c.reserve_with(&format!("reserve-job {id}")).0, id);
        c.check(&format!("bury {id} 9"), "BURIED");
    }
    assert_eq!(
        c.reserve_with(&format!("reserve-job {released}")).0,
        released
    );
    c.check(&format!("release {released} 3 0"), "RELEASED");
    c.check(&format!("delete {deleted}"), "DELETED");
    // Still held when the server stops.
    assert_eq!(
        c.reserve_with(&format!("reserve-job {reserved}")).0,
        reserved
    );

    let log = s.stop();
    assert!(!log.contains("did not finish"), "{log}");
    drop(c);

    let s = Server::serve(dir.path(), &[]);
    let mut c = s.client();
    let st = c.yaml(&format!("stats-job {ready}"));
    assert_eq!((st["state"].as_str(), st["pri"].as_str()), ("ready", "5"));
    assert_eq!(st["tube"], "t1");
    assert_eq!(c.peek(&format!("peek {ready}")), Some((ready, body)));
    let st = c.yaml(&format!("stats-job {delayed}"));
    assert_eq!(st["state"], "delayed");
    let left: u64 = st["time-left"].parse().unwrap();
    assert!(
        left > 0 && left <= 100,
        "a delayed job keeps its remaining delay: {left}"
    );
    for id in [buried_first, buried_second] {
        let st = c.yaml(&format!("stats-job {id}"));
        assert_eq!((st["state"].as_str(), st["pri"].as_str()), ("buried", "9"));
    }
    let st = c.yaml(&format!("stats-job {reserved}"));
    assert_eq!(st["state"], "ready", "a reserved job comes back ready");
    let st = c.yaml(&format!("stats-job {released}"));
    assert_eq!(st["state"], "ready");
    assert_eq!(st["pri"], "3", "the priority given by a release survives");
    assert_eq!(c.peek(&format!("peek {deleted}")), None);
    assert_eq!(
        c.peek(&format!("peek {in_default}")).map(|j| j.0),
        Some(in_default)
    );
    assert_eq!(c.list("list-tubes"), ["default", "t1"]);
    // Buried jobs come back in burial order.
    c.check("use t1", "USING t1");
    assert_eq!(c.peek_id("peek-buried"), buried_first);
    c.check("kick 1", "KICKED 1");
    assert_eq!(c.peek_id("peek-buried"), buried_second);
    // Ids continue above every id ever handed out, even a deleted one.
    assert_eq!(c.put(0, 0, 60, b"new"), deleted + 1);
    assert_eq!(c.stat("total-jobs"), "1", "recovered jobs are not counted");
    s.stop();
}

#[test]
fn sigint_also_shuts_down_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = Server::serve(dir.path(), &[]);
    let mut c = s.client();
    let id = c.put(0, 0, 60, b"x");
    s.signal("INT");
    assert_eq!(s.wait().code(), Some(0));
    let s = Server::serve(dir.path(), &[]);
    assert_eq!(
        s.client().peek(&format!("peek {id}")).map(|j| j.0),
        Some(id)
    );
}

#[test]
fn a_crash_loses_nothing_that_was_acknowledged() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::serve(dir.path(), &[]);
    let mut c = s.client();
    let kept = c.put(1, 0, 60, b"kept");
    let gone = c.put(1, 0, 60, b"gone");
    let buried = c.put(1, 0, 60, b"buried");
    let delayed = c.put(1, 0, 60, b"delayed");
    let held = c.put(1, 0, 60, b"held");
    c.check(&format!("delete {gone}"), "DELETED");
    assert_eq!(c.reserve_with(&format!("reserve-job {buried}")).0, buried);
    c.check(&format!("bury {buried} 2"), "BURIED");
    assert_eq!(c.reserve_with(&format!("reserve-job {delayed}")).0, delayed);
    c.check(&format!("release {delayed} 4 1000"), "RELEASED");
    assert_eq!(c.reserve_with(&format!("reserve-job {held}")).0, held);
    s.kill();

    let s = Server::serve(dir.path(), &[]);
    let mut c = s.client();
    assert_eq!(c.job_stat(kept, "state"), "ready");
    assert_eq!(c.peek(&format!("peek {gone}")), None);
    assert_eq!(c.job_stat(buried, "state"), "buried");
    let st = c.yaml(&format!("stats-job {delayed}"));
    assert_eq!((st["state"].as_str(), st["pri"].as_str()), ("delayed", "4"));
    assert_eq!(c.job_stat(held, "state"), "ready");
    assert_eq!(c.put(0, 0, 60, b"next"), held + 1);
}

#[test]
fn sigterm_with_a_worker_blocked_in_reserve_exits_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::serve(dir.path(), &[]);
    let mut idle = s.client();
    idle.put(0, 0, 60, b"x");
    let mut worker = s.client();
    worker.reserve();
    worker.cmd("reserve");
    wait_stat(&mut idle, "current-waiting", "1");
    let log = s.stop();
    assert!(
        !log.contains("did not finish"),
        "a blocked reserve held up the shutdown: {log}"
    );
    assert!(worker.closed_within(REPLY_TIMEOUT));
    assert!(idle.closed_within(REPLY_TIMEOUT));
}

#[test]
fn new_connections_are_refused_after_sigterm() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = Server::serve(dir.path(), &[]);
    let addr = s.addr;
    s.signal("TERM");
    assert_eq!(s.wait().code(), Some(0));
    assert!(std::net::TcpStream::connect(addr).is_err());
}

#[test]
fn beanstalkd_without_b_keeps_jobs_in_memory_only() {
    let s = Server::beanstalkd(None, &[]);
    let mut c = s.client();
    let st = c.yaml("stats");
    assert_eq!(st["binlog-current-index"], "0");
    assert_eq!(st["binlog-oldest-index"], "0");
    assert_eq!(c.put(0, 0, 60, b"x"), 1);
    s.stop();
    let s = Server::beanstalkd(None, &[]);
    let mut c = s.client();
    assert_eq!(c.peek("peek 1"), None);
    assert_eq!(c.put(0, 0, 60, b"y"), 1, "ids start over without a log");
}

#[test]
fn beanstalkd_with_b_persists() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::beanstalkd(Some(dir.path()), &[]);
    let mut c = s.client();
    c.check("use persisted", "USING persisted");
    let a = c.put(3, 0, 60, b"a");
    let b = c.put(4, 100, 60, b"b");
    s.stop();
    let s = Server::beanstalkd(Some(dir.path()), &["-f0"]);
    let mut c = s.client();
    assert_eq!(c.peek(&format!("peek {a}")), Some((a, b"a".to_vec())));
    assert_eq!(c.job_stat(a, "tube"), "persisted");
    assert_eq!(c.job_stat(b, "state"), "delayed");
    assert_eq!(c.put(0, 0, 60, b"c"), b + 1);
}

#[test]
fn beanstalkd_v_and_h_exit_0_and_unknown_flags_exit_5() {
    let (status, out, _) = run_to_exit(&["beanstalkd", "-v"]);
    assert_eq!(status.code(), Some(0));
    assert!(out.starts_with("beanstalkd 1.12"), "{out:?}");
    let (status, out, _) = run_to_exit(&["beanstalkd", "-h"]);
    assert_eq!(status.code(), Some(0));
    assert!(out.contains("-b DIR") && out.contains("-p PORT"), "{out:?}");
    for args in [
        &["beanstalkd", "-x"][..],
        &["beanstalkd", "-p"],
        &["beanstalkd", "--frobnicate"],
        &["beanstalkd", "stray"],
    ] {
        let (status, _, err) = run_to_exit(args);
        assert_eq!(status.code(), Some(5), "{args:?}: {err}");
        assert!(
            err.contains("Use: beanstalkd"),
            "{args:?} prints the usage: {err:?}"
        );
    }
}

#[test]
fn a_second_server_on_the_same_data_directory_exits_with_10() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::serve(dir.path(), &[]);
    let mut c = s.client();
    let id = c.put(0, 0, 60, b"x");
    let listen = format!("127.0.0.1:{}", free_port());
    let (status, _, err) = run_to_exit(&[
        "serve",
        "--data-dir",
        path_str(dir.path()),
        "--beanstalk-listen",
        &listen,
    ]);
    assert_eq!(status.code(), Some(10), "{err}");
    assert!(
        err.contains(path_str(dir.path())),
        "names the directory: {err}"
    );
    let port = free_port().to_string();
    let (status, _, err) = run_to_exit(&[
        "beanstalkd",
        "-l",
        "127.0.0.1",
        "-p",
        &port,
        "-b",
        path_str(dir.path()),
    ]);
    assert_eq!(status.code(), Some(10), "{err}");
    // The first server is unharmed.
    assert_eq!(c.peek(&format!("peek {id}")).map(|j| j.0), Some(id));
    assert_eq!(c.put(0, 0, 60, b"y"), id + 1);
}

/// The segment files of a data directory, sorted.
fn segments(dir: &Path) -> Vec<PathBuf> {
    let mut segs: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            let name = p.file_name().unwrap().to_string_lossy();
            name.starts_with("seg-") && name.ends_with(".log")
        })
        .collect();
    segs.sort();
    segs
}

/// The offsets of the records in a segment: a 16-byte header, then frames of a u32 LE
/// payload length, a u32 CRC and the payload.
fn record_offsets(data: &[u8]) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let mut at = 16;
    while at + 8 <= data.len() {
        let len = u32::from_le_bytes(data[at..at + 4].try_into().unwrap()) as usize;
        if len == 0 || at + 8 + len > data.len() {
            break;
        }
        out.push((at, 8 + len));
        at += 8 + len;
    }
    out
}

/// A data directory holding three ready jobs (ids 1..=3); returns the segment that holds
/// them and its record offsets.
fn three_jobs(dir: &Path) -> (PathBuf, Vec<(usize, usize)>) {
    let s = Server::serve(dir, &[]);
    let mut c = s.client();
    for body in ["first job", "second job", "third job"] {
        c.put(0, 0, 60, body.as_bytes());
    }
    s.stop();
    // The newest segment has the records. (An older, empty one is left behind if the
    // harness had to retry the start on another port.)
    let seg = segments(dir).pop().expect("a segment");
    let data = std::fs::read(&seg).unwrap();
    let records = record_offsets(&data);
    assert_eq!(records.len(), 3, "three put records in {seg:?}");
    (seg, records)
}

#[test]
fn a_corrupt_record_stops_startup_naming_file_and_offset_and_salvage_starts() {
    let dir = tempfile::tempdir().unwrap();
    let (seg, records) = three_jobs(dir.path());
    let mut data = std::fs::read(&seg).unwrap();
    let (at, len) = records[1];
    data[at + len - 1] ^= 0xff; // last byte of the second job's body
    std::fs::write(&seg, &data).unwrap();

    let listen = format!("127.0.0.1:{}", free_port());
    let args = [
        "serve",
        "--data-dir",
        path_str(dir.path()),
        "--beanstalk-listen",
        &listen,
    ];
    let (status, _, err) = run_to_exit(&args);
    assert_ne!(status.code(), Some(0), "{err}");
    let name = seg.file_name().unwrap().to_string_lossy().into_owned();
    assert!(err.contains(&name), "names the file {name}: {err}");
    assert!(
        err.contains(&format!("offset {at}")),
        "names the offset {at}: {err}"
    );
    // Still refuses on a second try: nothing was changed by the failed start.
    let (status, _, _) = run_to_exit(&args);
    assert_ne!(status.code(), Some(0));

    let s = Server::serve(dir.path(), &["--salvage"]);
    let mut c = s.client();
    assert_eq!(c.peek("peek 1"), Some((1, b"first job".to_vec())));
    assert_eq!(c.peek("peek 2"), None);
    assert_eq!(c.peek("peek 3"), Some((3, b"third job".to_vec())));
    assert_eq!(c.put(0, 0, 60, b"fourth"), 4);
    assert!(s.log().contains(&name), "salvage reports what it skipped");
}

#[test]
fn a_record_cut_off_at_the_end_of_the_log_is_dropped_at_startup() {
    let dir = tempfile::tempdir().unwrap();
    let (seg, records) = three_jobs(dir.path());
    let (at, len) = records[2];
    let file = std::fs::OpenOptions::new().write(true).open(&seg).unwrap();
    file.set_len((at + len - 3) as u64).unwrap();
    drop(file);
    let s = Server::serve(dir.path(), &[]);
    let mut c = s.client();
    assert_eq!(c.peek("peek 1").map(|j| j.0), Some(1));
    assert_eq!(c.peek("peek 2").map(|j| j.0), Some(2));
    assert_eq!(c.peek("peek 3"), None);
}

#[test]
fn max_connections_refuses_the_extra_connection_and_keeps_serving_the_others() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::serve(dir.path(), &["--max-connections", "2"]);
    let mut a = served_client(&s);
    let mut b = served_client(&s);
    let id = a.put(0, 0, 60, b"x");
    // Both slots are taken: a third connection is closed without a reply.
    let mut refused = s.client();
    let _ = refused.try_send("list-tube-used\r\n");
    refused.expect_closed();
    // The others keep working.
    assert_eq!(b.reserve().0, id);
    b.check(&format!("delete {id}"), "DELETED");
    a.check("list-tube-used", "USING default");
    // Once one goes away, a new connection is served again.
    drop(a);
    let mut c = served_client(&s);
    c.check("list-tubes-watched", "OK 14");
    c.read_body(14);
    b.check("list-tube-used", "USING default");
}

#[test]
fn sigusr1_enters_drain_mode_puts_get_draining_and_everything_else_works() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::serve(dir.path(), &[]);
    let mut c = s.client();
    let before = c.put(0, 0, 60, b"before");
    assert_eq!(c.stat("draining"), "false");
    s.signal("USR1");
    // The signal is handled asynchronously: puts are accepted until it is.
    let mut last = String::new();
    let draining = eventually(REPLY_TIMEOUT, || {
        c.send_put(0, 0, 60, b"probe");
        last = c.read_line();
        last == "DRAINING"
    });
    assert!(draining, "last reply {last}");
    let st = c.yaml("stats");
    let total_jobs = st["total-jobs"].clone();
    assert_eq!(st["draining"], "true");
    let cmd_put: u64 = st["cmd-put"].parse().unwrap();
    // The body is read before the refusal, so the next command is read normally.
    c.send("put 0 0 60 4\r\nquit\r\nlist-tube-used\r\n");
    c.expect("DRAINING");
    c.expect("USING default");
    // Framing errors still come first.
    c.send("put 0 0 60 1\r\nxYY");
    c.expect("EXPECTED_CRLF");
    c.send(format!("put 0 0 60 70000\r\n{}\r\n", "z".repeat(70000)));
    c.expect("JOB_TOO_BIG");
    assert_eq!(c.stat_n("cmd-put"), cmd_put + 3, "refused puts are counted");
    // Everything but put keeps working, on new connections too.
    let mut w = s.client();
    w.send_put(0, 0, 60, b"new");
    w.expect("DRAINING");
    assert_eq!(w.reserve().0, before);
    w.check(&format!("release {before} 0 0"), "RELEASED");
    assert_eq!(w.reserve().0, before);
    w.check(&format!("delete {before}"), "DELETED");
    assert_eq!(
        w.stat("total-jobs"),
        total_jobs,
        "no put got in while draining"
    );
    // Drain mode is left only by a restart.
    s.stop();
    let s = Server::serve(dir.path(), &[]);
    let mut c = s.client();
    assert_eq!(c.stat("draining"), "false");
    c.put(0, 0, 60, b"after restart");
}

#[test]
fn compaction_keeps_live_jobs_their_states_and_the_id_sequence() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::serve(dir.path(), &["--compact-min-bytes", "1"]);
    let mut c = s.client();
    let ids: Vec<u64> = (0..60)
        .map(|i| c.put(10, 0, 60, format!("job {i}").as_bytes()))
        .collect();
    let (ready, buried_a, buried_b, delayed, held) = (ids[0], ids[1], ids[2], ids[3], ids[4]);
    for &id in &ids[5..] {
        c.check(&format!("delete {id}"), "DELETED");
    }
    for id in [buried_b, buried_a] {
        assert_eq!(c.reserve_with(&format!("reserve-job {id}")).0, id);
        c.check(&format!("bury {id} 1"), "BURIED");
    }
    assert_eq!(c.reserve_with(&format!("reserve-job {delayed}")).0, delayed);
    c.check(&format!("release {delayed} 2 1000"), "RELEASED");
    assert_eq!(c.reserve_with(&format!("reserve-job {held}")).0, held);
    // The log is now mostly dead records: a snapshot replaces it.
    let snapshot = eventually(Duration::from_secs(30), || {
        std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .any(|name| name.starts_with("snap-") && name.ends_with(".snap"))
    });
    assert!(
        snapshot,
        "no snapshot was written; files: {:?}",
        segments(dir.path())
    );
    s.kill();

    let s = Server::serve(dir.path(), &[]);
    let mut c = s.client();
    assert_eq!(c.job_stat(ready, "state"), "ready");
    assert_eq!(
        c.peek(&format!("peek {ready}")),
        Some((ready, b"job 0".to_vec()))
    );
    assert_eq!(c.peek_id("peek-buried"), buried_b, "burial order is kept");
    let st = c.yaml(&format!("stats-job {delayed}"));
    assert_eq!((st["state"].as_str(), st["pri"].as_str()), ("delayed", "2"));
    assert_eq!(c.job_stat(held, "state"), "ready");
    for &id in &ids[5..] {
        assert_eq!(c.peek(&format!("peek {id}")), None, "job {id} was deleted");
    }
    assert_eq!(c.stat("current-jobs-ready"), "2");
    // The highest id was deleted; it is still never handed out again.
    assert_eq!(c.put(0, 0, 60, b"next"), ids[59] + 1);
}

#[test]
fn beanstalkd_flags_may_be_glued_and_grouped() {
    let s = Server::start(|port| {
        vec![
            "beanstalkd".into(),
            "-l127.0.0.1".into(),
            format!("-p{port}"),
            "-z100".into(),
            "-VV".into(),
            "-F".into(),
        ]
    });
    let mut c = s.client();
    assert_eq!(c.stat("max-job-size"), "100");
}

#[test]
fn the_binary_invoked_as_beanstalkd_takes_beanstalkds_command_line() {
    let dir = tempfile::tempdir().unwrap();
    let link = dir.path().join("beanstalkd");
    std::os::unix::fs::symlink(common::bin(), &link).unwrap();
    let out = common::command_for(&link).arg("-v").output().unwrap();
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("beanstalkd 1.12"));
    let data = tempfile::tempdir().unwrap();
    let data_dir = path_str(data.path()).to_string();
    let s = Server::start_program(&link, move |port| {
        vec![
            "-b".into(),
            data_dir.clone(),
            "-l".into(),
            "127.0.0.1".into(),
            "-p".into(),
            port.to_string(),
        ]
    });
    let mut c = s.client();
    assert_eq!(c.put(0, 0, 60, b"x"), 1);
    assert!(
        std::fs::read_dir(data.path()).unwrap().count() > 0,
        "-b writes the log there"
    );
}

#[test]
fn list_tubes_starts_with_default_after_a_restart() {
    // beanstalkd creates `default` before it replays its log, and list-tubes is in creation
    // order. The log here starts with a job in another tube, and the only job of `default`
    // is deleted, so replaying it must neither create `default` late nor drop it.
    let dir = tempfile::tempdir().unwrap();
    let s = Server::serve(dir.path(), &[]);
    let mut c = s.client();
    c.check("use zz", "USING zz");
    c.put(0, 0, 60, b"z");
    c.check("use default", "USING default");
    let id = c.put(0, 0, 60, b"d");
    c.check(&format!("delete {id}"), "DELETED");
    assert_eq!(c.list("list-tubes"), ["default", "zz"]);
    s.stop();
    let s = Server::serve(dir.path(), &[]);
    assert_eq!(s.client().list("list-tubes"), ["default", "zz"]);
}
