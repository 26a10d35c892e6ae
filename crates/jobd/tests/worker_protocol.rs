//! Black-box tests of every jobd worker request and error over real TCP, against a real
//! MariaDB; includes the exact bytes the PHP client (ch1p/jobd-client 1.6) sends.

mod common;

use common::*;
use jobyard_jobd::start_jobd;
use serde_json::json;

#[tokio::test]
async fn status_has_jobds_shape() {
    let db = test_db().await;
    let jobs = Jobs::new();
    let w = start_jobd(worker_config(&db, &jobs, "t1 = 1\nt2 = 2\n3 = 1\n", ""))
        .await
        .unwrap();
    let mut c = Client::connect(w.addr).await;
    let s = c.ok("status", json!({})).await;
    let names: Vec<&String> = s["targets"].as_object().unwrap().keys().collect();
    assert_eq!(
        names,
        vec!["3", "t1", "t2"],
        "integer-like names first, as in a JS object"
    );
    assert_eq!(
        s["targets"]["t2"],
        json!({"paused": false, "concurrency": 2, "length": 0})
    );
    assert_eq!(s["jobPromisesCount"], 0);
    for k in ["rss", "heapTotal", "heapUsed", "external", "arrayBuffers"] {
        assert!(s["memoryUsage"][k].is_u64(), "{k}");
    }
    w.shutdown().await;
}

#[tokio::test]
async fn commands_answer_ok_strings_byte_for_byte() {
    let db = test_db().await;
    let jobs = Jobs::new();
    let w = start_jobd(worker_config(&db, &jobs, "t1 = 1\n", ""))
        .await
        .unwrap();
    let mut c = Client::connect(w.addr).await;
    for (kind, data) in [
        ("poll", json!({"targets": ["t1"]})),
        ("poll", json!({})),
        ("pause", json!({})),
        ("continue", json!({"targets": ["t1"]})),
        ("add-target", json!({"target": "t9", "concurrency": 3})),
        (
            "set-target-concurrency",
            json!({"target": "t9", "concurrency": 1}),
        ),
        ("remove-target", json!({"target": "t9"})),
    ] {
        let msg = format!("[0,{{\"no\":7,\"type\":\"{kind}\",\"data\":{data}}}]\x04");
        c.send_raw(msg.as_bytes()).await;
        assert_eq!(
            c.read_frame().await.unwrap(),
            "[1,{\"no\":7,\"data\":\"ok\"}]",
            "{kind}"
        );
    }
    w.shutdown().await;
}

#[tokio::test]
async fn validation_errors_are_jobds() {
    let db = test_db().await;
    let jobs = Jobs::new();
    let w = start_jobd(worker_config(&db, &jobs, "t1 = 1\n", ""))
        .await
        .unwrap();
    let mut c = Client::connect(w.addr).await;
    let cases = [
        ("poll", json!({"targets": null}), "targets must be array"),
        ("poll", json!({"targets": "t1"}), "targets must be array"),
        ("poll", json!({"targets": []}), "targets are empty"),
        (
            "poll",
            json!({"targets": [1]}),
            "all targets must be strings, number given",
        ),
        (
            "pause",
            json!({"targets": ["nope"]}),
            "invalid target 'nope'",
        ),
        (
            "continue",
            json!({"targets": ["nope"]}),
            "invalid target 'nope'",
        ),
        ("add-target", json!({}), "missing required field target"),
        (
            "add-target",
            json!({"target": 5}),
            "'target' must be string",
        ),
        (
            "add-target",
            json!({"target": "x"}),
            "missing required field concurrency",
        ),
        (
            "add-target",
            json!({"target": "x", "concurrency": "2"}),
            "'concurrency' must be integer",
        ),
        (
            "add-target",
            json!({"target": "x", "concurrency": 0}),
            "Invalid concurrency value.",
        ),
        (
            "add-target",
            json!({"target": "t1", "concurrency": 1}),
            "target 't1' already added",
        ),
        (
            "remove-target",
            json!({"target": "x"}),
            "target 'x' not found",
        ),
        (
            "set-target-concurrency",
            json!({"target": "x", "concurrency": 1}),
            "target 'x' not found",
        ),
        (
            "set-target-concurrency",
            json!({"target": "t1", "concurrency": -1}),
            "Invalid concurrency value.",
        ),
        (
            "run-manual",
            json!({"ids": ["1"]}),
            "all ids must be numbers, got string",
        ),
        ("run-manual", json!({"ids": []}), "ids are empty"),
        ("run-manual", json!({}), "missing required field ids"),
        ("nope", json!({}), "unknown request type: 'nope'"),
    ];
    for (kind, data, want) in cases {
        assert_eq!(c.err(kind, data.clone()).await, want, "{kind} {data}");
    }
    // send-signal without jobs is not an error in jobd: an empty object.
    assert_eq!(c.ok("send-signal", json!({})).await, json!({}));
    w.shutdown().await;
}

#[tokio::test]
async fn malformed_messages_get_no_zero_errors_and_the_connection_stays() {
    let db = test_db().await;
    let jobs = Jobs::new();
    let w = start_jobd(worker_config(&db, &jobs, "t1 = 1\n", ""))
        .await
        .unwrap();
    let mut c = Client::connect(w.addr).await;
    let cases: [(&[u8], &str); 7] = [
        (b"{\"a\":1}\x04", "[1,{\"no\":0,\"error\":\"JSON array expected, got: [object Object]\"}]"),
        (b"[7]\x04", "[1,{\"no\":0,\"error\":\"unexpected type 7\"}]"),
        (b"[0]\x04", "[1,{\"no\":0,\"error\":\"malformed REQUEST message: data is not an object\"}]"),
        (b"[0,{\"no\":1}]\x04", "[1,{\"no\":0,\"error\":\"malformed REQUEST message: missing required field type\"}]"),
        (b"[0,{\"type\":\"status\",\"no\":\"1\"}]\x04", "[1,{\"no\":0,\"error\":\"malformed REQUEST message: 'no' must be integer\"}]"),
        (b"[0,{\"type\":\"status\",\"no\":1,\"data\":false}]\x04", "[1,{\"no\":0,\"error\":\"malformed REQUEST message: 'data' must be any of: string, number, object, array\"}]"),
        (b"\x04\x04[2]\x04", "[3]"),
    ];
    for (input, want) in cases {
        c.send_raw(input).await;
        assert_eq!(c.read_frame().await.unwrap(), want);
    }
    c.send_raw(b"garbage\x04").await;
    let r = c.read_json().await;
    assert_eq!(r[1]["no"], 0);
    assert!(
        r[1]["error"]
            .as_str()
            .unwrap()
            .starts_with("malformed JSON"),
        "{r}"
    );
    assert!(c.ok("status", json!({})).await.is_object());
    w.shutdown().await;
}

#[tokio::test]
async fn oversized_message_is_answered_then_closed() {
    let db = test_db().await;
    let jobs = Jobs::new();
    let w = start_jobd(worker_config(&db, &jobs, "t1 = 1\n", ""))
        .await
        .unwrap();
    let mut c = Client::connect(w.addr).await;
    let big = vec![b' '; jobyard_jobd::protocol::MAX_REQUEST_FRAME + 1];
    c.send_raw(&big).await;
    let r = c.read_json().await;
    assert_eq!(r[1]["no"], 0);
    assert_eq!(r[1]["error"], "message too large (limit 16777216 bytes)");
    assert_eq!(c.read_frame().await, None, "closed after the error");
    // A message of exactly the cap is accepted (whitespace padding is valid JSON).
    let mut c = Client::connect(w.addr).await;
    let body = b"[0,{\"no\":1,\"type\":\"status\"}]";
    let mut msg = vec![b' '; jobyard_jobd::protocol::MAX_REQUEST_FRAME - body.len()];
    msg.extend_from_slice(body);
    msg.push(4);
    c.send_raw(&msg).await;
    let r = c.read_json().await;
    assert_eq!(r[1]["no"], 1);
    w.shutdown().await;
}

#[tokio::test]
async fn password_rules() {
    let db = test_db().await;
    let jobs = Jobs::new();
    let w = start_jobd(worker_config(&db, &jobs, "t1 = 1\n", "password = secret\n"))
        .await
        .unwrap();
    // Ping is answered before authentication.
    let mut c = Client::connect(w.addr).await;
    c.send_raw(b"[2]\x04").await;
    assert_eq!(c.read_frame().await.unwrap(), "[3]");
    // Missing password: error with that request's no, then closed.
    c.send_raw(b"[0,{\"no\":1,\"type\":\"status\"}]\x04[0,{\"no\":2,\"type\":\"status\"}]\x04")
        .await;
    assert_eq!(
        c.read_frame().await.unwrap(),
        "[1,{\"no\":1,\"error\":\"invalid password\"}]"
    );
    assert_eq!(c.read_frame().await, None);
    // Wrong password.
    let mut c = Client::connect(w.addr).await;
    c.send_raw(b"[0,{\"no\":5,\"type\":\"status\",\"password\":\"nope\"}]\x04")
        .await;
    assert_eq!(
        c.read_frame().await.unwrap(),
        "[1,{\"no\":5,\"error\":\"invalid password\"}]"
    );
    assert_eq!(c.read_frame().await, None);
    // Right password on the first request only.
    let mut c = Client::connect(w.addr).await;
    c.send_raw(b"[0,{\"type\":\"status\",\"no\":298610,\"password\":\"secret\"}]\x04")
        .await;
    let r = c.read_json().await;
    assert_eq!(r[1]["no"], 298610);
    assert!(r[1]["data"]["targets"].is_object());
    assert!(c.ok("status", json!({})).await.is_object());
    w.shutdown().await;
}

#[tokio::test]
async fn localhost_bypass_covers_ipv6_loopback() {
    let db = test_db().await;
    let jobs = Jobs::new();
    let mut cfg = worker_config(
        &db,
        &jobs,
        "t1 = 1\n",
        "password = secret\nalways_allow_localhost = 1\n",
    );
    cfg.host = "::".into();
    // A machine without IPv6 fails here rather than passing unrun: the test would
    // otherwise report a check it never made.
    let w = start_jobd(cfg)
        .await
        .expect("this test needs IPv6: listening on [::] failed");
    for host in ["127.0.0.1", "::1"] {
        let addr = std::net::SocketAddr::new(host.parse().unwrap(), w.addr.port());
        let mut c = Client::connect(addr).await;
        assert!(c.ok("status", json!({})).await.is_object(), "{host}");
    }
    w.shutdown().await;
}

#[tokio::test]
async fn requests_are_answered_by_number_when_pipelined() {
    let db = test_db().await;
    let jobs = Jobs::new();
    let w = start_jobd(worker_config(&db, &jobs, "t1 = 1\n", ""))
        .await
        .unwrap();
    let id = db.insert("t1", "manual").await;
    jobs.script(id, "while [ ! -f \"$d/go\" ]; do sleep 0.01; done\n");
    let mut c = Client::connect(w.addr).await;
    let msg = format!(
        "[0,{{\"no\":1,\"type\":\"run-manual\",\"data\":{{\"ids\":[{id}]}}}}]\x04[0,{{\"no\":2,\"type\":\"status\"}}]\x04[0,{{\"no\":3,\"type\":\"poll\"}}]\x04"
    );
    c.send_raw(msg.as_bytes()).await;
    let a = c.read_json().await;
    let b = c.read_json().await;
    assert_eq!(a[1]["no"], 2);
    assert_eq!(b[1]["no"], 3);
    std::fs::write(jobs.path("go"), "").unwrap();
    let r = c.read_json().await;
    assert_eq!(r[1]["no"], 1);
    assert_eq!(r[1]["data"]["jobs"][id.to_string()]["result"], "ok");
    w.shutdown().await;
}

/// The exact requests `jobd\WorkerClient` sends (json_encode: `\/` escapes, `type` before
/// `no`, status without `data`), read with its rules: one reply per request, nothing else.
#[tokio::test]
async fn php_worker_client_bytes() {
    let db = test_db().await;
    let jobs = Jobs::new();
    let w = start_jobd(worker_config(
        &db,
        &jobs,
        "t1 = 1\n1/low = 1\n",
        "password = secret\n",
    ))
    .await
    .unwrap();
    let id = db.insert("1/low", "manual").await;
    let mut c = Client::connect(w.addr).await;
    let sends = [
        "[0,{\"type\":\"status\",\"no\":298610,\"password\":\"secret\"}]".to_string(),
        "[0,{\"type\":\"poll\",\"no\":298611,\"data\":{\"targets\":[\"t1\",\"1\\/low\"]}}]".into(),
        "[0,{\"type\":\"poll\",\"no\":298612,\"data\":{}}]".into(),
        format!("[0,{{\"type\":\"run-manual\",\"no\":298613,\"data\":{{\"ids\":[{id}]}}}}]"),
        "[0,{\"type\":\"send-signal\",\"no\":298614,\"data\":{\"jobs\":{\"5\":15}}}]".into(),
        "[0,{\"type\":\"pause\",\"no\":298615,\"data\":{}}]".into(),
        "[0,{\"type\":\"continue\",\"no\":298616,\"data\":{}}]".into(),
        "[0,{\"type\":\"add-target\",\"no\":298617,\"data\":{\"target\":\"t9\",\"concurrency\":3}}]".into(),
    ];
    for (i, s) in sends.iter().enumerate() {
        c.send_raw(format!("{s}\x04").as_bytes()).await;
        let f = c.read_frame().await.unwrap();
        let v: serde_json::Value = serde_json::from_str(&f).unwrap();
        assert_eq!(v[1]["no"], 298610 + i as u64, "{f}");
        assert!(v[1].get("error").is_none(), "{f}");
        assert!(
            !v[1]["data"].is_boolean(),
            "PHP rejects a boolean top-level data"
        );
    }
    c.send_raw(b"[2]\x04").await;
    assert_eq!(c.read_frame().await.unwrap(), "[3]");
    w.shutdown().await;
}

#[tokio::test]
async fn pipelining_without_reading_is_throttled_not_lost() {
    // Beyond MAX_IN_FLIGHT requests and a full output queue the daemon stops reading (TCP
    // backpressure) instead of buffering without end; every request is still answered.
    let db = test_db().await;
    let jobs = Jobs::new();
    let w = start_jobd(worker_config(&db, &jobs, "t1 = 1\n", ""))
        .await
        .unwrap();
    let stream = tokio::net::TcpStream::connect(w.addr).await.unwrap();
    let (mut read, mut write) = stream.into_split();
    const N: usize = 20_000;
    let writer = tokio::spawn(async move {
        use tokio::io::AsyncWriteExt;
        let mut all = Vec::new();
        for no in 1..=N {
            all.extend_from_slice(
                format!("[0,{{\"no\":{no},\"type\":\"status\"}}]\x04").as_bytes(),
            );
        }
        write.write_all(&all).await.unwrap();
        write
    });
    // Let the writer fill every buffer before reading anything.
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let mut seen = vec![false; N + 1];
    let mut buf = Vec::new();
    let mut count = 0;
    while count < N {
        use tokio::io::AsyncReadExt;
        let mut chunk = vec![0u8; 65536];
        let n = read.read(&mut chunk).await.unwrap();
        assert!(n > 0, "closed after {count} replies");
        buf.extend_from_slice(&chunk[..n]);
        while let Some(pos) = buf.iter().position(|&b| b == 4) {
            let frame: Vec<u8> = buf.drain(..=pos).collect();
            let v: serde_json::Value = serde_json::from_slice(&frame[..pos]).unwrap();
            let no = v[1]["no"].as_u64().unwrap() as usize;
            assert!(!seen[no], "reply {no} twice");
            seen[no] = true;
            count += 1;
        }
    }
    drop(writer.await.unwrap());
    w.shutdown().await;
}
