//! `/admin/api/history` against a live broker: what two samples around known operations
//! become, and its refusals.

use std::sync::Arc;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use bytes::Bytes;
use jobyard_broker::history::sampler;
use jobyard_broker::Broker;
use jobyard_engine::{JobEnd, Lease, ReserveOutcome, WaitMode};
use serde_json::Value;
use tower::ServiceExt;

async fn get(broker: &Arc<Broker>, uri: &str) -> (StatusCode, Value) {
    let res = jobyard_ops::router(broker.clone())
        .oneshot(Request::get(uri).body(Body::empty()).unwrap())
        .await
        .unwrap();
    let status = res.status();
    let body = axum::body::to_bytes(res.into_body(), 16 << 20)
        .await
        .unwrap();
    (status, serde_json::from_slice(&body).unwrap_or(Value::Null))
}

/// Puts `n` jobs on `queue` and has session 7 take and end each: ok, or failed for every
/// third.
fn work(broker: &Broker, queue: &str, n: usize) {
    for i in 0..n {
        let mut txn = broker.lock();
        let q = txn.queue_id_or_create(queue.as_bytes());
        let now = Broker::now();
        txn.put(q, 1, 0, 60, Bytes::from_static(b"x"), false, now);
        let outcome = txn.reserve(7, &[q], WaitMode::Best, Lease::JobTtr, Some(0), false, now);
        let ReserveOutcome::Reserved(id) = outcome else {
            panic!("{outcome:?}");
        };
        let end = if i % 3 == 2 {
            JobEnd::failed(Some(Bytes::from_static(b"boom")))
        } else {
            JobEnd::ok(Bytes::new())
        };
        assert!(txn.finish(7, id, end));
    }
}

#[tokio::test]
async fn two_samples_give_a_point_with_rates_depth_and_latency() {
    let broker = Broker::in_memory();
    let history = broker.history();
    {
        // A job that stays keeps the queue (an empty queue nobody watches is dropped).
        let mut txn = broker.lock();
        let q = txn.queue_id_or_create(b"hist");
        txn.put(q, 9, 0, 60, Bytes::from_static(b"x"), false, Broker::now());
    }
    work(&broker, "hist", 1);
    history.record(sampler::read(&broker), 1_000, 1000);
    work(&broker, "hist", 6);
    history.record(sampler::read(&broker), 1_001, 2000);

    let (status, h) = get(&broker, "/admin/api/history?queue=hist&window=300").await;
    assert_eq!(status, StatusCode::OK, "{h}");
    assert_eq!(h["step_s"], 1);
    assert_eq!(h["t"], serde_json::json!([1_000, 1_001]));
    assert_eq!(h["put"][1], 3.0, "6 puts in 2 s");
    assert_eq!(h["completed"][1], 2.0);
    assert_eq!(h["failed"][1], 1.0);
    assert_eq!(h["ready"][1], 1);
    assert!(h["p50_ms"][1].as_f64().is_some(), "{h}");
    assert_eq!(h["queues"], serde_json::json!(["hist"]));

    let (status, all) = get(&broker, "/admin/api/history?window=60").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(all["put"][1], 3.0);
    assert_eq!(all["queue"], Value::Null);
    let (_, hour) = get(&broker, "/admin/api/history").await;
    assert_eq!(
        (&hour["window_s"], &hour["step_s"]),
        (&3600.into(), &10.into())
    );
}

#[tokio::test]
async fn unknown_queues_and_bad_windows_get_json_errors() {
    let broker = Broker::in_memory();
    let (status, body) = get(&broker, "/admin/api/history").await;
    assert_eq!(status, StatusCode::OK, "no sample yet: an empty series");
    assert_eq!(body["t"], serde_json::json!([]));
    let (status, body) = get(&broker, "/admin/api/history?queue=nope").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(body["error"]["code"], "not_found");
    let (status, body) = get(&broker, "/admin/api/history?window=0").await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(body["error"]["code"], "bad_request");
    let (status, _) = get(&broker, "/admin/api/history?window=99999").await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
}

/// Has session 7 take a job of `queue` and delete it, as a beanstalkd worker finishes one.
fn take_and_delete(broker: &Broker, queue: &str) {
    let mut txn = broker.lock();
    let q = txn.queue_id_or_create(queue.as_bytes());
    let now = Broker::now();
    txn.put(q, 1, 0, 60, Bytes::from_static(b"x"), false, now);
    let outcome = txn.reserve(7, &[q], WaitMode::Best, Lease::JobTtr, Some(0), false, now);
    let ReserveOutcome::Reserved(id) = outcome else {
        panic!("{outcome:?}");
    };
    assert!(txn.delete(7, id));
}

#[tokio::test]
async fn the_queue_table_and_the_charts_count_the_same_jobs_completed() {
    let broker = Broker::in_memory();
    let history = broker.history();
    {
        let mut txn = broker.lock();
        let q = txn.queue_id_or_create(b"mixed");
        txn.put(q, 9, 0, 60, Bytes::from_static(b"x"), false, Broker::now());
    }
    history.record(sampler::read(&broker), 1_000, 1000);
    work(&broker, "mixed", 3); // two ended ok, one failed
    take_and_delete(&broker, "mixed");
    take_and_delete(&broker, "mixed");
    history.record(sampler::read(&broker), 1_001, 1000);

    let (_, h) = get(&broker, "/admin/api/history?queue=mixed&window=60").await;
    assert_eq!(h["completed"][1], 4.0, "ended ok or deleted, in 1 s: {h}");
    let (_, overview) = get(&broker, "/admin/api/overview").await;
    let mixed = overview["queues"]
        .as_array()
        .unwrap()
        .iter()
        .find(|q| q["name"] == "mixed")
        .unwrap();
    assert_eq!(mixed["completed"], 4, "{mixed}");
    assert_eq!(
        (&mixed["failed"], &mixed["deleted"]),
        (&1.into(), &2.into())
    );
}
