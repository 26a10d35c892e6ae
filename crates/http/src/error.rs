//! Errors as the API shows them: an HTTP status and a JSON body with a stable `code`.
//!
//! Clients branch on `code` (never on `message`, which is for people), so a code, once
//! published in docs/http-api.md, keeps its meaning.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;

/// A refused request. Built with one of the constructors below so every code has one status.
#[derive(Debug)]
pub struct ApiError {
    pub status: StatusCode,
    pub code: &'static str,
    pub message: String,
}

impl ApiError {
    pub(crate) fn new(
        status: StatusCode,
        code: &'static str,
        message: impl Into<String>,
    ) -> ApiError {
        ApiError {
            status,
            code,
            message: message.into(),
        }
    }

    /// The body is not JSON, or not the JSON this endpoint takes.
    pub fn bad_json(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, "bad_json", message)
    }
    /// A value is out of its documented range, or a parameter is malformed.
    pub fn bad_request(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, "bad_request", message)
    }
    /// A queue name that is empty, too long, or has characters a queue name may not have.
    pub fn bad_queue_name(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, "bad_queue_name", message)
    }
    /// A job body (or a result) larger than `--max-job-size`.
    pub fn job_too_big(max: u32) -> ApiError {
        ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "job_too_big",
            format!("the body is larger than the job size limit of {max} bytes"),
        )
    }
    /// Attributes larger than [`crate::limits::MAX_ATTRIBUTES_BYTES`] once serialized.
    pub fn attributes_too_big() -> ApiError {
        ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "attributes_too_big",
            format!(
                "attributes are larger than {} bytes once serialized",
                crate::limits::MAX_ATTRIBUTES_BYTES
            ),
        )
    }
    /// The request body is larger than the server reads.
    pub fn request_too_large(limit: usize) -> ApiError {
        ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "request_too_large",
            format!("request bodies are limited to {limit} bytes"),
        )
    }
    /// The path and query are longer than [`crate::limits::MAX_URI_BYTES`].
    pub fn uri_too_long() -> ApiError {
        ApiError::new(
            StatusCode::URI_TOO_LONG,
            "uri_too_long",
            format!(
                "path and query are limited to {} bytes",
                crate::limits::MAX_URI_BYTES
            ),
        )
    }
    /// No such job (it never existed, or it ended: ended jobs are not kept).
    pub fn job_not_found(id: u64) -> ApiError {
        ApiError::new(
            StatusCode::NOT_FOUND,
            "not_found",
            format!("no job {id} (it may have ended: ended jobs are not kept)"),
        )
    }
    /// No such worker session (never created, deleted, or expired after being idle).
    pub fn unknown_worker(worker: &str) -> ApiError {
        ApiError::new(
            StatusCode::NOT_FOUND,
            "unknown_worker",
            format!("no worker {worker:?} (deleted, or expired after being idle)"),
        )
    }
    /// No route at that path.
    pub fn no_such_route() -> ApiError {
        ApiError::new(StatusCode::NOT_FOUND, "no_such_route", "no such route")
    }
    /// The route exists but not with that method.
    pub fn method_not_allowed() -> ApiError {
        ApiError::new(
            StatusCode::METHOD_NOT_ALLOWED,
            "method_not_allowed",
            "this route does not take that method",
        )
    }
    /// The job is not leased by this worker (its lease ended, or another holds it).
    pub fn not_leased(id: u64) -> ApiError {
        ApiError::new(
            StatusCode::CONFLICT,
            "not_leased",
            format!("job {id} is not leased by this worker (its lease may have ended)"),
        )
    }
    /// The token is not the job's current attempt: the lease it came with is gone.
    pub fn stale_token(id: u64, current: u32) -> ApiError {
        ApiError::new(
            StatusCode::CONFLICT,
            "stale_token",
            format!("stale token for job {id}: the current attempt is {current}"),
        )
    }
    /// Someone else holds the job's lease.
    pub fn leased(id: u64) -> ApiError {
        ApiError::new(
            StatusCode::CONFLICT,
            "leased",
            format!("job {id} is leased; only its holder (worker and token) may do that"),
        )
    }
    /// The job cannot move to another queue: it has a unique key (a Gearman job), and
    /// keys are unique per queue.
    pub fn not_routable(id: u64) -> ApiError {
        ApiError::new(
            StatusCode::CONFLICT,
            "not_routable",
            format!("job {id} has a unique key and cannot move to another queue"),
        )
    }
    /// The worker already has a lease request waiting.
    pub fn worker_busy() -> ApiError {
        ApiError::new(
            StatusCode::CONFLICT,
            "worker_busy",
            "this worker already has a lease request in progress",
        )
    }
    /// The connection limit (`--max-connections`, all protocols together) is reached.
    pub fn too_many_sessions() -> ApiError {
        ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "too_many_sessions",
            "the server's connection limit is reached",
        )
    }
    /// Drain mode (SIGUSR1): no new jobs until restart.
    pub fn draining() -> ApiError {
        ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "draining",
            "the server is draining and accepts no new jobs",
        )
    }
    /// The log has no room for new jobs (a full disk, or PostgreSQL's): beanstalkd's
    /// `OUT_OF_MEMORY`, Gearman's `ERROR`. Retrying later is right; nothing was stored.
    pub fn no_room() -> ApiError {
        ApiError::new(
            StatusCode::INSUFFICIENT_STORAGE,
            "no_room",
            "the server's storage has no room for new jobs; try again later",
        )
    }
    /// The server is stopping: waiting requests end with this.
    pub fn shutting_down() -> ApiError {
        ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "shutting_down",
            "the server is shutting down",
        )
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = serde_json::json!({ "error": { "code": self.code, "message": self.message } });
        (self.status, Json(body)).into_response()
    }
}
