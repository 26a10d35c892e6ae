//! What the tests beside the handlers share: the API over an in-memory broker, driven
//! through its router one request at a time (tower's `oneshot`), as a client would.

use std::sync::Arc;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use axum::Router;
use jobyard_broker::Broker;
use jobyard_net::Gate;
use serde_json::Value;
use tower::ServiceExt;

use crate::state::{Api, Inner, COMMAND_NAMES};
use crate::workers::Workers;
use crate::{limits, routes, Config, Security, DEFAULT_WORKER_IDLE};

/// The `/v1` API on a broker of its own whose clock runs (leases expire, long polls time
/// out), without the listener around it.
#[derive(Clone)]
pub(crate) struct TestApi {
    pub(crate) broker: Arc<Broker>,
    router: Router,
}

impl TestApi {
    /// A fresh API; call inside a tokio runtime (the broker's clock is a task).
    pub(crate) fn new() -> TestApi {
        let broker = Broker::in_memory();
        broker.start();
        let config = Config {
            max_job_size: 65535,
            worker_idle: DEFAULT_WORKER_IDLE,
            security: Security::default(),
        };
        let (anonymous, _) = broker.connect();
        let api = Api {
            request_limit: limits::max_request_bytes(config.max_job_size),
            inner: Arc::new(Inner {
                broker: broker.clone(),
                workers: Workers::new(config.worker_idle),
                config,
                gate: Gate::new(100),
                metrics: broker.metrics().protocol("http", &COMMAND_NAMES),
                anonymous,
            }),
        };
        TestApi {
            broker,
            router: routes::router(api),
        }
    }

    /// `POST uri` with a JSON body: the status and the JSON reply.
    pub(crate) async fn post(&self, uri: &str, body: Value) -> (StatusCode, Value) {
        let request = Request::builder()
            .method("POST")
            .uri(uri)
            .header("content-type", "application/json")
            .body(Body::from(body.to_string()))
            .expect("a valid request");
        let response = self
            .router
            .clone()
            .oneshot(request)
            .await
            .expect("the router answers");
        let status = response.status();
        let bytes = axum::body::to_bytes(response.into_body(), 1 << 20)
            .await
            .expect("a bounded body");
        let json = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
        (status, json)
    }

    /// Puts a plain job with `body` on `queue`; its id.
    pub(crate) async fn put(&self, queue: &str, body: &str) -> u64 {
        let (status, reply) = self
            .post(
                &format!("/v1/queues/{queue}/jobs"),
                serde_json::json!({ "body": body }),
            )
            .await;
        assert_eq!(status, StatusCode::CREATED, "{reply}");
        reply["id"].as_u64().expect("a job id")
    }
}

/// The stable code of a refusal.
pub(crate) fn error_code(reply: &Value) -> &str {
    reply["error"]["code"].as_str().unwrap_or("")
}
