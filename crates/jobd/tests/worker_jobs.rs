//! Launcher and scheduling tests of the jobd worker against a real MariaDB: what lands in
//! the rows, exit codes, signals to process groups, output caps, concurrency, FIFO, pause,
//! runtime targets, and one test per fixed jobd bug (docs/jobd.md, "Differences from jobd") where feasible.

mod common;

use std::time::Duration;

use common::*;
use jobyard_jobd::start_jobd;
use serde_json::json;

#[tokio::test]
async fn poll_runs_waiting_rows_and_writes_every_column() {
    let db = test_db().await;
    let jobs = Jobs::new();
    let w = start_jobd(worker_config(&db, &jobs, "t1 = 1\n", ""))
        .await
        .unwrap();
    let ok = db.insert("t1", "waiting").await;
    let fail = db.insert("t1", "waiting").await;
    jobs.script(ok, "echo \"out $1 $JOBD_TEST\"; echo err >&2\n");
    jobs.script(fail, "exit 3\n");
    let mut c = Client::connect(w.addr).await;
    assert_eq!(c.ok("poll", json!({"targets": ["t1"]})).await, "ok");
    let r = db.wait_status(ok, "done").await;
    assert_eq!(r.result.as_deref(), Some("ok"));
    assert_eq!(r.return_code, Some(0));
    assert_eq!(r.sig, None);
    assert_eq!(
        r.stdout.as_deref(),
        Some(format!("out {ok} yes\n").as_str())
    );
    assert_eq!(r.stderr.as_deref(), Some("err\n"));
    assert!(r.time_started > 0 && r.time_finished >= r.time_started);
    let r = db.wait_status(fail, "done").await;
    assert_eq!(r.result.as_deref(), Some("fail"));
    assert_eq!(r.return_code, Some(3));
    w.shutdown().await;
}

#[tokio::test]
async fn launcher_sees_its_row_running() {
    // The example app's launcher refuses to run unless its row is `running`.
    let db = test_db().await;
    let jobs = Jobs::new();
    let w = start_jobd(worker_config(&db, &jobs, "t1 = 1\n", ""))
        .await
        .unwrap();
    let id = db.insert("t1", "manual").await;
    // The job asks the test (through a file) and waits; the test checks the row meanwhile.
    jobs.script(
        id,
        "touch \"$d/started\"; while [ ! -f \"$d/go\" ]; do sleep 0.01; done\n",
    );
    let mut c = Client::connect(w.addr).await;
    let call = tokio::spawn(async move { c.ok("run-manual", json!({"ids": [id]})).await });
    jobs.wait_file("started").await;
    let r = db.row(id).await.unwrap();
    assert_eq!(r.status, "running");
    assert_eq!(r.result.as_deref(), Some("ok"), "jobd pre-sets result=ok");
    std::fs::write(jobs.path("go"), "").unwrap();
    let out = call.await.unwrap();
    assert_eq!(out["jobs"][id.to_string()]["code"], 0);
    w.shutdown().await;
}

#[tokio::test]
async fn missing_launcher_fails_the_row_with_a_clear_error() {
    let db = test_db().await;
    let jobs = Jobs::new();
    let mut cfg = worker_config(&db, &jobs, "t1 = 1\n", "");
    cfg.launcher = "/nonexistent/launcher {id}".into();
    let w = start_jobd(cfg).await.unwrap();
    let id = db.insert("t1", "manual").await;
    let mut c = Client::connect(w.addr).await;
    let out = c.ok("run-manual", json!({"ids": [id]})).await;
    let j = &out["jobs"][id.to_string()];
    assert_eq!(j["result"], "fail");
    assert_eq!(j["code"], serde_json::Value::Null);
    assert!(
        j["stderr"]
            .as_str()
            .unwrap()
            .contains("cannot start launcher '/nonexistent/launcher'"),
        "{j}"
    );
    let r = db.wait_status(id, "done").await;
    assert_eq!(r.result.as_deref(), Some("fail"));
    assert_eq!(r.return_code, None);
    w.shutdown().await;
}

#[tokio::test]
async fn send_signal_reaches_the_whole_process_group() {
    // Bug 10/§3.3: jobd signalled only the launcher PID and left its children running.
    let db = test_db().await;
    let jobs = Jobs::new();
    let w = start_jobd(worker_config(&db, &jobs, "t1 = 1\n", ""))
        .await
        .unwrap();
    let id = db.insert("t1", "manual").await;
    jobs.script(
        id,
        "sleep 300 & echo $! > \"$d/child\"; touch \"$d/started\"; wait\n",
    );
    let mut c = Client::connect(w.addr).await;
    let addr = w.addr;
    let call = tokio::spawn(async move { c.ok("run-manual", json!({"ids": [id]})).await });
    jobs.wait_file("started").await;
    let child: i32 = std::fs::read_to_string(jobs.path("child"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let mut c2 = Client::connect(addr).await;
    let r = c2
        .ok(
            "send-signal",
            json!({"jobs": {id.to_string(): 15, "999999": 15}}),
        )
        .await;
    assert_eq!(r, json!({id.to_string(): true, "999999": false}));
    let out = call.await.unwrap();
    let j = &out["jobs"][id.to_string()];
    assert_eq!(j["result"], "fail");
    assert_eq!(j["signal"], "SIGTERM");
    assert_eq!(j["code"], serde_json::Value::Null);
    let row = db.wait_status(id, "done").await;
    assert_eq!(row.sig.as_deref(), Some("SIGTERM"));
    // The grandchild got it too (it is gone or a zombie, not sleeping on).
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let stat = std::fs::read_to_string(format!("/proc/{child}/stat")).unwrap_or_default();
        if stat.is_empty() || stat.contains(") Z ") {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "grandchild {child} still running"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    w.shutdown().await;
}

#[tokio::test]
async fn signal_names_are_accepted_by_the_worker() {
    let db = test_db().await;
    let jobs = Jobs::new();
    let w = start_jobd(worker_config(&db, &jobs, "t1 = 1\n", ""))
        .await
        .unwrap();
    let id = db.insert("t1", "manual").await;
    jobs.script(id, "touch \"$d/started\"; sleep 300\n");
    let mut c = Client::connect(w.addr).await;
    let call = tokio::spawn(async move { c.ok("run-manual", json!({"ids": [id]})).await });
    jobs.wait_file("started").await;
    let mut c2 = Client::connect(w.addr).await;
    let r = c2
        .ok("send-signal", json!({"jobs": {id.to_string(): "SIGNOPE"}}))
        .await;
    assert_eq!(r[id.to_string()], false);
    let r = c2
        .ok("send-signal", json!({"jobs": {id.to_string(): "SIGKILL"}}))
        .await;
    assert_eq!(r[id.to_string()], true);
    let out = call.await.unwrap();
    assert_eq!(out["jobs"][id.to_string()]["signal"], "SIGKILL");
    w.shutdown().await;
}

#[tokio::test]
async fn output_is_capped_at_max_output_buffer_and_decoded_once() {
    // Bugs 8 and 11: jobd ignored max_output_buffer and decoded each chunk separately.
    let db = test_db().await;
    let jobs = Jobs::new();
    let w = start_jobd(worker_config(
        &db,
        &jobs,
        "t1 = 1\n",
        "max_output_buffer = 16\n",
    ))
    .await
    .unwrap();
    let big = db.insert("t1", "manual").await;
    jobs.script(big, "head -c 100000 /dev/zero | tr '\\0' a; printf 'bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb' >&2\n");
    let utf = db.insert("t1", "manual").await;
    jobs.script(utf, "printf '\\303'; sleep 0.05; printf '\\251\\377'\n");
    let mut c = Client::connect(w.addr).await;
    let out = c.ok("run-manual", json!({"ids": [big, utf]})).await;
    assert_eq!(out["jobs"][big.to_string()]["stdout"], "a".repeat(16));
    assert_eq!(out["jobs"][big.to_string()]["stderr"], "b".repeat(16));
    assert_eq!(
        out["jobs"][utf.to_string()]["stdout"],
        "é\u{FFFD}",
        "a code point split across writes survives"
    );
    let r = db.wait_status(big, "done").await;
    assert_eq!(r.stdout.unwrap().len(), 16);
    w.shutdown().await;
}

#[tokio::test]
async fn concurrency_is_never_exceeded_and_jobs_start_fifo_by_id() {
    let db = test_db().await;
    let jobs = Jobs::new();
    let w = start_jobd(worker_config(&db, &jobs, "t1 = 2\n", ""))
        .await
        .unwrap();
    let mut ids = Vec::new();
    for _ in 0..8 {
        ids.push(db.insert("t1", "waiting").await);
    }
    for id in &ids {
        // Each job records its start and how many jobs run beside it (via lock files).
        jobs.script(
            *id,
            "echo $1 >> \"$d/order\"; touch \"$d/run-$1\"; ls \"$d\" | grep -c '^run-' >> \"$d/peak\"; sleep 0.05; rm \"$d/run-$1\"\n",
        );
    }
    let mut c = Client::connect(w.addr).await;
    c.ok("poll", json!({})).await;
    for id in &ids {
        db.wait_status(*id, "done").await;
    }
    let order: Vec<u64> = std::fs::read_to_string(jobs.path("order"))
        .unwrap()
        .lines()
        .map(|l| l.parse().unwrap())
        .collect();
    let mut sorted = order.clone();
    sorted.sort();
    assert_eq!(sorted, ids);
    // Starts of a target with 2 slots: each job starts no later than 2 places after its
    // id order (the two slots may swap), and never more than 2 run at once.
    for (pos, id) in order.iter().enumerate() {
        let rank = ids.iter().position(|x| x == id).unwrap();
        assert!(rank.abs_diff(pos) <= 1, "order {order:?}");
    }
    let peak = std::fs::read_to_string(jobs.path("peak")).unwrap();
    assert!(
        peak.lines().all(|n| n.trim().parse::<u32>().unwrap() <= 2),
        "peak {peak}"
    );
    w.shutdown().await;
}

#[tokio::test]
async fn fetch_takes_only_free_slots_no_hoarding() {
    // Bug 9: jobd accepted mysql_fetch_limit rows at once even with one free slot.
    let db = test_db().await;
    let jobs = Jobs::new();
    let w = start_jobd(worker_config(
        &db,
        &jobs,
        "t1 = 1\n",
        "mysql_fetch_limit = 3\n",
    ))
    .await
    .unwrap();
    let first = db.insert("t1", "waiting").await;
    for _ in 0..4 {
        db.insert("t1", "waiting").await;
    }
    jobs.script(
        first,
        "touch \"$d/started\"; while [ ! -f \"$d/go\" ]; do sleep 0.01; done\n",
    );
    let mut c = Client::connect(w.addr).await;
    c.ok("poll", json!({"targets": ["t1"]})).await;
    jobs.wait_file("started").await;
    assert_eq!(db.count("running").await, 1);
    assert_eq!(
        db.count("accepted").await,
        0,
        "nothing taken beyond the free slot"
    );
    assert_eq!(db.count("waiting").await, 4);
    std::fs::write(jobs.path("go"), "").unwrap();
    // The parked poll resumes as slots free up, until the table is drained.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while db.count("done").await < 5 {
        assert!(std::time::Instant::now() < deadline, "not drained");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    w.shutdown().await;
}

#[tokio::test]
async fn a_busy_target_whose_jobs_do_not_end_still_fetches_a_new_row() {
    // A fetch for a target with most of its slots busy waits for more slots to free up
    // (batching.rs), but not for ever: with 7 of 8 slots held by jobs that never end,
    // a new row must still be taken and run.
    let db = test_db().await;
    let jobs = Jobs::new();
    let w = start_jobd(worker_config(&db, &jobs, "t1 = 8\n", ""))
        .await
        .unwrap();
    let mut long = Vec::new();
    for _ in 0..7 {
        let id = db.insert("t1", "waiting").await;
        jobs.script(
            id,
            "touch \"$d/s-$1\"; while [ ! -f \"$d/go\" ]; do sleep 0.01; done\n",
        );
        long.push(id);
    }
    let mut c = Client::connect(w.addr).await;
    c.ok("poll", json!({"targets": ["t1"]})).await;
    for id in &long {
        jobs.wait_file(&format!("s-{id}")).await;
    }
    let late = db.insert("t1", "waiting").await;
    c.ok("poll", json!({"targets": ["t1"]})).await;
    let row = db.wait_status(late, "done").await;
    assert_eq!(row.result.as_deref(), Some("ok"));
    assert_eq!(db.count("running").await, 7, "the long jobs still run");
    std::fs::write(jobs.path("go"), "").unwrap();
    for id in long {
        db.wait_status(id, "done").await;
    }
    w.shutdown().await;
}

#[tokio::test]
async fn pause_really_stops_starting_jobs_and_continue_resumes() {
    // Bug 2: in jobd a poll or run-manual into a paused target ran the jobs anyway.
    let db = test_db().await;
    let jobs = Jobs::new();
    let w = start_jobd(worker_config(&db, &jobs, "t1 = 1\n", ""))
        .await
        .unwrap();
    let mut c = Client::connect(w.addr).await;
    c.ok("pause", json!({"targets": ["t1"]})).await;
    let bg = db.insert("t1", "waiting").await;
    let manual = db.insert("t1", "manual").await;
    c.ok("poll", json!({"targets": ["t1"]})).await;
    let mut c2 = Client::connect(w.addr).await;
    let call = tokio::spawn(async move { c2.ok("run-manual", json!({"ids": [manual]})).await });
    // Wait until the manual row has been accepted (queued), then check nothing started.
    db.wait_status(manual, "accepted").await;
    let st = c.ok("status", json!({})).await;
    assert_eq!(st["targets"]["t1"]["paused"], true);
    assert_eq!(
        db.row(bg).await.unwrap().status,
        "waiting",
        "a paused target takes no rows"
    );
    assert_eq!(
        db.row(manual).await.unwrap().status,
        "accepted",
        "queued, not started"
    );
    c.ok("continue", json!({"targets": ["t1"]})).await;
    let out = call.await.unwrap();
    assert_eq!(out["jobs"][manual.to_string()]["result"], "ok");
    db.wait_status(bg, "done").await;
    w.shutdown().await;
}

#[tokio::test]
async fn run_manual_reports_and_does_not_clobber_other_rows() {
    // Bug 5: jobd rewrote every non-manual row passed to run-manual to `ignored`.
    let db = test_db().await;
    let jobs = Jobs::new();
    let w = start_jobd(worker_config(&db, &jobs, "t1 = 2\n", ""))
        .await
        .unwrap();
    let ok = db.insert("t1", "manual").await;
    let fail = db.insert("t1", "manual").await;
    jobs.script(fail, "echo x; exit 2\n");
    let other = db.insert("nope", "manual").await;
    let done = db.insert("t1", "done").await;
    let waiting = db.insert("t1", "waiting").await;
    let mut c = Client::connect(w.addr).await;
    let out = c
        .ok(
            "run-manual",
            json!({"ids": [ok, fail, other, done, waiting, 999999, ok]}),
        )
        .await;
    assert_eq!(
        out["jobs"][ok.to_string()],
        json!({"result": "ok", "code": 0, "signal": null, "stdout": format!("id={ok}\n"), "stderr": ""})
    );
    assert_eq!(out["jobs"][fail.to_string()]["code"], 2);
    assert_eq!(
        out["errors"][other.to_string()],
        format!("target 'nope' not found (job id={other})")
    );
    assert_eq!(out["errors"][done.to_string()], "status = done != manual");
    assert_eq!(
        out["errors"][waiting.to_string()],
        "status = waiting != manual"
    );
    assert_eq!(out["errors"]["999999"], "job 999999 not found");
    assert_eq!(db.row(other).await.unwrap().status, "manual");
    assert_eq!(db.row(done).await.unwrap().status, "done");
    assert_eq!(db.row(waiting).await.unwrap().status, "waiting");
    // Only errors: only the `errors` key.
    let out = c.ok("run-manual", json!({"ids": [done]})).await;
    assert!(out.get("jobs").is_none(), "{out}");
    w.shutdown().await;
}

#[tokio::test]
async fn a_second_waiter_for_the_same_job_is_refused_and_waiters_do_not_leak() {
    let db = test_db().await;
    let jobs = Jobs::new();
    let w = start_jobd(worker_config(&db, &jobs, "t1 = 1\n", ""))
        .await
        .unwrap();
    let id = db.insert("t1", "manual").await;
    jobs.script(
        id,
        "touch \"$d/started\"; while [ ! -f \"$d/go\" ]; do sleep 0.01; done\n",
    );
    let mut c = Client::connect(w.addr).await;
    let call = tokio::spawn(async move { c.ok("run-manual", json!({"ids": [id]})).await });
    jobs.wait_file("started").await;
    let mut c2 = Client::connect(w.addr).await;
    assert_eq!(c2.ok("status", json!({})).await["jobPromisesCount"], 1);
    assert_eq!(
        c2.err("run-manual", json!({"ids": [id]})).await,
        format!("another client is already waiting for job {id}")
    );
    std::fs::write(jobs.path("go"), "").unwrap();
    call.await.unwrap();
    assert_eq!(c2.ok("status", json!({})).await["jobPromisesCount"], 0);
    w.shutdown().await;
}

#[tokio::test]
async fn targets_change_at_runtime() {
    let db = test_db().await;
    let jobs = Jobs::new();
    let w = start_jobd(worker_config(&db, &jobs, "t1 = 1\n", ""))
        .await
        .unwrap();
    let mut c = Client::connect(w.addr).await;
    let id = db.insert("new", "waiting").await;
    c.ok("add-target", json!({"target": "new", "concurrency": 1}))
        .await;
    c.ok("poll", json!({"targets": ["new"]})).await;
    db.wait_status(id, "done").await;
    // Resize: two jobs run side by side after raising the limit.
    let a = db.insert("new", "waiting").await;
    let b = db.insert("new", "waiting").await;
    for id in [a, b] {
        jobs.script(
            id,
            "touch \"$d/s-$1\"; while [ ! -f \"$d/go\" ]; do sleep 0.01; done\n",
        );
    }
    c.ok(
        "set-target-concurrency",
        json!({"target": "new", "concurrency": 2}),
    )
    .await;
    c.ok("poll", json!({"targets": ["new"]})).await;
    jobs.wait_file(&format!("s-{a}")).await;
    jobs.wait_file(&format!("s-{b}")).await;
    assert_eq!(
        c.err("remove-target", json!({"target": "new"})).await,
        "queue is not empty"
    );
    std::fs::write(jobs.path("go"), "").unwrap();
    db.wait_status(a, "done").await;
    db.wait_status(b, "done").await;
    // Removing waits for the slot to be released after the final write; retry briefly.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let r = c.request("remove-target", json!({"target": "new"})).await;
        if r["data"] == "ok" {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "{r}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(c.ok("status", json!({})).await["targets"]
        .get("new")
        .is_none());
    w.shutdown().await;
}

#[tokio::test]
async fn four_byte_output_in_a_utf8_table_does_not_strand_the_row() {
    // Bug 6: an emoji in a 3-byte utf8 column made jobd's final UPDATE fail: row stuck running.
    let db = test_db().await;
    let jobs = Jobs::new();
    let w = start_jobd(worker_config(&db, &jobs, "t1 = 1\n", ""))
        .await
        .unwrap();
    let id = db.insert("t1", "waiting").await;
    jobs.script(id, "printf 'ok \\360\\237\\230\\200 done'\n");
    let mut c = Client::connect(w.addr).await;
    c.ok("poll", json!({})).await;
    let r = db.wait_status(id, "done").await;
    assert_eq!(r.result.as_deref(), Some("ok"));
    assert_eq!(r.stdout.as_deref(), Some("ok \u{FFFD} done"));
    w.shutdown().await;
}

#[tokio::test]
async fn output_too_big_for_the_column_is_truncated_not_lost() {
    let db = test_db().await;
    db.exec("ALTER TABLE jobs MODIFY stdout text").await;
    let jobs = Jobs::new();
    let w = start_jobd(worker_config(&db, &jobs, "t1 = 1\n", ""))
        .await
        .unwrap();
    let id = db.insert("t1", "waiting").await;
    jobs.script(id, "head -c 100000 /dev/zero | tr '\\0' a\n");
    let mut c = Client::connect(w.addr).await;
    c.ok("poll", json!({})).await;
    let r = db.wait_status(id, "done").await;
    let n = r.stdout.unwrap().len();
    assert!(n > 0 && n <= 65535, "{n}");
    w.shutdown().await;
}

#[tokio::test]
async fn rows_deleted_meanwhile_are_tolerated() {
    let db = test_db().await;
    let jobs = Jobs::new();
    let w = start_jobd(worker_config(&db, &jobs, "t1 = 1\n", ""))
        .await
        .unwrap();
    let first = db.insert("t1", "waiting").await;
    jobs.script(
        first,
        "touch \"$d/started\"; while [ ! -f \"$d/go\" ]; do sleep 0.01; done\n",
    );
    let mut c = Client::connect(w.addr).await;
    c.ok("poll", json!({})).await;
    jobs.wait_file("started").await;
    // The running row is deleted by the app's cleanup; the job's end must not fail.
    db.exec(&format!("DELETE FROM jobs WHERE id={first}")).await;
    std::fs::write(jobs.path("go"), "").unwrap();
    let next = db.insert("t1", "waiting").await;
    c.ok("poll", json!({})).await;
    db.wait_status(next, "done").await;
    assert!(db.row(first).await.is_none(), "never re-inserted");
    w.shutdown().await;
}

#[tokio::test]
async fn restart_reclaims_accepted_and_running_rows() {
    // Bug 1: after a crash jobd left rows accepted/running forever.
    let db = test_db().await;
    let jobs = Jobs::new();
    let acc = db.insert("t1", "accepted").await;
    let run = db.insert("t1", "running").await;
    let foreign = db.insert("other", "running").await;
    let w = start_jobd(worker_config(&db, &jobs, "t1 = 1\n", ""))
        .await
        .unwrap();
    let r = db.row(run).await.unwrap();
    assert_eq!(r.status, "done");
    assert_eq!(r.result.as_deref(), Some("fail"));
    assert!(r
        .stderr
        .unwrap()
        .contains("worker stopped while this job was running"));
    assert_eq!(db.row(acc).await.unwrap().status, "waiting");
    assert_eq!(
        db.row(foreign).await.unwrap().status,
        "running",
        "not this worker's target"
    );
    let mut c = Client::connect(w.addr).await;
    c.ok("poll", json!({})).await;
    db.wait_status(acc, "done").await;
    w.shutdown().await;
}

#[tokio::test]
async fn graceful_shutdown_signals_late_jobs_and_hands_back_queued_rows() {
    let db = test_db().await;
    let jobs = Jobs::new();
    let w = start_jobd(worker_config(
        &db,
        &jobs,
        "t1 = 1\n",
        "shutdown_timeout = 0\n",
    ))
    .await
    .unwrap();
    let long = db.insert("t1", "manual").await;
    let queued = db.insert("t1", "manual").await;
    jobs.script(long, "touch \"$d/started\"; sleep 300\n");
    let mut c = Client::connect(w.addr).await;
    let call = tokio::spawn(async move {
        c.request("run-manual", json!({"ids": [long, queued]}))
            .await
    });
    jobs.wait_file("started").await;
    db.wait_status(queued, "accepted").await;
    w.shutdown().await;
    let r = db.row(long).await.unwrap();
    assert_eq!(r.status, "done");
    assert_eq!(r.sig.as_deref(), Some("SIGTERM"));
    assert_eq!(
        db.row(queued).await.unwrap().status,
        "manual",
        "handed back as it was"
    );
    let reply = call.await.unwrap();
    assert_eq!(
        reply["data"]["errors"][queued.to_string()],
        "worker is shutting down"
    );
}

#[tokio::test]
async fn database_errors_are_reported_not_swallowed() {
    // Bug 6 (first half): a table missing a column gives the caller a clear error.
    let db = test_db().await;
    db.exec("ALTER TABLE jobs DROP COLUMN target").await;
    let jobs = Jobs::new();
    let w = start_jobd(worker_config(&db, &jobs, "t1 = 1\n", ""))
        .await
        .unwrap();
    let mut c = Client::connect(w.addr).await;
    let e = c.err("run-manual", json!({"ids": [1]})).await;
    assert!(
        e.starts_with("database error:") && e.contains("target"),
        "{e}"
    );
    // The daemon keeps serving.
    assert!(c.ok("status", json!({})).await.is_object());
    w.shutdown().await;
}

#[tokio::test]
async fn database_that_goes_away_and_comes_back() {
    let mut own = PrivateMariadb::start();
    let db = own.test_db().await;
    let jobs = Jobs::new();
    let w = start_jobd(worker_config(&db, &jobs, "t1 = 1\n", ""))
        .await
        .unwrap();
    let running = db.insert("t1", "waiting").await;
    let later = db.insert("t1", "waiting").await;
    jobs.script(
        running,
        "touch \"$d/started\"; while [ ! -f \"$d/go\" ]; do sleep 0.01; done; echo end\n",
    );
    let mut c = Client::connect(w.addr).await;
    c.ok("poll", json!({})).await;
    jobs.wait_file("started").await;
    // The database goes away while a job runs and while a poll is pending: the job's end
    // and the fetch are retried, and the daemon keeps answering meanwhile.
    own.stop();
    std::fs::write(jobs.path("go"), "").unwrap();
    c.ok("poll", json!({"targets": ["t1"]})).await;
    assert!(c.ok("status", json!({})).await.is_object());
    own.resume();
    let r = db.wait_status(running, "done").await;
    assert_eq!(r.stdout.as_deref(), Some("end\n"));
    db.wait_status(later, "done").await;
    w.shutdown().await;
}

#[tokio::test]
async fn jobs_ending_together_are_all_written_even_when_one_row_rejects_its_output() {
    // The final UPDATEs of jobs that end together go in one transaction; a row the column
    // rejects (4-byte output in a 3-byte utf8 table) fails that transaction, and every row
    // must still be written, the others unchanged, that one sanitised.
    let db = test_db().await;
    let jobs = Jobs::new();
    let w = start_jobd(worker_config(&db, &jobs, "t1 = 4\n", ""))
        .await
        .unwrap();
    let ids: Vec<u64> = {
        let mut v = Vec::new();
        for _ in 0..4 {
            v.push(db.insert("t1", "waiting").await);
        }
        v
    };
    let go = jobs.path("go");
    for (i, id) in ids.iter().enumerate() {
        let out = if i == 2 {
            "printf 'x \\360\\237\\230\\200'".to_string()
        } else {
            format!("printf 'job {id}'")
        };
        jobs.script(
            *id,
            &format!(
                "touch {}-{id}\nwhile [ ! -f {} ]; do sleep 0.01; done\n{out}\n",
                jobs.path("started").display(),
                go.display()
            ),
        );
    }
    let mut c = Client::connect(w.addr).await;
    c.ok("poll", json!({"targets": ["t1"]})).await;
    for id in &ids {
        jobs.wait_file(&format!("started-{id}")).await;
    }
    std::fs::write(&go, b"").unwrap();
    for (i, id) in ids.iter().enumerate() {
        let r = db.wait_status(*id, "done").await;
        assert_eq!(r.result.as_deref(), Some("ok"), "row {id}");
        let want = if i == 2 {
            "x \u{FFFD}".to_string()
        } else {
            format!("job {id}")
        };
        assert_eq!(r.stdout.as_deref(), Some(want.as_str()), "row {id}");
    }
    w.shutdown().await;
}

#[tokio::test]
async fn a_batched_done_write_stores_each_rows_own_end_and_skips_a_deleted_row() {
    // The writer stores the ends of jobs that finish together with one UPDATE (a CASE per
    // column). Every row must get its own values, NULLs included, and a row the user
    // deleted meanwhile must neither fail the batch nor come back.
    use jobyard_jobd::launch::Outcome;

    let db = test_db().await;
    let ids: Vec<u64> = {
        let mut v = Vec::new();
        for _ in 0..4 {
            v.push(db.insert("t1", "running").await);
        }
        v
    };
    db.exec(&format!("DELETE FROM jobs WHERE id={}", ids[1]))
        .await;
    let store = store_of(&db);
    let outcome = |code: Option<i32>, signal: Option<i32>, out: &str, err: &str| Outcome {
        code,
        signal,
        stdout: out.into(),
        stderr: err.into(),
    };
    let ends = [
        outcome(Some(0), None, "first\n", ""),
        outcome(Some(0), None, "deleted", ""),
        outcome(None, Some(15), "", "killed"),
        outcome(Some(3), None, "it's \\ 'quoted'", "é"),
    ];
    let batch: Vec<(u64, &Outcome)> = ids.iter().copied().zip(ends.iter()).collect();
    store.finish_batch(&batch).await.unwrap();

    assert!(db.row(ids[1]).await.is_none(), "a deleted row came back");
    let r = db.row(ids[0]).await.unwrap();
    assert_eq!(
        (
            r.status.as_str(),
            r.result.as_deref(),
            r.return_code,
            r.sig.as_deref()
        ),
        ("done", Some("ok"), Some(0), None)
    );
    assert_eq!(
        (r.stdout.as_deref(), r.stderr.as_deref()),
        (Some("first\n"), Some(""))
    );
    assert!(r.time_finished > 0);
    let r = db.row(ids[2]).await.unwrap();
    assert_eq!(
        (
            r.status.as_str(),
            r.result.as_deref(),
            r.return_code,
            r.sig.as_deref()
        ),
        ("done", Some("fail"), None, Some("SIGTERM"))
    );
    assert_eq!(r.stderr.as_deref(), Some("killed"));
    let r = db.row(ids[3]).await.unwrap();
    assert_eq!(
        (r.status.as_str(), r.result.as_deref(), r.return_code),
        ("done", Some("fail"), Some(3))
    );
    assert_eq!(
        (r.stdout.as_deref(), r.stderr.as_deref()),
        (Some("it's \\ 'quoted'"), Some("é"))
    );
    store.close().await;
}

#[tokio::test]
async fn one_fetch_serves_several_targets_whatever_their_names() {
    // A fetch sends every target's SELECT in one batch, with the names as literals: names
    // with quotes, backslashes or non-ASCII letters must match their rows exactly (and
    // case-insensitively, as the column's collation compares), and each row must be
    // credited to its own target.
    let db = test_db().await;
    let jobs = Jobs::new();
    let w = start_jobd(worker_config(&db, &jobs, "plain = 2\n", ""))
        .await
        .unwrap();
    let names = ["it's", "back\\slash", "Zürich"];
    let mut c = Client::connect(w.addr).await;
    for n in names {
        c.ok("add-target", json!({"target": n, "concurrency": 2}))
            .await;
    }
    let mut rows = Vec::new();
    for n in names.iter().chain(["plain", "zÜRICH"].iter()) {
        rows.push((n.to_string(), db.insert(n, "waiting").await));
    }
    let other = db.insert("it", "waiting").await;
    let mut all: Vec<&str> = names.to_vec();
    all.push("plain");
    c.ok("poll", json!({ "targets": all })).await;
    for (n, id) in &rows {
        let r = db.wait_status(*id, "done").await;
        assert_eq!(r.result.as_deref(), Some("ok"), "{n}");
        assert_eq!(r.stdout.as_deref(), Some(format!("id={id}\n").as_str()));
    }
    assert_eq!(
        db.row(other).await.unwrap().status,
        "waiting",
        "a row of a target nobody polled was taken"
    );
    w.shutdown().await;
}

#[tokio::test]
async fn ends_sharing_columns_keep_their_own_values_when_carried() {
    // Carried ends that agree on a column have it written once for all rows; the column
    // they differ in (stdout here) must still reach each row as its own.
    use jobyard_jobd::launch::Outcome;

    let db = test_db().await;
    let ended = [
        db.insert("t1", "running").await,
        db.insert("t1", "running").await,
        db.insert("t1", "running").await,
    ];
    let store = store_of(&db);
    let outs: Vec<Outcome> = ["a", "", "c"]
        .iter()
        .map(|out| Outcome {
            code: Some(0),
            signal: None,
            stdout: out.to_string(),
            stderr: String::new(),
        })
        .collect();
    let ends: Vec<(u64, &Outcome)> = ended.iter().copied().zip(&outs).collect();
    let open = store.open_fetch(&[("t1".to_string(), 1)]).await.unwrap();
    store.commit_fetch(open, &ends).await.unwrap();
    for (id, want) in ended.iter().zip(["a", "", "c"]) {
        let r = db.row(*id).await.unwrap();
        assert_eq!(
            (r.status.as_str(), r.result.as_deref(), r.return_code, r.sig),
            ("done", Some("ok"), Some(0), None)
        );
        assert_eq!(r.stdout.as_deref(), Some(want));
        assert_eq!(r.stderr.as_deref(), Some(""));
    }
}

#[tokio::test]
async fn a_polled_row_is_written_running_in_one_update() {
    // `accepted` and `running` of a polled row would be committed together, so no reader
    // ever saw `accepted`; the fetch writes `running` directly (one statement less per
    // fetch). A trigger sees every UPDATE, so it tells the difference.
    let db = test_db().await;
    let jobs = Jobs::new();
    sqlx::raw_sql(
        "CREATE TABLE status_log (n INT AUTO_INCREMENT PRIMARY KEY, id INT, old_status \
         VARCHAR(16), new_status VARCHAR(16)); \
         CREATE TRIGGER jobs_status AFTER UPDATE ON jobs FOR EACH ROW \
         INSERT INTO status_log (id, old_status, new_status) VALUES (NEW.id, OLD.status, NEW.status)",
    )
    .execute(&db.pool)
    .await
    .unwrap();
    let w = start_jobd(worker_config(&db, &jobs, "t1 = 1\n", ""))
        .await
        .unwrap();
    let id = db.insert("t1", "waiting").await;
    let mut c = Client::connect(w.addr).await;
    c.ok("poll", json!({"targets": ["t1"]})).await;
    db.wait_status(id, "done").await;
    w.shutdown().await;
    let steps: Vec<(String, String)> =
        sqlx::query_as("SELECT old_status, new_status FROM status_log WHERE id=? ORDER BY n")
            .bind(id)
            .fetch_all(&db.pool)
            .await
            .unwrap();
    let steps: Vec<(&str, &str)> = steps
        .iter()
        .map(|(a, b)| (a.as_str(), b.as_str()))
        .collect();
    assert_eq!(steps, [("waiting", "running"), ("running", "done")]);
}

#[tokio::test]
async fn a_fetch_commits_the_ends_it_carries_with_the_rows_it_takes() {
    // Jobs that end while a fetch is open are written `done` in that fetch's transaction.
    // Each row must get its own end, NULLs and quotes included, in the same commit that
    // marks the fetched rows `running`; a fetch that fails writes none of them.
    use jobyard_jobd::launch::Outcome;

    let db = test_db().await;
    let ended = [
        db.insert("t1", "running").await,
        db.insert("t1", "running").await,
    ];
    let waiting = db.insert("t1", "waiting").await;
    let store = store_of(&db);
    let ok = Outcome {
        code: Some(0),
        signal: None,
        stdout: "it's \\ 'quoted' é\n".into(),
        stderr: String::new(),
    };
    let killed = Outcome {
        code: None,
        signal: Some(libc::SIGKILL),
        stdout: String::new(),
        stderr: "killed".into(),
    };
    let wants = [("t1".to_string(), 5)];
    let open = store.open_fetch(&wants).await.unwrap();
    assert_eq!(db.row(waiting).await.unwrap().status, "waiting");
    let ends = [(ended[0], &ok), (ended[1], &killed)];
    let claimed = store.commit_fetch(open, &ends).await.unwrap();

    assert_eq!(claimed.iter().map(|c| c.id).collect::<Vec<_>>(), [waiting]);
    assert_eq!(db.row(waiting).await.unwrap().status, "running");
    let r = db.row(ended[0]).await.unwrap();
    assert_eq!(
        (r.status.as_str(), r.result.as_deref(), r.return_code, r.sig),
        ("done", Some("ok"), Some(0), None)
    );
    assert_eq!(r.stdout.as_deref(), Some("it's \\ 'quoted' é\n"));
    assert_eq!(r.stderr.as_deref(), Some(""));
    assert!(r.time_finished > 0);
    let r = db.row(ended[1]).await.unwrap();
    assert_eq!(
        (r.status.as_str(), r.result.as_deref(), r.return_code),
        ("done", Some("fail"), None)
    );
    assert_eq!(r.sig.as_deref(), Some("SIGKILL"));
    assert_eq!(r.stderr.as_deref(), Some("killed"));

    // A carried end the column refuses (4-byte text in the 3-byte utf8 table) fails the
    // whole fetch: the row it took stays `waiting`, the other carried end is not written.
    let other = db.insert("t1", "running").await;
    let next = db.insert("t1", "waiting").await;
    let emoji = Outcome {
        code: Some(0),
        signal: None,
        stdout: "\u{1F600}".into(),
        stderr: String::new(),
    };
    let open = store.open_fetch(&wants).await.unwrap();
    let ends = [(other, &ok), (ended[0], &emoji)];
    assert!(store.commit_fetch(open, &ends).await.is_err());
    assert_eq!(db.row(next).await.unwrap().status, "waiting");
    assert_eq!(db.row(other).await.unwrap().status, "running");
    store.close().await;
}

#[tokio::test]
async fn a_fetch_dropped_before_its_commit_leaves_no_row_locked() {
    // Fetches run on a connection of their own, kept between fetches. A fetch dropped
    // between its two round trips (a cancelled task) must not leave its transaction open
    // there: the rows it locked would be skipped (SKIP LOCKED) by every other worker until
    // this one fetched again.

    let db = test_db().await;
    let row = db.insert("t1", "waiting").await;
    let (mine, other) = (store_of(&db), store_of(&db));
    let wants = [("t1".to_string(), 1)];
    let open = mine.open_fetch(&wants).await.unwrap();
    drop(open);
    // The server rolls back when it sees the connection close, a moment later: look again
    // until then (for ever, were the transaction left open).
    let claimed = claim_within_10s(&other, &wants).await;
    assert_eq!(claimed.iter().map(|c| c.id).collect::<Vec<_>>(), [row]);
    assert_eq!(db.row(row).await.unwrap().status, "running");
    mine.close().await;
    other.close().await;
}

#[tokio::test]
async fn a_fetch_whose_commit_fails_leaves_no_row_locked() {
    // The same, for a fetch that fails in its second round trip (here: a carried end the
    // column refuses, after the SELECT locked the waiting row and the UPDATEs wrote it):
    // its transaction must not stay open on the fetch connection. It is rolled back before
    // the failed commit returns, so the very next fetch (the worker refetches at once after
    // a refused end) finds the row unlocked: no retry here.
    use jobyard_jobd::launch::Outcome;

    let db = test_db().await;
    let ended = db.insert("t1", "running").await;
    let row = db.insert("t1", "waiting").await;
    let (mine, other) = (store_of(&db), store_of(&db));
    let emoji = Outcome {
        code: Some(0),
        signal: None,
        stdout: "\u{1F600}".into(),
        stderr: String::new(),
    };
    let wants = [("t1".to_string(), 1)];
    let open = mine.open_fetch(&wants).await.unwrap();
    assert!(mine.commit_fetch(open, &[(ended, &emoji)]).await.is_err());
    let open = other.open_fetch(&wants).await.unwrap();
    let claimed = other.commit_fetch(open, &[]).await.unwrap();
    assert_eq!(claimed.iter().map(|c| c.id).collect::<Vec<_>>(), [row]);
    assert_eq!(db.row(ended).await.unwrap().status, "running");
    mine.close().await;
    other.close().await;
}

#[tokio::test]
async fn a_kept_connection_the_server_closed_while_idle_is_replaced_before_use() {
    // Fetches and done writes keep a connection of their own, without the pool's ping
    // on every use. One left idle may have been closed by the server meanwhile
    // (`wait_timeout`, a restart): it is checked before its next use after an idle spell
    // and replaced, rather than failing the fetch that uses it.
    use jobyard_jobd::store::dedicated::Dedicated;
    use sqlx::mysql::MySqlConnectOptions;

    let db = test_db().await;
    let opts = MySqlConnectOptions::new()
        .host("127.0.0.1")
        .port(db.port)
        .username("root")
        .database(&db.name);
    let kept = Dedicated::new(opts).with_idle_check(Duration::ZERO);
    let id: u64 = {
        let mut held = kept.lock().await.unwrap();
        sqlx::query_scalar("SELECT CONNECTION_ID()")
            .fetch_one(held.conn())
            .await
            .unwrap()
    };
    db.exec(&format!("KILL CONNECTION {id}")).await;
    let mut held = kept.lock().await.unwrap();
    let now: u64 = sqlx::query_scalar("SELECT CONNECTION_ID()")
        .fetch_one(held.conn())
        .await
        .unwrap();
    assert_ne!(now, id, "a new connection");
    drop(held);
    kept.close().await;
}

#[tokio::test]
async fn an_end_refused_in_a_fetch_is_sanitised_and_the_next_row_still_runs() {
    // A job that ends while another runs has its end written in the commit of the fetch
    // that refills its slot. If the column refuses it (4-byte output in a 3-byte utf8
    // table), the end must still be stored (sanitised, by the done writer), the row that
    // fetch would have taken must still run without another poll, and the other job's
    // end must be stored as usual.
    let db = test_db().await;
    let jobs = Jobs::new();
    let w = start_jobd(worker_config(&db, &jobs, "t1 = 2\n", ""))
        .await
        .unwrap();
    let refused = db.insert("t1", "waiting").await;
    let long = db.insert("t1", "waiting").await;
    let next = db.insert("t1", "waiting").await;
    let go = jobs.path("go");
    jobs.script(refused, "printf 'a \\360\\237\\230\\200'\n");
    jobs.script(
        long,
        &format!(
            "while [ ! -f {} ]; do sleep 0.01; done\nprintf long\n",
            go.display()
        ),
    );
    jobs.script(next, "printf next\n");
    let mut c = Client::connect(w.addr).await;
    c.ok("poll", json!({"targets": ["t1"]})).await;
    let r = db.wait_status(refused, "done").await;
    assert_eq!(r.stdout.as_deref(), Some("a \u{FFFD}"));
    let r = db.wait_status(next, "done").await;
    assert_eq!(r.stdout.as_deref(), Some("next"));
    std::fs::write(&go, b"").unwrap();
    let r = db.wait_status(long, "done").await;
    assert_eq!(r.stdout.as_deref(), Some("long"));
    w.shutdown().await;
}

/// A store on the test database, as the worker opens it (pool of 2).
fn store_of(db: &TestDb) -> jobyard_jobd::store::Store {
    jobyard_jobd::store::Store::connect(
        &jobyard_jobd::config::MysqlConfig {
            host: "127.0.0.1".into(),
            port: db.port,
            user: "root".into(),
            password: String::new(),
            database: db.name.clone(),
            table: "jobs".into(),
        },
        2,
    )
}

/// Fetches with `store` until it claims something or 10 s pass: a lock another
/// connection's rollback releases goes a moment after that connection closes.
async fn claim_within_10s(
    store: &jobyard_jobd::store::Store,
    wants: &[(String, u64)],
) -> Vec<jobyard_jobd::store::Claimed> {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let open = store.open_fetch(wants).await.unwrap();
        let claimed = store.commit_fetch(open, &[]).await.unwrap();
        if !claimed.is_empty() || std::time::Instant::now() > deadline {
            return claimed;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
