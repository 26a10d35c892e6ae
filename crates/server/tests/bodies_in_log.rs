//! Bodies in the log (the default): durable bodies are kept only in the log, but for the
//! newest (`--hot-body-bytes`), and read back when a job is handed out. Black-box: the real
//! binary, real files, kill -9, compaction, a damaged file.

mod common;

use std::fs::OpenOptions;
use std::path::Path;
use std::time::{Duration, Instant};

use common::Server;

/// Every body read back from the log: no hot budget.
const ON: &[&str] = &[
    "--bodies-in-log",
    "--hot-body-bytes",
    "0",
    "--fsync",
    "never",
];

fn body(i: usize) -> Vec<u8> {
    format!("job {i} ").repeat(1 + i % 40).into_bytes()
}

fn segments(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut segs: Vec<_> = std::fs::read_dir(dir)
        .expect("data dir")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "log"))
        .collect();
    segs.sort();
    segs
}

#[test]
fn bodies_come_back_exactly_after_kill_9_and_restart() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::serve(dir.path(), ON);
    let mut c = s.client();
    let ids: Vec<u64> = (0..200).map(|i| c.put(0, 0, 60, &body(i))).collect();
    // Served from the log once the writer has reported where the bodies are.
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(c.peek(&format!("peek {}", ids[7])), Some((ids[7], body(7))));
    s.kill();

    let s = Server::serve(dir.path(), ON);
    let mut c = s.client();
    assert_eq!(c.peek(&format!("peek {}", ids[3])), Some((ids[3], body(3))));
    for (i, &id) in ids.iter().enumerate() {
        assert_eq!(c.reserve(), (id, body(i)), "job {i}");
        c.check(&format!("delete {id}"), "DELETED");
    }
}

#[test]
fn bodies_moved_by_compaction_are_read_from_the_snapshot() {
    let dir = tempfile::tempdir().unwrap();
    let mut args = ON.to_vec();
    args.extend(["--segment-bytes", "65536", "--compact-min-bytes", "65536"]);
    let s = Server::serve(dir.path(), &args);
    let mut c = s.client();
    let ids: Vec<u64> = (0..3000).map(|i| c.put(0, 0, 60, &body(i))).collect();
    // Most jobs end, so the log is well past 1.5 x the live data and gets compacted.
    for &id in ids.iter().filter(|&&id| id % 10 != 0) {
        c.check(&format!("delete {id}"), "DELETED");
    }
    let deadline = Instant::now() + Duration::from_secs(20);
    while !s.log().contains("older log files removed") {
        assert!(Instant::now() < deadline, "no compaction: {}", s.log());
        std::thread::sleep(Duration::from_millis(50));
    }
    // The segments the bodies were first written to are gone.
    assert!(!dir.path().join("seg-0000000001.log").exists());
    for (i, &id) in ids.iter().enumerate().filter(|(_, &id)| id % 10 == 0) {
        assert_eq!(
            c.peek(&format!("peek {id}")),
            Some((id, body(i))),
            "job {id}"
        );
    }
    s.kill();
    // And after a restart, from the snapshot recovery read.
    let s = Server::serve(dir.path(), ON);
    let mut c = s.client();
    for (i, &id) in ids.iter().enumerate().filter(|(_, &id)| id % 10 == 0) {
        assert_eq!(c.reserve(), (id, body(i)), "job {id}");
    }
}

#[test]
fn a_body_that_cannot_be_read_is_an_error_not_a_wrong_body() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::serve(dir.path(), ON);
    let mut c = s.client();
    let id = c.put(0, 0, 60, b"soon unreadable");
    std::thread::sleep(Duration::from_millis(100));
    // Damage from outside: the file is cut under the running server.
    cut_newest_segment(dir.path());
    c.check(&format!("peek {id}"), "INTERNAL_ERROR");
    c.check("reserve-with-timeout 0", "INTERNAL_ERROR");
    // The server goes on serving.
    let other = c.put(0, 0, 60, b"fine");
    assert!(other > id);
    assert!(s.log().contains("cannot read job"), "{}", s.log());
}

/// Cuts the newest segment under the running server, as damage from outside would.
fn cut_newest_segment(dir: &Path) {
    let seg = segments(dir).pop().expect("a segment");
    OpenOptions::new()
        .write(true)
        .open(&seg)
        .expect("open segment")
        .set_len(16)
        .expect("cut segment");
}

#[test]
fn by_default_only_the_last_written_bodies_stay_in_memory() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::serve(dir.path(), &["--fsync", "never"]);
    let mut c = s.client();
    let body = |i: usize| format!("{i:>100}").into_bytes();
    let ids: Vec<u64> = (0..200).map(|i| c.put(0, 0, 60, &body(i))).collect();
    // The writer reports where the bodies are; the next command's turn of the engine
    // takes the places (and drops what is past the budget).
    std::thread::sleep(Duration::from_millis(100));
    cut_newest_segment(dir.path());
    // An older body was dropped from memory: only the log had it.
    c.check(&format!("peek {}", ids[0]), "INTERNAL_ERROR");
    // The last one written is still in memory (until a newer write).
    assert_eq!(
        c.peek(&format!("peek {}", ids[199])),
        Some((ids[199], body(199)))
    );
}

#[test]
fn bodies_in_log_false_keeps_every_body_in_memory() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::serve(dir.path(), &["--fsync", "never", "--bodies-in-log=false"]);
    let mut c = s.client();
    let ids: Vec<u64> = (0..200).map(|i| c.put(0, 0, 60, &body(i))).collect();
    std::thread::sleep(Duration::from_millis(100));
    cut_newest_segment(dir.path());
    for (i, &id) in ids.iter().enumerate() {
        assert_eq!(c.reserve(), (id, body(i)), "job {i}");
    }
}

#[test]
fn a_backlog_drained_in_order_reads_back_exactly_also_after_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::serve(dir.path(), ON);
    let mut c = s.client();
    let ids: Vec<u64> = (0..3000).map(|i| c.put(0, 0, 60, &body(i))).collect();
    std::thread::sleep(Duration::from_millis(100));
    // The first half is read a window at a time, as a drain does.
    for (i, &id) in ids.iter().enumerate().take(1500) {
        assert_eq!(c.reserve(), (id, body(i)), "job {i}");
        c.check(&format!("delete {id}"), "DELETED");
    }
    drop(c);
    drop(s);
    let s = Server::serve(dir.path(), &["--fsync", "never"]);
    let mut c = s.client();
    for (i, &id) in ids.iter().enumerate().skip(1500) {
        assert_eq!(c.reserve(), (id, body(i)), "job {i} after the restart");
        c.check(&format!("delete {id}"), "DELETED");
    }
}
