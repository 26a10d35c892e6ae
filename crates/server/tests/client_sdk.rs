//! The Rust client SDK (crates/client) end to end against the real binary's HTTP listener:
//! puts, outcomes, worker pools with several leases at once, heartbeats, retries, failures
//! and a graceful stop.

mod common;

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use common::{free_port, Server};
use jobyard_client::{Client, Failure, Job, Outcome, PutOptions};

/// Generous bound on waits: the tests run beside other builds.
const WAIT: Duration = Duration::from_secs(30);

/// A server with its HTTP listener on a free port; returns it and the client.
fn start() -> (Server, Client, tempfile::TempDir) {
    let (server, client, data, _) = start_with_port();
    (server, client, data)
}

/// [`start`], and the HTTP listener's port.
fn start_with_port() -> (Server, Client, tempfile::TempDir, u16) {
    let data = tempfile::tempdir().expect("tempdir");
    let dir = data.path().to_str().expect("utf-8").to_string();
    let http_port = Arc::new(Mutex::new(0u16));
    let chosen = http_port.clone();
    let server = Server::start(move |port| {
        let http = free_port();
        *chosen.lock().unwrap() = http;
        vec![
            "serve".into(),
            "--data-dir".into(),
            dir.clone(),
            "--beanstalk-listen".into(),
            format!("127.0.0.1:{port}"),
            "--http-listen".into(),
            format!("127.0.0.1:{http}"),
        ]
    });
    let port = *http_port.lock().unwrap();
    let client = Client::new(&format!("http://127.0.0.1:{port}")).expect("client");
    (server, client, data, port)
}

/// How many times the server has served the `http` command `command` (from `/metrics`).
fn http_count(port: u16, command: &str) -> u64 {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).expect("connect");
    stream
        .write_all(b"GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
        .expect("send");
    let mut text = String::new();
    stream.read_to_string(&mut text).expect("read");
    let label = format!("command=\"{command}\"");
    text.lines()
        .filter(|l| l.starts_with("jobyard_commands_total{"))
        .filter(|l| l.contains("protocol=\"http\"") && l.contains(&label))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>() as u64
}

/// Starts waiting for `id`'s outcome and returns once the server counts the waiter:
/// outcomes reach only those waiting when the job ends.
async fn waiter(client: &Client, id: u64) -> tokio::task::JoinHandle<Outcome> {
    let c = client.clone();
    let handle = tokio::spawn(async move { c.wait(id, WAIT).await.expect("wait") });
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let job = client.job(id).await.unwrap().expect("job exists");
        if job["watchers"].as_u64() >= Some(1) {
            return handle;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "waiter never registered"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_put_is_done_by_a_worker_and_its_result_reaches_the_waiter() {
    let (_server, client, _data) = start();
    let id = client.put("emails", "hello").await.unwrap();
    let waiting = waiter(&client, id).await;
    let workers = client
        .worker(&["emails"])
        .poll_wait(Duration::from_millis(200))
        .start(|job: Job| async move {
            let mut out = b"sent:".to_vec();
            out.extend_from_slice(&job.body);
            Ok::<_, Failure>(Bytes::from(out))
        });
    let outcome = waiting.await.unwrap();
    workers.stop().await;
    assert_eq!(outcome, Outcome::Ok(Bytes::from_static(b"sent:hello")));
    assert_eq!(
        client.job(id).await.unwrap(),
        None,
        "a completed job is gone"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn binary_bodies_attributes_and_options_travel_intact() {
    let (_server, client, _data) = start();
    let body = vec![0u8, 255, 128, 10];
    let options = PutOptions {
        priority: Some(7),
        ttr: Some(30),
        attributes: Some(serde_json::json!({"user": 42})),
        ..PutOptions::default()
    };
    let id = client.put_with("bin", &body, &options).await.unwrap();
    let described = client.job(id).await.unwrap().expect("job exists");
    assert_eq!(described["priority"], 7);
    assert_eq!(described["ttr"], 30);
    let waiting = waiter(&client, id).await;
    let seen = Arc::new(Mutex::new(None));
    let record = seen.clone();
    let workers = client
        .worker(&["bin"])
        .poll_wait(Duration::from_millis(200))
        .start(move |job: Job| {
            *record.lock().unwrap() = Some((job.body.clone(), job.attributes.clone(), job.token));
            async move { Ok::<_, Failure>(Bytes::from_static(&[0xfe, 0x01])) }
        });
    let outcome = waiting.await.unwrap();
    workers.stop().await;
    assert_eq!(outcome, Outcome::Ok(Bytes::from_static(&[0xfe, 0x01])));
    let (got_body, attrs, token) = seen.lock().unwrap().clone().expect("handler ran");
    assert_eq!(&got_body[..], &body[..]);
    assert_eq!(attrs, serde_json::json!({"user": 42}));
    assert_eq!(token, 1, "first lease carries token 1");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn handler_errors_fail_the_job_and_retries_run_it_again() {
    let (_server, client, _data) = start();
    let failing = client.put("flaky", "fail me").await.unwrap();
    let retried = client.put("flaky", "retry me").await.unwrap();
    let tries = Arc::new(AtomicU32::new(0));
    let counter = tries.clone();
    let fail_wait = waiter(&client, failing).await;
    let retry_wait = waiter(&client, retried).await;
    let workers = client
        .worker(&["flaky"])
        .poll_wait(Duration::from_millis(200))
        .start(move |job: Job| {
            let counter = counter.clone();
            async move {
                match &job.body[..] {
                    b"fail me" => Err(Failure::Fail("no such mailbox".into())),
                    _ if counter.fetch_add(1, Ordering::SeqCst) == 0 => {
                        Err(Failure::Retry(Duration::ZERO))
                    }
                    _ => Ok(Bytes::from(format!("token {}", job.token))),
                }
            }
        });
    let retry_outcome = retry_wait.await.unwrap();
    let fail_outcome = fail_wait.await.unwrap();
    let summary = workers.stop().await;
    let (failed, retried_count) = (summary.failed, summary.retried);
    assert_eq!(
        fail_outcome,
        Outcome::Failed(Some("no such mailbox".into()))
    );
    assert_eq!(retry_outcome, Outcome::Ok(Bytes::from_static(b"token 2")));
    assert_eq!((failed, retried_count), (1, 1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pool_holds_as_many_leases_as_its_concurrency() {
    let (_server, client, _data) = start();
    // Four handlers that each wait for all four to be running: this only completes if
    // the pool really leases four jobs at once.
    let barrier = Arc::new(tokio::sync::Barrier::new(4));
    let mut waits = Vec::new();
    for i in 0..4 {
        let id = client.put("wide", format!("{i}")).await.unwrap();
        waits.push(waiter(&client, id).await);
    }
    let b = barrier.clone();
    let workers = client
        .worker(&["wide"])
        .concurrency(4)
        .poll_wait(Duration::from_millis(200))
        .start(move |job: Job| {
            let b = b.clone();
            async move {
                b.wait().await;
                Ok::<_, Failure>(job.body)
            }
        });
    for w in waits {
        let outcome = w.await.unwrap();
        assert!(matches!(outcome, Outcome::Ok(_)), "{outcome:?}");
    }
    assert_eq!(workers.stop().await.completed, 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn heartbeats_keep_a_short_lease_alive_through_a_long_handler() {
    let (_server, client, _data) = start();
    let id = client.put("slow", "x").await.unwrap();
    let waiting = waiter(&client, id).await;
    let workers = client
        .worker(&["slow"])
        .lease(Duration::from_millis(300))
        .poll_wait(Duration::from_millis(200))
        .start(|job: Job| async move {
            tokio::time::sleep(Duration::from_millis(1500)).await;
            Ok::<_, Failure>(job.body)
        });
    let outcome = waiting.await.unwrap();
    let lost = workers.stop().await.lost;
    assert_eq!(outcome, Outcome::Ok(Bytes::from_static(b"x")));
    assert_eq!(lost, 0, "the lease never ran out");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stop_lets_a_running_handler_finish_and_report() {
    let (_server, client, _data) = start();
    let id = client.put("graceful", "work").await.unwrap();
    let started = Arc::new(tokio::sync::Notify::new());
    let signal = started.clone();
    let workers = client
        .worker(&["graceful"])
        .poll_wait(Duration::from_millis(200))
        .start(move |job: Job| {
            let signal = signal.clone();
            async move {
                signal.notify_one();
                tokio::time::sleep(Duration::from_millis(500)).await;
                Ok::<_, Failure>(job.body)
            }
        });
    tokio::time::timeout(WAIT, started.notified())
        .await
        .expect("the handler started");
    let summary = workers.stop().await;
    // The job completed before stop returned: it is gone, not back in the queue.
    assert_eq!(summary.completed, 1);
    assert_eq!(client.job(id).await.unwrap(), None);
    assert_eq!(client.queue("graceful").await.unwrap()["ready"], 0);
    assert_eq!(
        client.health().await.unwrap()["workers"],
        0,
        "sessions ended"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refusals_carry_the_servers_code() {
    let (_server, client, _data) = start();
    let err = client.put("bad name", "x").await.unwrap_err();
    assert_eq!(err.code(), Some("bad_queue_name"), "{err}");
    assert!(!err.is_transient());
    assert_eq!(client.job(999_999).await.unwrap(), None);
    assert!(!client.delete(999_999).await.unwrap());
    let unreachable = Client::new(&format!("http://127.0.0.1:{}", free_port())).unwrap();
    let err = unreachable.health().await.unwrap_err();
    assert!(err.is_transient(), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flow_runs_through_its_stages_with_stage_workers() {
    use jobyard_client::{FlowJobOptions, StageJob};
    use serde_json::json;
    let (_server, client, _data) = start();
    client
        .declare_flow(
            &json!({"name": "greet", "lookupAttributes": ["who"], "stages": [
            {"name": "hello", "next": "bye", "attributesToGet": ["who"]},
            {"name": "bye", "attributesToGet": ["greeting"], "maxRetries": 1}]}),
        )
        .await
        .unwrap();
    let options = FlowJobOptions {
        priority: Some(1),
        idempotency_key: Some("once".into()),
    };
    let id = client
        .create_flow_job("greet", json!({"who": "ann"}), &options)
        .await
        .unwrap();
    let again = client
        .create_flow_job("greet", json!({"who": "ann"}), &options)
        .await
        .unwrap();
    assert_eq!(id, again, "the idempotency key returns the first job");
    let tries = Arc::new(AtomicU32::new(0));
    let counter = tries.clone();
    let hello = client
        .stage_worker("hello")
        .poll_wait(Duration::from_millis(200))
        .start(|job: StageJob| async move {
            let who = job.input["who"].as_str().unwrap_or("?").to_string();
            Ok::<_, Failure>(json!({ "greeting": format!("hello {who}") }))
        });
    let bye = client
        .stage_worker("bye")
        .poll_wait(Duration::from_millis(200))
        .start(move |job: StageJob| {
            let counter = counter.clone();
            async move {
                // The first try fails; the stage's one retry succeeds.
                if counter.fetch_add(1, Ordering::SeqCst) == 0 {
                    return Err(Failure::Fail("flaky".into()));
                }
                Ok(json!({ "said": job.input["greeting"], "retriesSeen": job.input["retries"] }))
            }
        });
    let deadline = tokio::time::Instant::now() + WAIT;
    let state = loop {
        let job = client
            .flow_job(&id)
            .await
            .unwrap()
            .expect("kept after its end");
        if job["fields"]["done"] == json!(true) {
            break job;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "flow did not finish: {job}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let (hello, bye) = (hello.stop().await, bye.stop().await);
    assert_eq!((hello.completed, bye.failed, bye.completed), (1, 1, 1));
    assert_eq!(state["fields"]["said"], "hello ann");
    assert_eq!(state["fields"]["retriesSeen"], 1);
    assert_eq!(state["fields"]["completed-queue"], "bye");
    let found = client
        .flow_jobs_by_key("greet", "who", "ann")
        .await
        .unwrap();
    assert_eq!(found.len(), 1);
    assert!(client.delete_flow_job(&id).await.unwrap());
    assert_eq!(client.flow_job(&id).await.unwrap(), None);
    assert!(!client.delete_flow_job(&id).await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_busy_stage_worker_takes_its_next_job_with_each_report() {
    use jobyard_client::{FlowJobOptions, StageJob};
    use serde_json::json;
    let (_server, client, _data, port) = start_with_port();
    client
        .declare_flow(&json!({"name": "batch", "stages": [{"name": "each"}]}))
        .await
        .unwrap();
    let mut ids = Vec::new();
    for n in 0..10 {
        let id = client
            .create_flow_job("batch", json!({ "n": n }), &FlowJobOptions::default())
            .await
            .unwrap();
        ids.push(id);
    }
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    let pool = client
        .stage_worker("each")
        .poll_wait(Duration::from_secs(20))
        .start(move |job: StageJob| {
            let log = log.clone();
            async move {
                log.lock()
                    .unwrap()
                    .push(job.input["id"].as_str().unwrap().to_string());
                Ok::<_, Failure>(json!({ "ok": true }))
            }
        });
    let deadline = tokio::time::Instant::now() + WAIT;
    while seen.lock().unwrap().len() < ids.len() {
        assert!(tokio::time::Instant::now() < deadline, "jobs not all run");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Stopping ends the long poll the worker went back to at once.
    let summary = tokio::time::timeout(Duration::from_secs(10), pool.stop())
        .await
        .expect("stop does not wait for the poll");
    assert_eq!(summary.completed, 10);
    assert_eq!(
        *seen.lock().unwrap(),
        ids,
        "one worker runs them oldest first"
    );
    for id in &ids {
        let job = client.flow_job(id).await.unwrap().unwrap();
        assert_eq!(job["fields"]["done"], json!(true), "{job}");
    }
    // One lease for the first job, each report brought the next; then (nothing left) one
    // long poll, and perhaps a second if the first one ran out.
    assert_eq!(http_count(port, "flow-complete"), 10);
    let leases = http_count(port, "lease-stage");
    assert!(
        (2..=3).contains(&leases),
        "{leases} stage leases for 10 jobs"
    );
}
