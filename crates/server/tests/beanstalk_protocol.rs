//! Framing, parsing, limits and error replies of the beanstalkd protocol, against the real
//! binary over TCP.

mod common;

use std::time::Duration;

use common::{serve, Client, Server};

/// Sends every line in one write, then checks the replies in order, then checks that the
/// connection still works.
fn replies(c: &mut Client, cases: &[(&[u8], &str)]) {
    let mut msg = Vec::new();
    for (line, _) in cases {
        msg.extend_from_slice(line);
        msg.extend_from_slice(b"\r\n");
    }
    c.send(msg);
    for (line, want) in cases {
        let got = c.read_line();
        assert_eq!(got, *want, "reply to {:?}", String::from_utf8_lossy(line));
    }
    c.check("list-tube-used", "USING default");
}

#[test]
fn unknown_commands() {
    let (s, _dir) = serve();
    let mut c = s.client();
    let cases: Vec<(&[u8], &str)> = [
        "put",
        "delete",
        "use",
        "watch",
        "ignore",
        "peek",
        "kick",
        "touch",
        "bury",
        "release",
        "kick-job",
        "",
        " ",
        "  stats",
        "PUT 0 0 1 1",
        "Stats",
        "frobnicate",
        "qui",
    ]
    .iter()
    .map(|l| (l.as_bytes(), "UNKNOWN_COMMAND"))
    .collect();
    replies(&mut c, &cases);
}

#[test]
fn bad_format_for_malformed_arguments() {
    let (s, _dir) = serve();
    let mut c = s.client();
    let lines: &[&[u8]] = &[
        b"put ",
        b"delete ",
        b"use ",
        b"watch ",
        b"ignore ",
        b"reservex",
        b"reserve-job",
        b"reserve-with-timeout",
        b"statsx",
        b"stats-job",
        b"stats-tube",
        b"reserve ",
        b"stats ",
        b"list-tubes ",
        b"list-tube-used ",
        b"list-tubes-watched ",
        b"peek-ready ",
        b"peek-delayed ",
        b"peek-buried ",
        b"delete -1",
        b"delete +1",
        b"delete 0x10",
        b"delete 1.0",
        b"delete 1 ",
        b"delete 1x",
        b"delete 18446744073709551616",
        b"peek 1x",
        b"peek abc",
        b"stats-job 1 2",
        b"touch 1 1",
        b"bury 1",
        b"bury 1 4294967296",
        b"release 1 2",
        b"release 1 2 3 4",
        b"release 1 -2 3",
        b"kick ",
        b"kick 1x",
        b"kick -1",
        b"kick 4294967296",
        b"kick-job x",
        b"reserve-with-timeout -1",
        b"reserve-with-timeout abc",
        b"reserve-with-timeout 1x",
        b"reserve-with-timeout 4294967296",
        b"reserve-job -1",
        b"put 0 0 1 x",
        b"put 0 0 1",
        b"put -1 0 1 1",
        b"put 4294967296 0 1 1",
        b"put 0 0 4294967296 1",
        b"put 0 0 1 4294967296",
        b"put 0 0 1 1 x",
        b"pause-tube default",
        b"pause-tube default -1",
        b"pause-tube default 4294967296",
        b"pause-tube default 1 2",
        b"stats\0",
        b"list-tubes\0",
        b"use de\0fault",
    ];
    let cases: Vec<(&[u8], &str)> = lines.iter().map(|l| (*l, "BAD_FORMAT")).collect();
    replies(&mut c, &cases);
    // None of the failed puts consumed a body or created a job.
    assert_eq!(c.stat("total-jobs"), "0");
}

#[test]
fn numbers_allow_leading_spaces_and_zeros_and_the_full_range() {
    let (s, _dir) = serve();
    let mut c = s.client();
    c.send("put  4294967295  0  4294967295  2\r\nhi\r\n");
    c.expect("INSERTED 1");
    let st = c.yaml("stats-job 0001");
    assert_eq!(st["pri"], "4294967295");
    assert_eq!(st["ttr"], "4294967295");
    assert_eq!(c.peek("peek 00000000000000000001").map(|j| j.0), Some(1));
    c.check("delete 18446744073709551615", "NOT_FOUND");
    c.check("kick 4294967295", "KICKED 0");
    c.check("pause-tube default 4294967295", "PAUSED");
    c.check("pause-tube default 0", "PAUSED");
}

#[test]
fn pause_tube_name_may_be_glued_to_the_command_as_in_beanstalkd() {
    let (s, _dir) = serve();
    let mut c = s.client();
    c.check("pause-tubedefault 1000", "PAUSED");
    assert_eq!(c.tube_stat("default", "pause"), "1000");
    c.check("pause-tubedefault 0", "PAUSED");
}

#[test]
fn tube_names_follow_the_charset_and_length_rules() {
    let (s, _dir) = serve();
    let mut c = s.client();
    let charset = "AZaz09-+/;.$_()";
    c.check(&format!("use {charset}"), &format!("USING {charset}"));
    c.check(&format!("watch {charset}"), "WATCHING 2");
    assert_eq!(c.tube_stat(charset, "name"), charset);
    let max = "n".repeat(200);
    c.check(&format!("use {max}"), &format!("USING {max}"));
    c.check(&format!("watch {max}"), "WATCHING 3");
    let over = "n".repeat(201);
    let mut bad: Vec<Vec<u8>> = Vec::new();
    for cmd in ["use", "watch", "ignore", "stats-tube"] {
        bad.push(format!("{cmd} {over}").into_bytes());
        bad.push(format!("{cmd} -leading").into_bytes());
        bad.push(format!("{cmd}  twospaces").into_bytes());
        bad.push(format!("{cmd} trailing ").into_bytes());
        bad.push(format!("{cmd} two words").into_bytes());
    }
    bad.push(format!("pause-tube {over} 1").into_bytes());
    bad.push(b"pause-tube -x 1".to_vec());
    for ch in "!*#,:@%&=?<>[]{}|~^`'\"\\".chars() {
        bad.push(format!("use a{ch}b").into_bytes());
    }
    bad.push("use caf\u{e9}".as_bytes().to_vec());
    bad.push(b"use a\x01b".to_vec());
    bad.push(b"use a\tb".to_vec());
    let cases: Vec<(&[u8], &str)> = bad.iter().map(|l| (l.as_slice(), "BAD_FORMAT")).collect();
    // The connection still uses the 200-byte tube: reset it first so `replies` can check.
    c.check("use default", "USING default");
    replies(&mut c, &cases);
    assert!(!c
        .list("list-tubes")
        .iter()
        .any(|t| t.len() > 200 || t.starts_with('-')));
    // A name may start with any other allowed character.
    for name in ["+x", "/x", ";x", ".x", "$x", "_x", "(x)", "9"] {
        c.check(&format!("use {name}"), &format!("USING {name}"));
    }
}

#[test]
fn the_longest_legal_line_is_224_bytes_and_longer_lines_are_bad_format() {
    let (s, _dir) = serve();
    let mut c = s.client();
    let name = "t".repeat(200);
    c.check(&format!("use {name}"), &format!("USING {name}"));
    let line = format!("pause-tube {name} 4294967295");
    assert_eq!(line.len() + 2, 224);
    c.check(&line, "PAUSED");
    assert_eq!(c.tube_stat(&name, "pause"), "4294967295");
    // The same command one byte longer (225 bytes with CRLF) is too long.
    let line = format!("pause-tube {name} 42949672950");
    assert_eq!(line.len() + 2, 225);
    c.check(&line, "BAD_FORMAT");
    c.check(&format!("pause-tube {name} 0"), "PAUSED");
    c.check("use default", "USING default");
    // Longer lines of every length are discarded up to their CRLF, and the next command
    // on the same connection is answered normally.
    for len in [223usize, 224, 225, 226, 300, 1000, 100_000] {
        let mut msg = vec![b'x'; len];
        msg.extend_from_slice(b"\r\nlist-tube-used\r\n");
        c.send(&msg);
        c.expect("BAD_FORMAT");
        c.expect("USING default");
    }
    // A line of 222 characters plus CRLF (224 bytes) is read as a command.
    let mut msg = vec![b'x'; 222];
    msg.extend_from_slice(b"\r\n");
    c.send(&msg);
    c.expect("UNKNOWN_COMMAND");
    // An overlong line that arrives in pieces, with its CR and LF in separate writes.
    c.send(vec![b'y'; 200]);
    std::thread::sleep(Duration::from_millis(50));
    c.send(vec![b'y'; 200]);
    std::thread::sleep(Duration::from_millis(50));
    c.send(b"yyy\r");
    std::thread::sleep(Duration::from_millis(50));
    c.send(b"\nlist-tube-used\r\n");
    c.expect("BAD_FORMAT");
    c.expect("USING default");
    // BAD_FORMAT lines are not counted as commands.
    assert_eq!(c.stat("cmd-pause-tube"), "2");
}

#[test]
fn stray_carriage_returns_and_bare_line_feeds() {
    let (s, _dir) = serve();
    let mut c = s.client();
    // A CR inside a line does not stall the connection.
    c.send("sta\rts\r\nlist-tube-used\r\n");
    c.expect("UNKNOWN_COMMAND");
    c.expect("USING default");
    c.send("stats\r\r\nlist-tube-used\r\n");
    c.expect("BAD_FORMAT");
    c.expect("USING default");
    c.send("\r\r\r\n");
    c.expect("UNKNOWN_COMMAND");
    // A bare LF does not end a line.
    c.send("list-tube-used\n");
    c.expect_silence(Duration::from_millis(300));
    c.send("\r\n");
    c.expect("BAD_FORMAT");
    c.check("list-tube-used", "USING default");
}

#[test]
fn expected_crlf_drops_the_job_eats_exactly_the_body_and_uses_no_id() {
    let (s, _dir) = serve();
    let mut c = s.client();
    assert_eq!(c.put(0, 0, 10, b"a"), 1);
    // n + 2 bytes are read; the two after the body are not CRLF.
    c.send("put 0 0 10 3\r\nabcXYlist-tube-used\r\n");
    c.expect("EXPECTED_CRLF");
    c.expect("USING default");
    // A body that contains CRLF, followed by the wrong two bytes.
    c.send("put 0 0 10 2\r\n\r\n\n\rlist-tube-used\r\n");
    c.expect("EXPECTED_CRLF");
    c.expect("USING default");
    c.send("put 0 0 10 0\r\nXXlist-tube-used\r\n");
    c.expect("EXPECTED_CRLF");
    c.expect("USING default");
    // No job was created and no id used up.
    assert_eq!(c.put(0, 0, 10, b"b"), 2);
    assert_eq!(c.stat("current-jobs-ready"), "2");
    assert_eq!(c.stat("cmd-put"), "5");
}

fn check_size_limit(s: &Server, max: usize) {
    let mut c = s.client();
    assert_eq!(c.stat("max-job-size"), max.to_string());
    let exact = vec![b'e'; max];
    let id = c.put(0, 0, 10, &exact);
    assert_eq!(c.peek(&format!("peek {id}")), Some((id, exact)));
    // One byte more: the body is read and thrown away, then JOB_TOO_BIG. The body is made
    // of commands that would show up if it were parsed.
    let mut body = b"quit\r\n".repeat(max / 6 + 1);
    body.resize(max + 1, b'\n');
    let mut msg = format!("put 0 0 10 {}\r\n", max + 1).into_bytes();
    msg.extend_from_slice(&body);
    msg.extend_from_slice(b"\r\nlist-tube-used\r\n");
    c.send(&msg);
    c.expect("JOB_TOO_BIG");
    c.expect("USING default");
    // Trailing junk after an oversized count: still JOB_TOO_BIG, still swallowed.
    let mut msg = format!("put 0 0 10 {} junk\r\n", max + 1).into_bytes();
    msg.extend_from_slice(&body);
    msg.extend_from_slice(b"\r\nlist-tube-used\r\n");
    c.send(&msg);
    c.expect("JOB_TOO_BIG");
    c.expect("USING default");
    // A huge declared size is skipped as it arrives, in pieces.
    let huge = max * 3 + 7;
    c.send(format!("put 0 0 10 {huge}\r\n"));
    for chunk in vec![b'q'; huge].chunks(max / 2 + 1) {
        c.send(chunk);
    }
    c.send(b"\r\nlist-tube-used\r\n");
    c.expect("JOB_TOO_BIG");
    c.expect("USING default");
    // No id was used up by the rejected puts.
    assert_eq!(c.put(0, 0, 10, b"next"), id + 1);
    let st = c.yaml("stats");
    assert_eq!(st["current-jobs-ready"], "2");
    assert_eq!(st["cmd-put"], "5", "JOB_TOO_BIG puts are counted");
}

#[test]
fn job_too_big_at_the_default_limit() {
    let (s, _dir) = serve();
    check_size_limit(&s, 65535);
}

#[test]
fn job_too_big_with_max_job_size() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::serve(dir.path(), &["--max-job-size", "10"]);
    check_size_limit(&s, 10);
}

#[test]
fn job_too_big_with_beanstalkd_z_flag() {
    let s = Server::beanstalkd(None, &["-z", "100"]);
    check_size_limit(&s, 100);
}

#[test]
fn a_bad_put_line_does_not_eat_the_body() {
    let (s, _dir) = serve();
    let mut c = s.client();
    // The "body" is read as a command line.
    c.send("put 0 0 1 x\r\nlist-tube-used\r\n");
    c.expect("BAD_FORMAT");
    c.expect("USING default");
    c.send("put 0 0 1 4 junk\r\nlist-tube-used\r\n");
    c.expect("BAD_FORMAT");
    c.expect("USING default");
}

#[test]
fn many_pipelined_commands_in_one_write_are_answered_in_order() {
    let (s, _dir) = serve();
    let mut c = s.client();
    let n = 300;
    let mut msg = Vec::new();
    for i in 0..n {
        let body = format!("job-{i}\r\n");
        msg.extend_from_slice(format!("put {} 0 60 {}\r\n", 1000 - i, body.len()).as_bytes());
        msg.extend_from_slice(body.as_bytes());
        msg.extend_from_slice(b"\r\n");
    }
    for i in 0..n {
        msg.extend_from_slice(format!("peek {}\r\n", i + 1).as_bytes());
    }
    msg.extend_from_slice(b"bogus\r\nuse other\r\nlist-tube-used\r\nuse default\r\n");
    for _ in 0..n {
        msg.extend_from_slice(b"reserve-with-timeout 0\r\n");
    }
    msg.extend_from_slice(b"reserve-with-timeout 0\r\n");
    c.send(&msg);
    for i in 0..n {
        c.expect(&format!("INSERTED {}", i + 1));
    }
    for i in 0..n {
        let (id, body) = c.read_job("FOUND");
        assert_eq!(id, i as u64 + 1);
        assert_eq!(body, format!("job-{i}\r\n").into_bytes());
    }
    c.expect("UNKNOWN_COMMAND");
    c.expect("USING other");
    c.expect("USING other");
    c.expect("USING default");
    // Priorities were 1000 - i, so the reserves come out newest first.
    for i in (0..n).rev() {
        let (id, _) = c.read_job("RESERVED");
        assert_eq!(id, i as u64 + 1);
    }
    c.expect("TIMED_OUT");
}

#[test]
fn commands_split_into_single_bytes_work() {
    let (s, _dir) = serve();
    let mut c = s.client();
    let mut script = Vec::new();
    script.extend_from_slice(b"use split\r\n");
    script.extend_from_slice(b"put 5 0 60 7\r\nab\r\ncd\0\r\n");
    script.extend_from_slice(b"watch split\r\n");
    script.extend_from_slice(b"reserve\r\n");
    script.extend_from_slice(b"put 0 0 60 3\r\nxyzQQ");
    script.extend_from_slice(&[b'z'; 230]);
    script.extend_from_slice(b"\r\n");
    script.extend_from_slice(b"delete 1\r\n");
    script.extend_from_slice(b"stats-tube split\r\n");
    for &b in &script {
        c.send([b]);
        std::thread::sleep(Duration::from_millis(1));
    }
    c.expect("USING split");
    c.expect("INSERTED 1");
    c.expect("WATCHING 2");
    assert_eq!(c.read_job("RESERVED"), (1, b"ab\r\ncd\0".to_vec()));
    c.expect("EXPECTED_CRLF");
    c.expect("BAD_FORMAT");
    c.expect("DELETED");
    let yaml = c.read_ok();
    assert!(yaml.starts_with("---\nname: split\n"), "{yaml}");
}

#[test]
fn half_close_right_after_reserve_gets_timed_out_then_close() {
    let (s, _dir) = serve();
    let mut c = s.client();
    c.send("reserve\r\n");
    c.shutdown_write();
    c.expect("TIMED_OUT");
    c.expect_closed();
    // Same with reserve-with-timeout and earlier pipelined commands answered first.
    let mut c = s.client();
    c.send("use x\r\nreserve-with-timeout 1000\r\n");
    c.shutdown_write();
    c.expect("USING x");
    c.expect("TIMED_OUT");
    c.expect_closed();
}

#[test]
fn half_close_while_blocked_in_reserve_gets_timed_out_then_close() {
    let (s, _dir) = serve();
    let mut c = s.client();
    let mut watcher = s.client();
    c.cmd("reserve");
    common::wait_stat(&mut watcher, "current-waiting", "1");
    c.shutdown_write();
    c.expect("TIMED_OUT");
    c.expect_closed();
    common::wait_stat(&mut watcher, "current-waiting", "0");
    // The server did not hand a later job to the gone waiter.
    let id = watcher.put(0, 0, 60, b"x");
    assert_eq!(watcher.job_stat(id, "state"), "ready");
}

#[test]
fn half_close_after_pipelined_commands_still_answers_them() {
    let (s, _dir) = serve();
    let mut c = s.client();
    c.send("put 0 0 60 2\r\nhi\r\nlist-tube-used\r\n");
    c.shutdown_write();
    c.expect("INSERTED 1");
    c.expect("USING default");
    c.expect_closed();
    let mut d = s.client();
    assert_eq!(d.peek("peek 1"), Some((1, b"hi".to_vec())));
}
