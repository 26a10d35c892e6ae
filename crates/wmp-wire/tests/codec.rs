//! The WMP/1 codec: round trips of every command, and every rule and bound of the
//! validation list (docs/wmp.md, "Validation"), one test each.

use bytes::Bytes;
use jobyard_wmp_wire::*;

fn b(s: &str) -> Bytes {
    Bytes::copy_from_slice(s.as_bytes())
}

/// Frames for `[path] "" WMP01 cmd headers [payload]`.
fn msg(path: &[&str], cmd: &str, headers: &str, payload: Option<&str>) -> Vec<Bytes> {
    let mut f: Vec<Bytes> = path.iter().map(|p| b(p)).collect();
    f.extend([Bytes::new(), b("WMP01"), b(cmd), b(headers)]);
    if let Some(p) = payload {
        f.push(b(p));
    }
    f
}

fn dec(frames: &[Bytes]) -> Result<Message, DecodeError> {
    decode(frames, &Limits::default())
}

fn all_commands() -> Vec<Command> {
    vec![
        Command::Ready(Ready {
            roles: Some(vec!["a".into(), "b.c".into()]),
            worker: Some("host-1".into()),
        }),
        Command::Ready(Ready::default()),
        Command::Wake(Wake {
            queue: Some("q".into()),
            manager: Some("m@h:1".into()),
        }),
        Command::Give(Give {
            lock: "17".into(),
            roles: Some(vec!["q".into()]),
            queue: None,
        }),
        Command::Take(Take {
            lock: "17".into(),
            manager: "m".into(),
            job: 42,
            attempt: 3,
            queue: "q".into(),
            timeout_ms: 60000,
            body: b("body\0with\nbytes"),
        }),
        Command::No(No {
            lock: "x".into(),
            manager: None,
        }),
        Command::Done(Done {
            manager: "m".into(),
            job: u64::MAX,
            attempt: 1,
            status: Status::Fail,
            error: Some("exit_3".into()),
            result: b("oops"),
        }),
        Command::Done(Done {
            manager: "m".into(),
            job: 1,
            attempt: 2,
            status: Status::Reject,
            error: None,
            result: Bytes::new(),
        }),
        Command::Status(Progress {
            manager: "m".into(),
            job: 1,
            attempt: 1,
            num: Some(1),
            den: Some(4),
        }),
        Command::Cancel(Cancel {
            manager: "m".into(),
            job: 9,
            attempt: 9,
        }),
    ]
}

#[test]
fn every_command_round_trips_with_and_without_path() {
    for cmd in all_commands() {
        for path in [vec![], vec![b("id"), b("u0")]] {
            let m = Message::new(path, cmd.clone());
            assert_eq!(dec(&encode(&m)).unwrap(), m);
        }
    }
}

#[test]
fn encoding_has_the_published_layout() {
    let m = Message::new(
        vec![b("w1")],
        Command::Give(Give {
            lock: "5".into(),
            roles: Some(vec!["a".into(), "b".into()]),
            queue: Some("a".into()),
        }),
    );
    assert_eq!(
        encode(&m),
        vec![
            b("w1"),
            Bytes::new(),
            b("WMP01"),
            b("GIVE"),
            b("lock=5\nroles=a,b\nqueue=a")
        ]
    );
}

#[test]
fn unknown_headers_are_kept_as_extras_and_re_encoded() {
    let f = msg(
        &[],
        "TAKE",
        "lock=1\nmanager=m\njob=1\nattempt=1\nqueue=q\ntimeout=5\nhandle=H:x:1",
        Some("b"),
    );
    let m = dec(&f).unwrap();
    assert_eq!(m.extra.get("handle"), Some("H:x:1"));
    assert_eq!(m.extra.len(), 1);
    assert_eq!(dec(&encode(&m)).unwrap(), m);
}

#[test]
fn an_extra_repeating_a_defined_key_is_left_out_and_numbers_keep_every_digit() {
    let take = all_commands()
        .into_iter()
        .find(|c| matches!(c, Command::Take(_)))
        .unwrap();
    let mut m = Message::new(vec![], take);
    m.extra.push("job", "999");
    m.extra.push("more", "1");
    let frames = encode(&m);
    assert_eq!(
        frames[3],
        b("lock=17\nmanager=m\njob=42\nattempt=3\nqueue=q\ntimeout=60000\nmore=1")
    );
    let back = dec(&frames).unwrap();
    assert_eq!(back.extra.get("more"), Some("1"));
    assert_eq!(back.extra.len(), 1);
    let status = Message::new(
        vec![],
        Command::Status(Progress {
            manager: "m".into(),
            job: u64::MAX,
            attempt: 0,
            num: Some(10),
            den: None,
        }),
    );
    assert_eq!(
        encode(&status)[3],
        b("manager=m\njob=18446744073709551615\nattempt=0\nnum=10")
    );
}

#[test]
fn empty_headers_frame_and_trailing_lf_are_fine() {
    assert!(dec(&msg(&[], "READY", "", None)).is_ok());
    assert!(dec(&msg(&[], "READY", "\n", None)).is_ok());
    assert!(dec(&msg(&[], "WAKE", "queue=q\n", None)).is_ok());
}

#[test]
fn absent_and_empty_payload_are_the_same() {
    let with_empty = msg(
        &[],
        "DONE",
        "manager=m\njob=1\nattempt=1\nstatus=ok",
        Some(""),
    );
    let without = msg(&[], "DONE", "manager=m\njob=1\nattempt=1\nstatus=ok", None);
    assert_eq!(dec(&with_empty).unwrap(), dec(&without).unwrap());
}

#[test]
fn value_may_contain_equals_sign() {
    let m = dec(&msg(&[], "WAKE", "queue=a=b", None)).unwrap();
    assert_eq!(
        m.command,
        Command::Wake(Wake {
            queue: Some("a=b".into()),
            manager: None
        })
    );
}

#[test]
fn no_delimiter() {
    let f = vec![b("w"), b("WMP01"), b("READY"), b("a=1")];
    assert_eq!(dec(&f), Err(DecodeError::NoDelimiter));
    // Without a delimiter an empty headers frame is taken for one; still refused.
    let f = vec![b("w"), b("WMP01"), b("READY"), b("")];
    assert_eq!(dec(&f), Err(DecodeError::BadSignature));
}

#[test]
fn path_limit_counts_every_frame_before_the_delimiter() {
    let sixteen: Vec<&str> = vec!["p"; 16];
    assert!(dec(&msg(&sixteen, "READY", "", None)).is_ok());
    let seventeen: Vec<&str> = vec!["p"; 17];
    // 17 path frames + 4 = 21 frames = max_frames, so the path check is what fails.
    assert_eq!(
        dec(&msg(&seventeen, "READY", "", None)),
        Err(DecodeError::PathTooLong)
    );
}

#[test]
fn too_many_frames() {
    let mut f = msg(&vec!["p"; 16], "DONE", "", Some("x"));
    f.push(b("more"));
    assert_eq!(dec(&f), Err(DecodeError::TooManyFrames));
}

#[test]
fn path_frame_size_limit() {
    let ok = "i".repeat(255);
    let long = "i".repeat(256);
    assert!(dec(&msg(&[&ok], "READY", "", None)).is_ok());
    assert_eq!(
        dec(&msg(&[&long], "READY", "", None)),
        Err(DecodeError::PathFrameTooLong)
    );
}

#[test]
fn wrong_or_missing_signature() {
    let mut f = msg(&[], "READY", "", None);
    f[1] = b("WMP02");
    assert_eq!(dec(&f), Err(DecodeError::BadSignature));
    assert_eq!(dec(&[Bytes::new()]), Err(DecodeError::BadSignature));
}

#[test]
fn missing_command_or_headers() {
    assert_eq!(
        dec(&[Bytes::new(), b("WMP01")]),
        Err(DecodeError::NoCommand)
    );
    assert_eq!(
        dec(&[Bytes::new(), b("WMP01"), b("READY")]),
        Err(DecodeError::NoHeaders)
    );
}

#[test]
fn unknown_and_wrongly_spelled_commands() {
    for name in ["FROB", "ready", "", "READYREADYREADYREADY"] {
        assert_eq!(
            dec(&msg(&[], name, "", None)),
            Err(DecodeError::UnknownCommand),
            "{name}"
        );
    }
}

#[test]
fn more_than_one_frame_after_headers() {
    let mut f = msg(
        &[],
        "DONE",
        "manager=m\njob=1\nattempt=1\nstatus=ok",
        Some("a"),
    );
    f.push(b("b"));
    assert_eq!(dec(&f), Err(DecodeError::ExtraFrames));
}

#[test]
fn payload_limit() {
    let limits = Limits {
        max_payload: 4,
        ..Limits::default()
    };
    let h = "lock=1\nmanager=m\njob=1\nattempt=1\nqueue=q\ntimeout=1";
    assert!(decode(&msg(&[], "TAKE", h, Some("1234")), &limits).is_ok());
    assert_eq!(
        decode(&msg(&[], "TAKE", h, Some("12345")), &limits),
        Err(DecodeError::PayloadTooLarge)
    );
}

#[test]
fn payload_on_a_command_without_one() {
    assert_eq!(
        dec(&msg(&[], "READY", "", Some("x"))),
        Err(DecodeError::UnexpectedPayload)
    );
    assert_eq!(
        dec(&msg(&[], "GIVE", "lock=1", Some("x"))),
        Err(DecodeError::UnexpectedPayload)
    );
}

#[test]
fn headers_frame_size_limit() {
    let limits = Limits::default();
    let fits = format!("worker={}", "w".repeat(limits.max_headers_bytes - 7));
    assert_eq!(fits.len(), limits.max_headers_bytes);
    // The value itself is too long for a header (1024), so build an 8 KiB frame of lines.
    let line = format!("k={}", "v".repeat(1000));
    let lines: Vec<String> = (0..8)
        .map(|i| line.replacen('k', &format!("k{i}"), 1))
        .collect();
    let joined = lines.join("\n");
    assert!(joined.len() <= limits.max_headers_bytes);
    assert!(dec(&msg(&[], "READY", &joined, None)).is_ok());
    let big = format!("{joined}\n{line}");
    assert!(big.len() > limits.max_headers_bytes);
    assert_eq!(
        dec(&msg(&[], "READY", &big, None)),
        Err(DecodeError::HeadersTooLarge)
    );
    let _ = fits;
}

#[test]
fn header_count_limit() {
    let lines = |n: usize| {
        (0..n)
            .map(|i| format!("x{i}=1"))
            .collect::<Vec<_>>()
            .join("\n")
    };
    assert!(dec(&msg(&[], "READY", &lines(64), None)).is_ok());
    assert_eq!(
        dec(&msg(&[], "READY", &lines(65), None)),
        Err(DecodeError::TooManyHeaders)
    );
}

#[test]
fn key_and_value_length_limits() {
    let key64 = format!("k{}", "a".repeat(63));
    let key65 = format!("k{}", "a".repeat(64));
    assert!(dec(&msg(&[], "READY", &format!("{key64}=1"), None)).is_ok());
    assert_eq!(
        dec(&msg(&[], "READY", &format!("{key65}=1"), None)),
        Err(DecodeError::BadHeaderLine)
    );
    let v1024 = "v".repeat(1024);
    let v1025 = "v".repeat(1025);
    assert!(dec(&msg(&[], "READY", &format!("x={v1024}"), None)).is_ok());
    assert_eq!(
        dec(&msg(&[], "READY", &format!("x={v1025}"), None)),
        Err(DecodeError::BadHeaderLine)
    );
}

#[test]
fn malformed_header_lines() {
    for h in [
        "noequals",
        "=value",
        "Upper=1",
        "_x=1",
        "sp ace=1",
        "a=1\n\nb=2",
        "a=1\n\n",
        "\n\n",
        "a=1\r",
        "a=1\r\nb=2",
        "a=x\0y",
        "ключ=1",
    ] {
        assert_eq!(
            dec(&msg(&[], "READY", h, None)),
            Err(DecodeError::BadHeaderLine),
            "{h:?}"
        );
    }
    let mut f = msg(&[], "READY", "", None);
    f[3] = Bytes::from_static(b"a=\xff");
    assert_eq!(dec(&f), Err(DecodeError::BadHeaderLine));
}

#[test]
fn duplicate_header_key() {
    assert_eq!(
        dec(&msg(&[], "WAKE", "queue=a\nqueue=a", None)),
        Err(DecodeError::DuplicateHeader)
    );
    // Even an unknown key may not repeat.
    assert_eq!(
        dec(&msg(&[], "WAKE", "x=1\nx=2", None)),
        Err(DecodeError::DuplicateHeader)
    );
}

#[test]
fn required_headers() {
    let cases = [
        ("GIVE", "", "lock"),
        ("NO", "", "lock"),
        (
            "TAKE",
            "manager=m\njob=1\nattempt=1\nqueue=q\ntimeout=1",
            "lock",
        ),
        (
            "TAKE",
            "lock=1\njob=1\nattempt=1\nqueue=q\ntimeout=1",
            "manager",
        ),
        (
            "TAKE",
            "lock=1\nmanager=m\nattempt=1\nqueue=q\ntimeout=1",
            "job",
        ),
        (
            "TAKE",
            "lock=1\nmanager=m\njob=1\nqueue=q\ntimeout=1",
            "attempt",
        ),
        (
            "TAKE",
            "lock=1\nmanager=m\njob=1\nattempt=1\ntimeout=1",
            "queue",
        ),
        (
            "TAKE",
            "lock=1\nmanager=m\njob=1\nattempt=1\nqueue=q",
            "timeout",
        ),
        ("DONE", "job=1\nattempt=1\nstatus=ok", "manager"),
        ("DONE", "manager=m\nattempt=1\nstatus=ok", "job"),
        ("DONE", "manager=m\njob=1\nstatus=ok", "attempt"),
        ("DONE", "manager=m\njob=1\nattempt=1", "status"),
    ];
    for (cmd, h, missing) in cases {
        assert_eq!(
            dec(&msg(&[], cmd, h, None)),
            Err(DecodeError::MissingHeader(missing)),
            "{cmd} {h}"
        );
    }
}

#[test]
fn bad_numbers() {
    for v in [
        "",
        "-1",
        "+1",
        " 1",
        "1 ",
        "1.0",
        "0x10",
        "18446744073709551616",
        "abc",
    ] {
        let h = format!("manager=m\njob={v}\nattempt=1\nstatus=ok");
        assert_eq!(
            dec(&msg(&[], "DONE", &h, None)),
            Err(DecodeError::BadHeaderValue("job")),
            "{v:?}"
        );
    }
    assert!(dec(&msg(
        &[],
        "DONE",
        "manager=m\njob=18446744073709551615\nattempt=1\nstatus=ok",
        None
    ))
    .is_ok());
    assert!(dec(&msg(
        &[],
        "DONE",
        "manager=m\njob=007\nattempt=1\nstatus=ok",
        None
    ))
    .is_ok());
}

#[test]
fn attempt_zero_is_malformed() {
    let h = "manager=m\njob=1\nattempt=0\nstatus=ok";
    assert_eq!(
        dec(&msg(&[], "DONE", h, None)),
        Err(DecodeError::BadHeaderValue("attempt"))
    );
}

#[test]
fn status_values_are_exact() {
    for s in ["OK", "Ok", "failed", "error", "", "ok "] {
        let h = format!("manager=m\njob=1\nattempt=1\nstatus={s}");
        assert_eq!(
            dec(&msg(&[], "DONE", &h, None)),
            Err(DecodeError::BadHeaderValue("status")),
            "{s:?}"
        );
    }
}

#[test]
fn lock_is_opaque_but_bounded() {
    for lock in ["1", "abc-DEF_9", "with space", "ü"] {
        assert!(
            dec(&msg(&[], "GIVE", &format!("lock={lock}"), None)).is_ok(),
            "{lock}"
        );
    }
    let long = "l".repeat(65);
    assert_eq!(
        dec(&msg(&[], "GIVE", &format!("lock={long}"), None)),
        Err(DecodeError::BadHeaderValue("lock"))
    );
    assert_eq!(
        dec(&msg(&[], "GIVE", "lock=", None)),
        Err(DecodeError::BadHeaderValue("lock"))
    );
}

#[test]
fn roles_list_items_must_be_non_empty() {
    for r in ["", "a,", ",a", "a,,b"] {
        let h = format!("roles={r}");
        assert_eq!(
            dec(&msg(&[], "READY", &h, None)),
            Err(DecodeError::BadHeaderValue("roles")),
            "{r:?}"
        );
    }
}

#[test]
fn empty_names_are_malformed() {
    assert_eq!(
        dec(&msg(&[], "WAKE", "queue=", None)),
        Err(DecodeError::BadHeaderValue("queue"))
    );
    let h = "lock=1\nmanager=\njob=1\nattempt=1\nqueue=q\ntimeout=1";
    assert_eq!(
        dec(&msg(&[], "TAKE", h, None)),
        Err(DecodeError::BadHeaderValue("manager"))
    );
}

#[test]
fn every_error_has_a_distinct_reason() {
    let all = [
        DecodeError::TooManyFrames,
        DecodeError::NoDelimiter,
        DecodeError::PathTooLong,
        DecodeError::PathFrameTooLong,
        DecodeError::BadSignature,
        DecodeError::NoCommand,
        DecodeError::UnknownCommand,
        DecodeError::NoHeaders,
        DecodeError::HeadersTooLarge,
        DecodeError::TooManyHeaders,
        DecodeError::BadHeaderLine,
        DecodeError::DuplicateHeader,
        DecodeError::ExtraFrames,
        DecodeError::PayloadTooLarge,
        DecodeError::MissingHeader("x"),
        DecodeError::BadHeaderValue("x"),
        DecodeError::UnexpectedPayload,
        DecodeError::NoAlias,
    ];
    let mut reasons: Vec<&str> = all.iter().map(|e| e.reason()).collect();
    reasons.sort();
    reasons.dedup();
    assert_eq!(reasons.len(), all.len());
}
