//! jobd-master with two real worker daemons sharing a target, over real TCP and MariaDB.

mod common;

use std::time::{Duration, Instant};

use common::*;
use jobyard_jobd::config::MasterConfig;
use jobyard_jobd::{start_jobd, start_master, JobdHandle, MasterHandle};
use serde_json::{json, Value};

async fn master(extra: &str) -> MasterHandle {
    let cfg = MasterConfig::parse(&format!(
        "host = 127.0.0.1\nport = 0\npoke_throttle_interval = 0.05\n{extra}\n"
    ))
    .unwrap();
    start_master(cfg).await.unwrap()
}

async fn worker(
    db: &TestDb,
    jobs: &Jobs,
    m: &MasterHandle,
    name: &str,
    targets: &str,
    extra: &str,
) -> JobdHandle {
    let mut cfg = worker_config(db, jobs, targets, extra);
    cfg.name = name.into();
    cfg.master = Some(("127.0.0.1".into(), m.addr.port()));
    cfg.master_reconnect_timeout = 1;
    start_jobd(cfg).await.unwrap()
}

/// Waits (bounded) until the master lists `n` workers.
async fn registered(c: &mut Client, n: usize) -> Value {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let s = c.ok("status", json!({})).await;
        if s["workers"].as_array().unwrap().len() == n {
            return s;
        }
        assert!(Instant::now() < deadline, "workers: {s}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn two_workers_share_a_target_through_poke() {
    let db = test_db().await;
    let jobs = Jobs::new();
    let m = master("").await;
    let w1 = worker(&db, &jobs, &m, "w1", "any = 2\nw1only = 1\n", "").await;
    let w2 = worker(&db, &jobs, &m, "w2", "any = 2\n", "").await;
    let mut c = Client::connect(m.addr).await;
    let s = registered(&mut c, 2).await;
    let names: Vec<&str> = s["workers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w["name"].as_str().unwrap())
        .collect();
    assert!(names.contains(&"w1") && names.contains(&"w2"));
    let mut ids = Vec::new();
    for _ in 0..12 {
        ids.push(db.insert("any", "waiting").await);
    }
    for id in &ids {
        jobs.script(*id, "echo \"$1 $PPID\" >> \"$d/who\"; sleep 0.05\n");
    }
    ids.push(db.insert("w1only", "waiting").await);
    assert_eq!(
        c.ok("poke", json!({"targets": ["any", "w1only"]})).await,
        "ok"
    );
    for id in &ids {
        db.wait_status(*id, "done").await;
    }
    // Poked targets nobody serves yet are remembered for the first worker to register them.
    let late = db.insert("late", "waiting").await;
    c.ok("poke", json!({"targets": ["late"]})).await;
    let w3 = worker(&db, &jobs, &m, "w3", "late = 1\n", "").await;
    db.wait_status(late, "done").await;
    for w in [w1, w2, w3] {
        w.shutdown().await;
    }
    m.shutdown().await;
}

#[tokio::test]
async fn status_with_poll_workers_and_runtime_targets_reach_the_master() {
    let db = test_db().await;
    let jobs = Jobs::new();
    let m = master("").await;
    let w1 = worker(&db, &jobs, &m, "w1", "a = 1\n", "").await;
    let mut c = Client::connect(m.addr).await;
    registered(&mut c, 1).await;
    let s = c.ok("status", json!({"poll_workers": true})).await;
    let w = &s["workers"][0];
    assert_eq!(w["name"], "w1");
    assert_eq!(w["targets"], json!(["a"]));
    assert_eq!(w["remoteAddr"], "127.0.0.1");
    assert!(w["remotePort"].is_u64());
    assert_eq!(w["workerStatus"]["targets"]["a"]["concurrency"], 1);
    assert!(s["memoryUsage"]["rss"].is_u64());
    // add-target on the worker is told to the master (jobd never did).
    let mut wc = Client::connect(w1.addr).await;
    wc.ok("add-target", json!({"target": "b", "concurrency": 1}))
        .await;
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let s = c.ok("status", json!({})).await;
        if s["workers"][0]["targets"] == json!(["a", "b"]) {
            break;
        }
        assert!(Instant::now() < deadline, "{s}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    w1.shutdown().await;
    m.shutdown().await;
}

#[tokio::test]
async fn master_pause_and_continue_answer() {
    // Bug 3: jobd-master never answered pause/continue; PHP clients hung forever.
    let db = test_db().await;
    let jobs = Jobs::new();
    let m = master("").await;
    let w1 = worker(&db, &jobs, &m, "w1", "a = 1\nb = 1\n", "").await;
    let mut c = Client::connect(m.addr).await;
    registered(&mut c, 1).await;
    assert_eq!(c.ok("pause", json!({"targets": ["a"]})).await, "ok");
    let s = c.ok("status", json!({"poll_workers": true})).await;
    assert_eq!(
        s["workers"][0]["workerStatus"]["targets"]["a"]["paused"],
        true
    );
    assert_eq!(
        s["workers"][0]["workerStatus"]["targets"]["b"]["paused"],
        false
    );
    assert_eq!(c.ok("continue", json!({})).await, "ok");
    let s = c.ok("status", json!({"poll_workers": true})).await;
    assert_eq!(
        s["workers"][0]["workerStatus"]["targets"]["a"]["paused"],
        false
    );
    assert_eq!(
        c.err("pause", json!({"targets": []})).await,
        "targets are empty"
    );
    w1.shutdown().await;
    m.shutdown().await;
}

#[tokio::test]
async fn master_run_manual_merges_results_and_maps_worker_errors_per_id() {
    // Bug 4: a worker's error reply crashed jobd-master's whole run-manual.
    let db = test_db().await;
    let jobs = Jobs::new();
    let m = master("").await;
    let w1 = worker(&db, &jobs, &m, "w1", "a = 1\n", "").await;
    let w2 = worker(&db, &jobs, &m, "w2", "b = 1\n", "").await;
    let mut c = Client::connect(m.addr).await;
    registered(&mut c, 2).await;
    let a = db.insert("a", "manual").await;
    let b = db.insert("b", "manual").await;
    let blocked = db.insert("b", "manual").await;
    jobs.script(
        blocked,
        "touch \"$d/started\"; while [ ! -f \"$d/go\" ]; do sleep 0.01; done\n",
    );
    // Someone else already waits for `blocked` on w2: w2 answers the master with an error.
    let mut direct = Client::connect(w2.addr).await;
    let hold =
        tokio::spawn(async move { direct.ok("run-manual", json!({"ids": [blocked]})).await });
    jobs.wait_file("started").await;
    let mut c2 = Client::connect(m.addr).await;
    let go = jobs.path("go");
    let out = c
        .ok(
            "run-manual",
            json!({"jobs": [{"id": a, "target": "a"}, {"id": blocked, "target": "b"}, {"id": 77, "target": "zzz"}]}),
        )
        .await;
    assert_eq!(out["jobs"][a.to_string()]["result"], "ok");
    assert_eq!(
        out["errors"][blocked.to_string()],
        format!("worker 'w2': another client is already waiting for job {blocked}")
    );
    assert_eq!(out["errors"]["77"], "worker serving target 'zzz' not found");
    std::fs::write(go, "").unwrap();
    hold.await.unwrap();
    let out = c2
        .ok("run-manual", json!({"jobs": [{"id": b, "target": "b"}]}))
        .await;
    assert_eq!(out["jobs"][b.to_string()]["code"], 0);
    assert_eq!(
        c2.err("run-manual", json!({"jobs": [{"id": "x", "target": "b"}]}))
            .await,
        "'id' must be integer"
    );
    assert_eq!(
        c2.err("run-manual", json!({"jobs": [{"id": 1}]})).await,
        "missing required field target"
    );
    assert_eq!(c2.err("run-manual", json!({})).await, "jobs must be array");
    w1.shutdown().await;
    w2.shutdown().await;
    m.shutdown().await;
}

#[tokio::test]
async fn worker_lost_during_run_manual_becomes_a_per_id_error() {
    let db = test_db().await;
    let jobs = Jobs::new();
    let m = master("").await;
    // A fake worker: registers, then closes its connection mid-request.
    let mut fake = Client::connect(m.addr).await;
    fake.send_raw(b"[0,{\"no\":1,\"type\":\"register-worker\",\"data\":{\"name\":\"fake\",\"targets\":[\"f\"]}}]\x04").await;
    assert_eq!(
        fake.read_frame().await.unwrap(),
        "[1,{\"no\":1,\"data\":\"ok\"}]"
    );
    let w1 = worker(&db, &jobs, &m, "w1", "a = 1\n", "").await;
    let mut c = Client::connect(m.addr).await;
    registered(&mut c, 2).await;
    let a = db.insert("a", "manual").await;
    let call = tokio::spawn(async move {
        c.ok(
            "run-manual",
            json!({"jobs": [{"id": a, "target": "a"}, {"id": 5, "target": "f"}]}),
        )
        .await
    });
    let req = fake.read_json().await;
    assert_eq!(req[1]["type"], "run-manual");
    assert_eq!(req[1]["data"], json!({"ids": [5]}));
    drop(fake);
    let out = call.await.unwrap();
    assert_eq!(out["jobs"][a.to_string()]["result"], "ok");
    assert_eq!(out["errors"]["5"], "worker 'fake' disconnected");
    w1.shutdown().await;
    m.shutdown().await;
}

#[tokio::test]
async fn master_send_signal_reaches_the_worker_running_the_job() {
    // Bug 10: jobd-master sent the signal to a random worker of the target.
    let db = test_db().await;
    let jobs = Jobs::new();
    let m = master("").await;
    let w1 = worker(&db, &jobs, &m, "w1", "any = 1\n", "").await;
    let w2 = worker(&db, &jobs, &m, "w2", "any = 1\n", "").await;
    let mut c = Client::connect(m.addr).await;
    registered(&mut c, 2).await;
    let id = db.insert("any", "waiting").await;
    jobs.script(id, "touch \"$d/started\"; sleep 300\n");
    c.ok("poke", json!({"targets": ["any"]})).await;
    jobs.wait_file("started").await;
    let r = c
        .ok("send-signal", json!({"jobs": [{"id": id, "signal": 15, "target": "any"}, {"id": 3, "signal": 15, "target": "none"}]}))
        .await;
    assert_eq!(r[id.to_string()], true, "{r}");
    assert_eq!(r["errors"]["3"], "worker serving target 'none' not found");
    let row = db.wait_status(id, "done").await;
    assert_eq!(row.sig.as_deref(), Some("SIGTERM"));
    assert_eq!(
        c.err(
            "send-signal",
            json!({"jobs": [{"id": 1, "signal": "TERM", "target": "any"}]})
        )
        .await,
        "'signal' must be integer"
    );
    w1.shutdown().await;
    w2.shutdown().await;
    m.shutdown().await;
}

#[tokio::test]
async fn register_without_targets_is_refused() {
    // Bug 19: jobd accepted it and then failed every run-manual/send-signal.
    let m = master("").await;
    let mut c = Client::connect(m.addr).await;
    assert_eq!(
        c.err("register-worker", json!({"name": "x"})).await,
        "missing required field targets"
    );
    assert_eq!(
        c.err("register-worker", json!({"targets": ["a"]})).await,
        "name is missing or invalid"
    );
    assert_eq!(
        c.err("poke", json!({})).await,
        "missing required field targets"
    );
    assert_eq!(
        c.err("nope", json!({})).await,
        "unknown request type: 'nope'"
    );
    let s = c
        .ok("run-manual", json!({"jobs": [{"id": 1, "target": "a"}]}))
        .await;
    assert_eq!(
        s,
        json!({"errors": {"1": "worker serving target 'a' not found"}})
    );
    m.shutdown().await;
}

#[tokio::test]
async fn silent_worker_is_dropped_and_status_does_not_wait_forever() {
    // Bug 13: jobd-master pinged without checking answers and waited forever on workers.
    let m = master("ping_interval = 1\nworker_timeout = 1\n").await;
    let mut fake = Client::connect(m.addr).await;
    fake.send_raw(b"[0,{\"no\":1,\"type\":\"register-worker\",\"data\":{\"name\":\"mute\",\"targets\":[\"f\"]}}]\x04").await;
    fake.read_frame().await.unwrap();
    let mut c = Client::connect(m.addr).await;
    let s = c.ok("status", json!({"poll_workers": true})).await;
    assert_eq!(s["workers"][0]["workerStatus"], Value::Null);
    assert_eq!(s["workers"][0]["workerStatusError"], "timed out");
    // It never answers pings: dropped after at most two intervals.
    registered(&mut c, 0).await;
    m.shutdown().await;
}

#[tokio::test]
async fn worker_answers_master_requests_on_the_registration_link_with_a_password() {
    let db = test_db().await;
    let jobs = Jobs::new();
    let m = master("password = pw\n").await;
    let w1 = worker(&db, &jobs, &m, "w1", "a = 1\n", "password = pw\n").await;
    let mut c = Client::connect(m.addr).await;
    c.send_raw(b"[0,{\"no\":1,\"type\":\"status\",\"data\":{\"poll_workers\":true},\"password\":\"pw\"}]\x04").await;
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut r = c.read_json().await;
    while r[1]["data"]["workers"].as_array().unwrap().is_empty() {
        assert!(Instant::now() < deadline);
        tokio::time::sleep(Duration::from_millis(20)).await;
        r = serde_json::json!([1, {"data": c.ok("status", json!({"poll_workers": true})).await}]);
    }
    assert_eq!(
        r[1]["data"]["workers"][0]["workerStatus"]["targets"]["a"]["concurrency"],
        1
    );
    w1.shutdown().await;
    m.shutdown().await;
}

#[tokio::test]
async fn worker_serves_master_requests_sent_before_the_registration_reply() {
    // jobd dropped requests that arrived on the link before its registration was answered.
    let db = test_db().await;
    let jobs = Jobs::new();
    let fake_master = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let mut cfg = worker_config(&db, &jobs, "a = 1\n", "password = pw\n");
    cfg.master = Some(("127.0.0.1".into(), fake_master.local_addr().unwrap().port()));
    let w = start_jobd(cfg).await.unwrap();
    let (stream, _) = fake_master.accept().await.unwrap();
    let mut link = Client::from_stream(stream);
    let reg = link.read_json().await;
    assert_eq!(reg[1]["type"], "register-worker");
    assert_eq!(
        reg[1]["password"], "pw",
        "the worker's own password goes to the master"
    );
    assert_eq!(reg[1]["data"], json!({"name": "w", "targets": ["a"]}));
    link.send_raw(b"[0,{\"no\":42,\"type\":\"status\",\"data\":{}}]\x04")
        .await;
    let r = link.read_json().await;
    assert_eq!(r[1]["no"], 42);
    assert_eq!(r[1]["data"]["targets"]["a"]["concurrency"], 1);
    // Only now the registration reply; pings get pongs.
    let no = reg[1]["no"].as_i64().unwrap();
    link.send_raw(format!("[1,{{\"no\":{no},\"data\":\"ok\"}}]\x04[2]\x04").as_bytes())
        .await;
    assert_eq!(link.read_frame().await.unwrap(), "[3]");
    w.shutdown().await;
}
