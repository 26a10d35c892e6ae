//! A job's attempts in `/admin/api/jobs/{id}`: released, running, failed with its error,
//! and still shown for a while once the job has ended.

use std::sync::Arc;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use bytes::Bytes;
use jobyard_broker::Broker;
use jobyard_engine::{JobEnd, JobId, Lease, ReserveOutcome, WaitMode};
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

fn reserve(broker: &Broker, conn: u64, queue: &[u8]) -> JobId {
    let mut txn = broker.lock();
    let q = txn.queue_id(queue).unwrap();
    let outcome = txn.reserve(
        conn,
        &[q],
        WaitMode::Best,
        Lease::JobTtr,
        Some(0),
        false,
        Broker::now(),
    );
    match outcome {
        ReserveOutcome::Reserved(id) => id,
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn a_job_shows_each_attempt_and_how_it_ended() {
    let broker = Broker::in_memory();
    let id = {
        let mut txn = broker.lock();
        let q = txn.queue_id_or_create(b"att");
        let now = Broker::now();
        txn.put(q, 1, 0, 60, Bytes::from_static(b"x"), true, now).id
    };
    let (_, fresh) = get(&broker, &format!("/admin/api/jobs/{id}")).await;
    assert_eq!(fresh["attempts"], serde_json::json!([]), "never leased");
    assert_eq!(fresh["lease"], Value::Null);

    assert_eq!(reserve(&broker, 11, b"att"), id);
    assert!(broker.lock().release(11, id, 1, 0, Broker::now()));
    assert_eq!(reserve(&broker, 12, b"att"), id);
    let (status, held) = get(&broker, &format!("/admin/api/jobs/{id}")).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(held["attempts"][0]["ended"], "released");
    assert_eq!(held["attempts"][0]["holder"], 11);
    assert_eq!(held["lease"]["holder"], 12);
    assert!(held["lease"]["started_ms"].as_u64().unwrap() > 0);

    let end = JobEnd::failed(Some(Bytes::from_static(b"disk full")));
    assert!(broker.lock().finish(12, id, end));
    let (status, gone) = get(&broker, &format!("/admin/api/jobs/{id}")).await;
    assert_eq!(
        status,
        StatusCode::NOT_FOUND,
        "an ended job is gone as ever"
    );
    assert_eq!(gone["error"]["code"], "not_found");
    assert_eq!(gone["ended"], true);
    let last = &gone["attempts"][1];
    assert_eq!(
        (&last["ended"], &last["error"]),
        (&"failed".into(), &"disk full".into())
    );
    assert_eq!(last["holder"], 12);

    let (status, never) = get(&broker, "/admin/api/jobs/987654").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(never.get("attempts"), None);
}
