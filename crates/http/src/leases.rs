//! The routes of a plain job's lease: lease (long poll), heartbeat, complete, fail,
//! release and route. Each names the worker and the fencing token it was handed with the
//! lease; the machinery they share with flows' work routes is `leasing`.

use axum::extract::State;
use axum::Json;
use jobyard_broker::{Broker, ProtocolMetrics, Txn};
use jobyard_engine::{ConnId, JobEnd, JobId, Lease};
use serde::Deserialize;
use serde_json::{Map, Value};

use crate::encoding::{attributes_in, attributes_out, bytes_in, bytes_out};
use crate::error::ApiError;
use crate::extract::{job_id, JsonBody, PathText};
use crate::leasing::{check_lease_ms, holder, lease_for, CheckedLease};
use crate::limits::{MAX_LEASE_QUEUES, MAX_WAIT_MS};
use crate::queues::check_plain_queue;
use crate::state::{Api, Command};

/// `POST /v1/lease`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LeaseRequest {
    /// The worker session to lease for; a new one is created when absent.
    worker: Option<String>,
    queues: Vec<String>,
    /// Lease length; the job's `ttr` when absent.
    lease_ms: Option<u64>,
    /// How long to wait for a job when none is ready (0: answer at once).
    wait_ms: Option<u64>,
}

impl LeaseRequest {
    /// Checks every bound.
    pub(crate) fn checked(self) -> Result<CheckedLease, ApiError> {
        if self.queues.is_empty() || self.queues.len() > MAX_LEASE_QUEUES {
            return Err(ApiError::bad_request(format!(
                "`queues` names 1 to {MAX_LEASE_QUEUES} queues"
            )));
        }
        for q in &self.queues {
            check_plain_queue(q)?;
        }
        let lease = match check_lease_ms(self.lease_ms)? {
            None => Lease::JobTtr,
            Some(ms) => Lease::For(ms),
        };
        let wait_ms = self.wait_ms.unwrap_or(0);
        if wait_ms > MAX_WAIT_MS {
            return Err(ApiError::bad_request(format!(
                "wait_ms is at most {MAX_WAIT_MS}"
            )));
        }
        Ok(CheckedLease {
            worker: self.worker,
            queues: self.queues,
            lease,
            wait_ms,
        })
    }
}

/// Leases the best ready job of the queues, or waits for one (long poll), for a worker
/// session; fences it before answering.
pub async fn lease(
    State(api): State<Api>,
    JsonBody(req): JsonBody<LeaseRequest>,
) -> Result<Json<Value>, ApiError> {
    api.count(Command::Lease);
    lease_for(&api, req.checked()?, plain_hand_out).await
}

/// Fences a leased plain job and describes it for the worker.
fn plain_hand_out(txn: &mut Txn<'_>, conn: ConnId, id: JobId, _: Option<u64>) -> Option<Value> {
    txn.fence(conn, id).map(|token| {
        let job = txn.job(id).expect("fenced job exists");
        let mut obj = Map::new();
        obj.insert("id".into(), id.into());
        bytes_out(&mut obj, "queue", &txn.queue(job.queue).name);
        obj.insert("token".into(), token.into());
        obj.insert("priority".into(), job.pri.into());
        obj.insert("deadline_ms".into(), job.due.into());
        obj.insert(
            "lease_ms".into(),
            job.due.saturating_sub(Broker::now()).into(),
        );
        obj.insert("ttr".into(), job.ttr.into());
        match txn.body(job) {
            Ok(body) => bytes_out(&mut obj, "body", &body),
            // The lease stands; the worker is told instead of handed a wrong body.
            Err(e) => {
                obj.insert("body_error".into(), e.to_string().into());
            }
        }
        attributes_out(&mut obj, txn.attrs_of(id));
        Value::Object(obj)
    })
}

/// `POST /v1/jobs/{id}/heartbeat`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HeartbeatRequest {
    /// The worker holding the lease and the token it was handed with it.
    pub(crate) worker: String,
    pub(crate) token: u32,
    /// New lease length from now; absent, the job's `ttr` (a flow stage's `leaseMs`).
    pub(crate) lease_ms: Option<u64>,
}

impl HeartbeatRequest {
    /// Checks the lease length asked for; the lease length, if one was asked for.
    pub(crate) fn checked(&self) -> Result<Option<u64>, ApiError> {
        check_lease_ms(self.lease_ms)
    }
}

/// Restarts a lease's clock.
pub async fn heartbeat(
    State(api): State<Api>,
    PathText(id): PathText,
    JsonBody(req): JsonBody<HeartbeatRequest>,
) -> Result<Json<Value>, ApiError> {
    api.count(Command::Heartbeat);
    let id = job_id(&id)?;
    req.checked()?;
    let worker = api.workers.get(&req.worker)?;
    let mut txn = api.broker.lock();
    let conn = holder(&txn, worker.conn, id, Some(req.token))?;
    let now = Broker::now();
    match req.lease_ms {
        Some(ms) => txn.touch_for(conn, id, ms, now),
        None => txn.touch(conn, id, now),
    };
    let due = txn.job(id).map_or(0, |j| j.due);
    drop(txn);
    Ok(Json(serde_json::json!({
        "id": id,
        "token": req.token,
        "deadline_ms": due,
        "lease_ms": due.saturating_sub(now),
    })))
}

/// `POST /v1/jobs/{id}/complete`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CompleteRequest {
    /// The worker holding the lease and the token it was handed with it.
    worker: String,
    token: u32,
    result: Option<String>,
    result_base64: Option<String>,
}

impl CompleteRequest {
    /// The end it asks for, its result bounded by the job size limit.
    pub(crate) fn checked(self, max_job_size: u32) -> Result<JobEnd, ApiError> {
        let result = bytes_in(self.result, self.result_base64, "result", max_job_size)?;
        Ok(JobEnd::ok(result))
    }
}

/// Ends a leased job successfully; its waiters get the result.
pub async fn complete(
    State(api): State<Api>,
    PathText(id): PathText,
    JsonBody(req): JsonBody<CompleteRequest>,
) -> Result<Json<Value>, ApiError> {
    api.count(Command::Complete);
    let id = job_id(&id)?;
    let (worker, token) = (req.worker.clone(), req.token);
    let end_ok = req.checked(api.config.max_job_size)?;
    end(&api, id, &worker, token, end_ok).await?;
    ProtocolMetrics::inc(&api.metrics.jobs_completed);
    Ok(Json(serde_json::json!({ "id": id, "status": "ok" })))
}

/// `POST /v1/jobs/{id}/fail`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FailRequest {
    /// The worker holding the lease and the token it was handed with it.
    worker: String,
    token: u32,
    error: Option<String>,
}

impl FailRequest {
    /// The end it asks for, its error bounded by the job size limit.
    pub(crate) fn checked(self, max_job_size: u32) -> Result<JobEnd, ApiError> {
        let error = bytes_in(self.error, None, "error", max_job_size)?;
        Ok(JobEnd::failed((!error.is_empty()).then_some(error)))
    }
}

/// Ends a leased job as failed for good; its waiters get the error.
pub async fn fail(
    State(api): State<Api>,
    PathText(id): PathText,
    JsonBody(req): JsonBody<FailRequest>,
) -> Result<Json<Value>, ApiError> {
    api.count(Command::Fail);
    let id = job_id(&id)?;
    let (worker, token) = (req.worker.clone(), req.token);
    let failure = req.checked(api.config.max_job_size)?;
    end(&api, id, &worker, token, failure).await?;
    ProtocolMetrics::inc(&api.metrics.jobs_failed);
    Ok(Json(serde_json::json!({ "id": id, "status": "failed" })))
}

async fn end(api: &Api, id: JobId, worker: &str, token: u32, end: JobEnd) -> Result<(), ApiError> {
    let worker = api.workers.get(worker)?;
    let lsn = {
        let mut txn = api.broker.lock();
        let conn = holder(&txn, worker.conn, id, Some(token))?;
        txn.finish(conn, id, end);
        txn.commit()
    };
    api.broker.wait_durable(lsn).await;
    Ok(())
}

/// `POST /v1/jobs/{id}/release`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReleaseRequest {
    /// The worker holding the lease and the token it was handed with it.
    worker: String,
    token: u32,
    /// The job's priority from now on; unchanged when absent.
    priority: Option<u32>,
    /// Seconds before it is ready again.
    delay: Option<u32>,
}

/// Gives a leased job back, ready now or after a delay.
pub async fn release(
    State(api): State<Api>,
    PathText(id): PathText,
    JsonBody(req): JsonBody<ReleaseRequest>,
) -> Result<Json<Value>, ApiError> {
    api.count(Command::Release);
    let id = job_id(&id)?;
    let worker = api.workers.get(&req.worker)?;
    let delay = req.delay.unwrap_or(0);
    let lsn = {
        let mut txn = api.broker.lock();
        let conn = holder(&txn, worker.conn, id, Some(req.token))?;
        let pri = req
            .priority
            .unwrap_or_else(|| txn.job(id).expect("held job exists").pri);
        txn.release(conn, id, pri, delay, Broker::now());
        txn.commit()
    };
    api.broker.wait_durable(lsn).await;
    let state = if delay > 0 { "delayed" } else { "ready" };
    Ok(Json(serde_json::json!({ "id": id, "state": state })))
}

/// `POST /v1/jobs/{id}/route`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RouteRequest {
    /// The worker holding the lease and the token it was handed with it.
    worker: String,
    token: u32,
    /// The queue the job moves to.
    queue: String,
    /// Its priority there; unchanged when absent.
    priority: Option<u32>,
    /// Its attributes from now on; unchanged when absent.
    attributes: Option<Value>,
}

/// A route that passed every check.
pub(crate) struct CheckedRoute {
    worker: String,
    token: u32,
    queue: String,
    priority: Option<u32>,
    attrs: Option<bytes::Bytes>,
}

impl RouteRequest {
    /// Checks the queue name and the attributes' size.
    pub(crate) fn checked(self) -> Result<CheckedRoute, ApiError> {
        check_plain_queue(&self.queue)?;
        Ok(CheckedRoute {
            attrs: attributes_in(self.attributes)?,
            worker: self.worker,
            token: self.token,
            queue: self.queue,
            priority: self.priority,
        })
    }
}

/// Ends the job's lease and moves it, ready, to another queue in one durable step: this
/// stage is done and the next one's workers can take it. The job keeps its id, body and
/// waiters; its next lease has the next token.
pub async fn route(
    State(api): State<Api>,
    PathText(id): PathText,
    JsonBody(req): JsonBody<RouteRequest>,
) -> Result<Json<Value>, ApiError> {
    api.count(Command::Route);
    let id = job_id(&id)?;
    let req = req.checked()?;
    let worker = api.workers.get(&req.worker)?;
    let lsn = {
        let mut txn = api.broker.lock();
        let conn = holder(&txn, worker.conn, id, Some(req.token))?;
        if txn.unique_of(id).is_some() {
            return Err(ApiError::not_routable(id));
        }
        let pri = req
            .priority
            .unwrap_or_else(|| txn.job(id).expect("held job exists").pri);
        let to = txn.queue_id_or_create(req.queue.as_bytes());
        txn.route(conn, id, to, pri, req.attrs, Broker::now());
        txn.commit()
    };
    api.broker.wait_durable(lsn).await;
    Ok(Json(
        serde_json::json!({ "id": id, "queue": req.queue, "state": "ready" }),
    ))
}
