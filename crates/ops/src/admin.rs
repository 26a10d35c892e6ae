//! The admin JSON API under `/admin/api/`: what the dashboard and `jobyard ctl` show and do.
//!
//! Views are paged (a queue of 100,000 jobs is read 50 at a time, never whole), actions are
//! the engine's own operations and reply only once the log holds what they changed. An
//! action on a job that has moved on (finished, leased meanwhile) gets a JSON error with a
//! stable code, never a 500.

use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use jobyard_broker::{Broker, Txn};
use jobyard_engine::{Cursor, Engine, Job, JobId, JobState, Millis};
use serde::Deserialize;
use serde_json::{json, Value};

use crate::job_attempts;

/// Largest page a listing returns.
pub const MAX_PAGE: usize = 500;
/// Bytes of a job's body shown in listings and job views.
pub const PREVIEW_BYTES: usize = 256;
/// An operator's actions are the server's own: no session holds a lease under this id.
const OPERATOR: u64 = 0;

pub(crate) fn routes() -> Router<Arc<Broker>> {
    Router::new()
        .route("/admin/api/overview", get(overview))
        .route("/admin/api/queues/{queue}", get(queue_page))
        .route("/admin/api/queues/{queue}/{action}", post(queue_action))
        .route("/admin/api/jobs/{id}", get(job_view))
        .route("/admin/api/jobs/{id}/{action}", post(job_action))
        .route("/admin/api/drain", post(drain))
}

/// A JSON error with a stable code.
pub(crate) struct ApiError(
    pub(crate) StatusCode,
    pub(crate) &'static str,
    pub(crate) String,
);

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = json!({ "error": { "code": self.1, "message": self.2 } });
        (self.0, Json(body)).into_response()
    }
}

/// 404 with the `not_found` code.
pub(crate) fn not_found(what: &str) -> ApiError {
    ApiError(
        StatusCode::NOT_FOUND,
        "not_found",
        format!("{what} not found"),
    )
}

/// 400 with the `bad_request` code.
pub(crate) fn bad_request(message: String) -> ApiError {
    ApiError(StatusCode::BAD_REQUEST, "bad_request", message)
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(&bytes[..bytes.len().min(PREVIEW_BYTES)]).into_owned()
}

async fn overview(State(broker): State<Arc<Broker>>) -> Json<Value> {
    let now = Broker::now();
    let queues: Vec<Value> = {
        let txn = broker.lock();
        txn.queues()
            .map(|q| {
                let head_age = q
                    .head()
                    .and_then(|(_, id)| txn.job(id))
                    .map_or(0, |j| now.saturating_sub(j.created) / 1000);
                json!({
                    "name": text(&q.name),
                    "ready": q.ready_len(),
                    "reserved": q.reserved,
                    "delayed": q.delayed_len(),
                    "buried": q.buried_len(),
                    "waiting": q.waiting(),
                    "paused": q.is_paused(now),
                    "lease_limit": q.lease_limit,
                    "created": q.total_jobs,
                    // As the charts count it (the history's samples): deletes included.
                    "completed": q.completed(),
                    "failed": q.total_failed,
                    "deleted": q.cmd_delete,
                    "leases_expired": q.total_timeouts,
                    "next_ready_age_s": head_age,
                })
            })
            .collect()
    };
    let protocols: Vec<Value> = broker
        .metrics()
        .protocols()
        .iter()
        .map(|p| {
            json!({
                "name": p.name,
                "connections": p.connections.load(Relaxed),
                "connections_total": p.connections_total.load(Relaxed),
                "refused": p.refused.load(Relaxed),
                "jobs_created": p.jobs_created.load(Relaxed),
                "jobs_completed": p.jobs_completed.load(Relaxed),
                "jobs_failed": p.jobs_failed.load(Relaxed),
            })
        })
        .collect();
    let log = broker.log().map(|log| {
        let s = log.stats();
        json!({
            "records": log.records_written(),
            "bytes": s.bytes.load(Relaxed),
            "writes": s.batches.load(Relaxed),
            "fsyncs": jobyard_storage::sync_stats().fsyncs.load(Relaxed),
            "segment": log.current_segment(),
        })
    });
    let (jobs, total) = {
        let txn = broker.lock();
        (txn.job_count(), txn.total_jobs())
    };
    Json(json!({
        "now_ms": now,
        "jobs": jobs,
        "jobs_created": total,
        "draining": broker.draining(),
        "queues": queues,
        "protocols": protocols,
        "log": log,
    }))
}

fn parse_state(s: &str) -> Result<JobState, ApiError> {
    match s {
        "ready" => Ok(JobState::Ready),
        "reserved" => Ok(JobState::Reserved),
        "delayed" => Ok(JobState::Delayed),
        "buried" => Ok(JobState::Buried),
        other => Err(bad_request(format!(
            "state {other:?}: use ready, reserved, delayed or buried"
        ))),
    }
}

/// `after` cursors travel as `POSITION.ID`.
fn parse_cursor(s: &str) -> Result<Cursor, ApiError> {
    let bad = || bad_request(format!("cursor {s:?}: use the `next` of the previous page"));
    let (a, b) = s.split_once('.').ok_or_else(bad)?;
    Ok(Cursor(
        a.parse().map_err(|_| bad())?,
        b.parse().map_err(|_| bad())?,
    ))
}

#[derive(Deserialize)]
struct PageQuery {
    state: Option<String>,
    after: Option<String>,
    limit: Option<usize>,
}

fn job_json(txn: &Txn<'_>, job: &Job, now: Millis) -> Value {
    let engine: &Engine = txn;
    // Bodies only the log holds are read back for the preview (left out if unreadable).
    let preview = txn.body(job).ok().map(|b| text(&b));
    json!({
        "id": job.id,
        "queue": text(&engine.queue(job.queue).name),
        "state": job.state.as_str(),
        "pri": job.pri,
        "ttr": job.ttr,
        "age_s": now.saturating_sub(job.created) / 1000,
        "time_left_s": engine.time_left_secs(job, now),
        "durable": job.durable,
        "reserves": job.reserves,
        "timeouts": job.timeouts,
        "releases": job.releases,
        "buries": job.buries,
        "kicks": job.kicks,
        "size": job.body.len(),
        "body_preview": preview,
        "attrs": engine.attrs_of(job.id).map(|a| text(a)),
    })
}

async fn queue_page(
    State(broker): State<Arc<Broker>>,
    Path(queue): Path<String>,
    Query(q): Query<PageQuery>,
) -> Result<Json<Value>, ApiError> {
    let state = parse_state(q.state.as_deref().unwrap_or("ready"))?;
    let after = q.after.as_deref().map(parse_cursor).transpose()?;
    let limit = q.limit.unwrap_or(50).clamp(1, MAX_PAGE);
    let now = Broker::now();
    let txn = broker.lock();
    let id = txn
        .queue_id(queue.as_bytes())
        .ok_or_else(|| not_found("queue"))?;
    let page = txn.list(id, state, after, limit);
    let jobs: Vec<Value> = page
        .ids
        .iter()
        .filter_map(|&j| txn.job(j))
        .map(|j| job_json(&txn, j, now))
        .collect();
    Ok(Json(json!({
        "queue": queue,
        "state": state.as_str(),
        "jobs": jobs,
        "next": page.next.map(|c| format!("{}.{}", c.0, c.1)),
    })))
}

/// A job with its attempts. A job that has ended is a 404 as ever, whose body also carries
/// its last attempts (`"ended": true`) while the broker keeps them.
async fn job_view(State(broker): State<Arc<Broker>>, Path(id): Path<JobId>) -> Response {
    let now = Broker::now();
    let txn = broker.lock();
    let Some(job) = txn.job(id) else {
        let Some(attempts) = job_attempts::of_ended_job(&txn, id) else {
            return not_found("job").into_response();
        };
        let body = json!({
            "error": { "code": "not_found", "message": "job not found" },
            "id": id,
            "ended": true,
            "attempts": attempts,
        });
        return (StatusCode::NOT_FOUND, Json(body)).into_response();
    };
    let mut view = job_json(&txn, job, now);
    let (attempts, lease) = job_attempts::of_live_job(&txn, job);
    view["attempts"] = attempts;
    view["lease"] = lease;
    Json(view).into_response()
}

async fn job_action(
    State(broker): State<Arc<Broker>>,
    Path((id, action)): Path<(JobId, String)>,
) -> Result<Json<Value>, ApiError> {
    let now = Broker::now();
    let (done, lsn) = {
        let mut txn = broker.lock();
        let Some(state) = txn.job(id).map(|j| j.state) else {
            return Err(not_found("job"));
        };
        let done = match action.as_str() {
            "delete" => txn.delete(OPERATOR, id),
            "kick" => txn.kick_job(id, now),
            "bury" => txn.bury_job(id),
            other => {
                return Err(bad_request(format!(
                    "action {other:?}: use delete, kick or bury"
                )))
            }
        };
        if !done {
            let why = match (action.as_str(), state) {
                (_, JobState::Reserved) => {
                    "the job is leased by a worker; it can be changed once the worker gives it back"
                }
                ("kick", _) => "only buried or delayed jobs can be kicked",
                ("bury", _) => "the job is already buried",
                _ => "the job cannot be changed in its state",
            };
            return Err(ApiError(
                StatusCode::CONFLICT,
                "wrong_state",
                format!("{why} (it is {})", state.as_str()),
            ));
        }
        (done, txn.commit())
    };
    broker.wait_durable(lsn).await;
    Ok(Json(json!({ "ok": done, "id": id, "action": action })))
}

#[derive(Deserialize)]
struct KickQuery {
    bound: Option<u64>,
}

async fn queue_action(
    State(broker): State<Arc<Broker>>,
    Path((queue, action)): Path<(String, String)>,
    Query(k): Query<KickQuery>,
) -> Result<Json<Value>, ApiError> {
    let now = Broker::now();
    let (result, lsn) = {
        let mut txn = broker.lock();
        let q = txn
            .queue_id(queue.as_bytes())
            .ok_or_else(|| not_found("queue"))?;
        let result = match action.as_str() {
            "kick" => json!({ "kicked": txn.kick(q, k.bound.unwrap_or(1).min(1_000_000), now) }),
            "pause" => {
                txn.pause_forever(q);
                json!({ "paused": true })
            }
            "resume" => {
                txn.resume(q, now);
                json!({ "paused": false })
            }
            other => {
                return Err(bad_request(format!(
                    "action {other:?}: use kick, pause or resume"
                )))
            }
        };
        (result, txn.commit())
    };
    broker.wait_durable(lsn).await;
    Ok(Json(result))
}

async fn drain(State(broker): State<Arc<Broker>>) -> Json<Value> {
    broker.start_draining();
    Json(json!({ "draining": true }))
}
