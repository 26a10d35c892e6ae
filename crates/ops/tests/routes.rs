//! The operations routes against a live broker: Prometheus text after known operations,
//! the admin views (paged) and actions, and their refusals.

use std::sync::Arc;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use bytes::Bytes;
use jobyard_broker::Broker;
use jobyard_engine::{JobId, Lease, ReserveOutcome, WaitMode};
use serde_json::Value;
use tower::ServiceExt;

async fn call(broker: &Arc<Broker>, method: &str, uri: &str) -> (StatusCode, String) {
    let app = jobyard_ops::router(broker.clone());
    let res = app
        .oneshot(
            Request::builder()
                .method(method)
                .uri(uri)
                .body(Body::empty())
                .unwrap(),
        )
        .await
        .unwrap();
    let status = res.status();
    let body = axum::body::to_bytes(res.into_body(), 16 << 20)
        .await
        .unwrap();
    (status, String::from_utf8(body.to_vec()).unwrap())
}

async fn json(broker: &Arc<Broker>, method: &str, uri: &str) -> (StatusCode, Value) {
    let (status, text) = call(broker, method, uri).await;
    (status, serde_json::from_str(&text).unwrap_or(Value::Null))
}

fn put(broker: &Broker, queue: &str, pri: u32) -> JobId {
    let mut txn = broker.lock();
    let q = txn.queue_id_or_create(queue.as_bytes());
    txn.put(
        q,
        pri,
        0,
        60,
        Bytes::from_static(b"hello"),
        true,
        Broker::now(),
    )
    .id
}

fn reserve(broker: &Broker, conn: u64, queue: &str) -> JobId {
    let mut txn = broker.lock();
    let q = txn.queue_id(queue.as_bytes()).unwrap();
    match txn.reserve(
        conn,
        &[q],
        WaitMode::Best,
        Lease::JobTtr,
        Some(0),
        false,
        Broker::now(),
    ) {
        ReserveOutcome::Reserved(id) => id,
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn metrics_show_queues_protocols_and_totals_after_known_operations() {
    let broker = Broker::in_memory();
    let proto = broker
        .metrics()
        .protocol("beanstalk", &["cmd-put", "cmd-delete"]);
    proto.count(0);
    proto.count(0);
    jobyard_broker::ProtocolMetrics::inc(&proto.connections);
    put(&broker, "prom-emails", 1);
    put(&broker, "prom-emails", 1);
    reserve(&broker, 7, "prom-emails");
    let (status, text) = call(&broker, "GET", "/metrics").await;
    assert_eq!(status, StatusCode::OK);
    let has = |line: &str| text.lines().any(|l| l == line);
    assert!(
        has(r#"jobyard_queue_jobs{queue="prom-emails",state="ready"} 1"#),
        "{text}"
    );
    assert!(has(
        r#"jobyard_queue_jobs{queue="prom-emails",state="reserved"} 1"#
    ));
    assert!(has(
        r#"jobyard_queue_jobs_created_total{queue="prom-emails"} 2"#
    ));
    assert!(has(r#"jobyard_connections{protocol="beanstalk"} 1"#));
    assert!(has(
        r#"jobyard_commands_total{protocol="beanstalk",command="cmd-put"} 2"#
    ));
    assert!(text.contains("# TYPE jobyard_queue_jobs gauge"));
    assert!(text.contains("# TYPE jobyard_queue_jobs_created_total counter"));
    // Every sample line is `name{labels} value` with a number.
    for l in text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
    {
        let value = l.rsplit(' ').next().unwrap();
        assert!(value.parse::<f64>().is_ok(), "bad sample {l:?}");
    }
}

#[tokio::test]
async fn the_overview_lists_every_queue_with_its_counts() {
    let broker = Broker::in_memory();
    put(&broker, "a", 1);
    put(&broker, "b", 1);
    put(&broker, "b", 1);
    reserve(&broker, 3, "b");
    let (status, v) = json(&broker, "GET", "/admin/api/overview").await;
    assert_eq!(status, StatusCode::OK);
    let queues = v["queues"].as_array().unwrap();
    let b = queues.iter().find(|q| q["name"] == "b").unwrap();
    assert_eq!(
        (b["ready"].as_u64(), b["reserved"].as_u64()),
        (Some(1), Some(1))
    );
    assert_eq!(v["jobs"], 3);
    assert_eq!(v["draining"], false);
}

#[tokio::test]
async fn a_queue_is_read_page_by_page() {
    let broker = Broker::in_memory();
    let ids: Vec<JobId> = (0..120).map(|_| put(&broker, "big", 5)).collect();
    let mut seen = Vec::new();
    let mut uri = "/admin/api/queues/big?state=ready&limit=50".to_string();
    loop {
        let (status, v) = json(&broker, "GET", &uri).await;
        assert_eq!(status, StatusCode::OK);
        let jobs = v["jobs"].as_array().unwrap();
        assert!(jobs.len() <= 50);
        seen.extend(jobs.iter().map(|j| j["id"].as_u64().unwrap()));
        match v["next"].as_str() {
            Some(next) => uri = format!("/admin/api/queues/big?state=ready&limit=50&after={next}"),
            None => break,
        }
    }
    assert_eq!(seen, ids);
    let (status, v) = json(&broker, "GET", "/admin/api/queues/big?state=sleeping").await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(v["error"]["code"], "bad_request");
    let (status, _) = json(&broker, "GET", "/admin/api/queues/big?after=nonsense").await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    let (status, v) = json(&broker, "GET", "/admin/api/queues/none").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(v["error"]["code"], "not_found");
}

#[tokio::test]
async fn job_actions_work_and_a_job_that_moved_on_gets_a_clear_refusal() {
    let broker = Broker::in_memory();
    let id = put(&broker, "acts", 1);
    let (_, v) = json(&broker, "GET", &format!("/admin/api/jobs/{id}")).await;
    assert_eq!(
        (v["state"].as_str(), v["body_preview"].as_str()),
        (Some("ready"), Some("hello"))
    );
    let (status, _) = json(&broker, "POST", &format!("/admin/api/jobs/{id}/bury")).await;
    assert_eq!(status, StatusCode::OK);
    let (status, v) = json(&broker, "POST", &format!("/admin/api/jobs/{id}/bury")).await;
    assert_eq!(status, StatusCode::CONFLICT);
    assert_eq!(v["error"]["code"], "wrong_state");
    let (status, _) = json(&broker, "POST", &format!("/admin/api/jobs/{id}/kick")).await;
    assert_eq!(status, StatusCode::OK);
    // Leased by a worker: the operator cannot pull it away.
    assert_eq!(reserve(&broker, 9, "acts"), id);
    let (status, v) = json(&broker, "POST", &format!("/admin/api/jobs/{id}/delete")).await;
    assert_eq!(status, StatusCode::CONFLICT);
    assert!(v["error"]["message"].as_str().unwrap().contains("leased"));
    broker.disconnect(9);
    let (status, _) = json(&broker, "POST", &format!("/admin/api/jobs/{id}/delete")).await;
    assert_eq!(status, StatusCode::OK);
    let (status, v) = json(&broker, "POST", &format!("/admin/api/jobs/{id}/delete")).await;
    assert_eq!(
        (status, v["error"]["code"].as_str()),
        (StatusCode::NOT_FOUND, Some("not_found"))
    );
    let (status, _) = json(&broker, "POST", &format!("/admin/api/jobs/{id}/explode")).await;
    assert_eq!(
        status,
        StatusCode::NOT_FOUND,
        "gone before the action is looked at"
    );
}

#[tokio::test]
async fn queue_actions_pause_resume_kick_and_drain() {
    let broker = Broker::in_memory();
    let id = put(&broker, "qa", 1);
    {
        let mut txn = broker.lock();
        assert!(txn.bury_job(id));
    }
    let (_, v) = json(&broker, "POST", "/admin/api/queues/qa/pause").await;
    assert_eq!(v["paused"], true);
    let q = broker.lock_queue_id("qa");
    assert!(broker.lock().queue(q).is_paused(Broker::now()));
    let (_, v) = json(&broker, "POST", "/admin/api/queues/qa/kick?bound=10").await;
    assert_eq!(v["kicked"], 1);
    let (_, v) = json(&broker, "POST", "/admin/api/queues/qa/resume").await;
    assert_eq!(v["paused"], false);
    let (status, _) = json(&broker, "POST", "/admin/api/queues/qa/shred").await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    let (_, v) = json(&broker, "POST", "/admin/api/drain").await;
    assert_eq!(v["draining"], true);
    assert!(broker.draining());
}

trait QueueIdOf {
    fn lock_queue_id(&self, name: &str) -> jobyard_engine::QueueId;
}

impl QueueIdOf for Broker {
    fn lock_queue_id(&self, name: &str) -> jobyard_engine::QueueId {
        self.lock().queue_id(name.as_bytes()).unwrap()
    }
}

#[tokio::test]
async fn the_dashboard_is_served_from_the_binary() {
    let broker = Broker::in_memory();
    let (status, html) = call(&broker, "GET", "/").await;
    assert_eq!(status, StatusCode::OK);
    assert!(html.contains("/ui/app.js") && html.contains("<title>jobyard</title>"));
    let (status, js) = call(&broker, "GET", "/ui/app.js").await;
    assert_eq!(status, StatusCode::OK);
    assert!(js.contains("/admin/api"));
    let (status, _) = call(&broker, "GET", "/ui/style.css").await;
    assert_eq!(status, StatusCode::OK);
}

#[tokio::test]
async fn metrics_show_the_lease_to_complete_histogram_per_queue_and_outcome() {
    let broker = Broker::in_memory();
    for _ in 0..3 {
        put(&broker, "prom-lease", 1);
    }
    for end in ["delete", "delete", "bury"] {
        let id = reserve(&broker, 9, "prom-lease");
        let mut txn = broker.lock();
        match end {
            "delete" => assert!(txn.delete(9, id)),
            _ => assert!(txn.bury(9, id, 1)),
        }
    }
    let (status, text) = call(&broker, "GET", "/metrics").await;
    assert_eq!(status, StatusCode::OK);
    let sample = |name: &str, labels: &str| -> f64 {
        let prefix = format!("{name}{{{labels}}} ");
        let line = text
            .lines()
            .find(|l| l.starts_with(&prefix))
            .unwrap_or_else(|| panic!("no {prefix} in\n{text}"));
        line[prefix.len()..].parse().unwrap()
    };
    let m = "jobyard_lease_to_complete_seconds";
    let ok = r#"queue="prom-lease",outcome="ok""#;
    let failed = r#"queue="prom-lease",outcome="failed""#;
    assert_eq!(sample(&format!("{m}_count"), ok), 2.0);
    assert_eq!(sample(&format!("{m}_count"), failed), 1.0);
    assert_eq!(
        sample(&format!("{m}_bucket"), &format!(r#"{ok},le="+Inf""#)),
        2.0
    );
    assert_eq!(
        sample(&format!("{m}_bucket"), &format!(r#"{ok},le="600""#)),
        2.0
    );
    assert!(sample(&format!("{m}_sum"), ok) >= 0.0);
    assert!(text.contains(&format!("# TYPE {m} histogram")));
}

#[tokio::test]
async fn the_workers_views_list_what_front_ends_publish_a_page_at_a_time() {
    let broker = Broker::in_memory();
    put(&broker, "render", 1);
    let job = reserve(&broker, 5, "render");
    let now = Broker::now();
    for i in 0..3 {
        broker.workers().seen("wmp", &format!("w{i}"), now, |w| {
            w.queues = vec!["render".into()];
            w.detail = vec![("manager", "m1".into())];
        });
    }
    broker.workers().took("wmp", "w0", job, now);
    broker.workers().took("wmp", "w1", 999_999, now); // ended without word: not shown
    broker
        .workers()
        .process_started(jobyard_broker::ProcessInfo {
            protocol: "jobd",
            job,
            pid: 4242,
            label: "row 17".into(),
            queue: "render".into(),
            started: now - 1500,
            command: vec!["/bin/run".into(), "17".into()],
        });
    let (status, page) = json(&broker, "GET", "/admin/api/workers?protocol=wmp&limit=2").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(page["total"], 3);
    let w0 = &page["workers"][0];
    assert_eq!(w0["id"], "w0");
    assert_eq!(w0["in_flight"], 1);
    assert_eq!(w0["jobs"][0]["id"], job);
    assert_eq!(w0["detail"]["manager"], "m1");
    assert_eq!(w0["queues"][0]["reserved"], 1);
    assert_eq!(page["workers"][1]["in_flight"], 0);
    let next = page["next"].as_str().unwrap().to_string();
    let (_, rest) = json(
        &broker,
        "GET",
        &format!("/admin/api/workers?protocol=wmp&limit=2&after={next}"),
    )
    .await;
    assert_eq!(rest["workers"][0]["id"], "w2");
    assert!(rest["next"].is_null());
    let (_, procs) = json(&broker, "GET", "/admin/api/processes?protocol=jobd").await;
    assert_eq!(procs["total"], 1);
    assert_eq!(procs["processes"][0]["pid"], 4242);
    assert_eq!(procs["processes"][0]["command"][1], "17");
    assert!(procs["processes"][0]["running_s"].as_f64().unwrap() >= 1.5);
}
