//! A flow worker's calls: lease from a stage (long poll), heartbeat, complete, fail and
//! delay. A lease carries a fencing token; every later call names the worker and the
//! token, and a token that is not the job's latest lease is refused with 409
//! `stale_token` (its lease ran out and the job may be elsewhere now).

use axum::extract::State;
use axum::Json;
use jobyard_broker::{Broker, Txn};
use jobyard_engine::flows::{stage_queue_name, FlowError, FlowOutcome};
use jobyard_engine::{ConnId, JobId, Lease, Millis};
use serde::Deserialize;
use serde_json::{Map, Value};

use crate::error::ApiError;
use crate::extract::{JsonBody, PathText};
use crate::flow_jobs::check_fields_size;
use crate::leases::{check_lease_ms, lease_for, CheckedLease, HeartbeatRequest};
use crate::limits::{MAX_DELAY_MS, MAX_WAIT_MS};
use crate::state::{Api, Command};

/// `POST /v1/stages/{stage}/lease`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StageLeaseRequest {
    /// The worker session to lease for; a new one is created when absent.
    worker: Option<String>,
    /// Lease length; the stage's `leaseMs` when absent.
    lease_ms: Option<u64>,
    /// How long to wait for a job when none is ready (0: answer at once).
    wait_ms: Option<u64>,
}

impl StageLeaseRequest {
    /// Checks the bounds; returns the lease asked for and how long to wait.
    pub(crate) fn checked(&self) -> Result<(Lease, u64), ApiError> {
        let lease = match check_lease_ms(self.lease_ms)? {
            Some(ms) => Lease::For(ms),
            None => Lease::JobTtr,
        };
        let wait_ms = self.wait_ms.unwrap_or(0);
        if wait_ms > MAX_WAIT_MS {
            return Err(ApiError::bad_request(format!(
                "wait_ms is at most {MAX_WAIT_MS}"
            )));
        }
        Ok((lease, wait_ms))
    }
}

/// Leases the best job of a stage (priority 1 first, then the oldest), or waits for one.
pub async fn lease(
    State(api): State<Api>,
    PathText(stage): PathText,
    JsonBody(req): JsonBody<StageLeaseRequest>,
) -> Result<Json<Value>, ApiError> {
    api.count(Command::LeaseStage);
    let (lease, wait_ms) = req.checked()?;
    if !api.broker.lock().flow_stage_declared(&stage) {
        return Err(FlowError::UnknownStage(stage).into());
    }
    let checked = CheckedLease {
        worker: req.worker,
        queues: vec![stage_queue_name(&stage)],
        lease,
        wait_ms,
    };
    lease_for(&api, checked, flow_hand_out).await
}

/// Takes the flow job's next token (logged with the hand-out) and describes the lease and
/// the worker function's input. A job in a stage queue that is not a flow job (put there
/// by other means) is given back.
fn flow_hand_out(
    txn: &mut Txn<'_>,
    conn: ConnId,
    id: JobId,
    lease_ms: Option<u64>,
) -> Option<Value> {
    let now = Broker::now();
    match txn.flow_hand_out(conn, id, lease_ms, now) {
        Some(l) => Some(serde_json::json!({
            "id": l.id,
            "stage": l.stage,
            "token": l.token,
            "deadline_ms": l.deadline,
            "lease_ms": l.deadline.saturating_sub(now),
            "input": l.job,
        })),
        None => {
            if let Some(pri) = txn.job(id).map(|j| j.pri) {
                txn.release(conn, id, pri, 0, now);
            }
            None
        }
    }
}

/// `POST /v1/flow-jobs/{id}/heartbeat` (the body of a plain job's heartbeat): extends a
/// lease; 409 if it is gone.
pub async fn heartbeat(
    State(api): State<Api>,
    PathText(id): PathText,
    JsonBody(req): JsonBody<HeartbeatRequest>,
) -> Result<Json<Value>, ApiError> {
    api.count(Command::FlowHeartbeat);
    let ms = req.checked()?;
    let worker = api.workers.get(&req.worker)?;
    let now = Broker::now();
    let deadline = api
        .broker
        .lock()
        .flow_heartbeat(worker.conn, &id, req.token, ms, now)?;
    Ok(Json(serde_json::json!({
        "id": id,
        "token": req.token,
        "deadline_ms": deadline,
        "lease_ms": deadline.saturating_sub(now),
    })))
}

/// `POST /v1/flow-jobs/{id}/complete`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CompleteRequest {
    worker: String,
    token: u32,
    /// Fields merged into the job state; `nextQueue` (if any) picks the next stage.
    result: Option<Map<String, Value>>,
}

impl CompleteRequest {
    /// Checks the result's size.
    pub(crate) fn checked(&self) -> Result<(), ApiError> {
        match &self.result {
            Some(result) => check_fields_size("result", result),
            None => Ok(()),
        }
    }
}

/// Completes the job's stage and moves it on (next stage, children, or the end).
pub async fn complete(
    State(api): State<Api>,
    PathText(id): PathText,
    JsonBody(req): JsonBody<CompleteRequest>,
) -> Result<Json<Value>, ApiError> {
    api.count(Command::FlowComplete);
    req.checked()?;
    let worker = api.workers.get(&req.worker)?;
    let result = req.result.unwrap_or_default();
    transition(&api, |txn, now| {
        txn.flow_complete(worker.conn, &id, req.token, result, now)
    })
    .await
}

/// `POST /v1/flow-jobs/{id}/fail`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FailRequest {
    worker: String,
    token: u32,
    /// Recorded as `failedErrorMsg` if no retry is left.
    error: Option<String>,
}

impl FailRequest {
    /// Checks the error's size.
    pub(crate) fn checked(&self) -> Result<(), ApiError> {
        if self
            .error
            .as_ref()
            .is_some_and(|e| e.len() > crate::limits::MAX_FIELDS_BYTES)
        {
            return Err(ApiError::bad_request("the error text is too long"));
        }
        Ok(())
    }
}

/// A failure: retried while the stage allows, else recorded.
pub async fn fail(
    State(api): State<Api>,
    PathText(id): PathText,
    JsonBody(req): JsonBody<FailRequest>,
) -> Result<Json<Value>, ApiError> {
    api.count(Command::FlowFail);
    req.checked()?;
    let worker = api.workers.get(&req.worker)?;
    let error = req.error.unwrap_or_default();
    transition(&api, |txn, now| {
        txn.flow_fail(worker.conn, &id, req.token, &error, now)
    })
    .await
}

/// `POST /v1/flow-jobs/{id}/delay`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DelayRequest {
    worker: String,
    token: u32,
    /// Wall-clock milliseconds since the epoch when the job is ready again.
    ready_at_ms: Millis,
    reason: Option<String>,
}

impl DelayRequest {
    /// Checks the time (at most [`MAX_DELAY_MS`] ahead) and the reason's size.
    pub(crate) fn checked(&self, now: Millis) -> Result<(), ApiError> {
        if self.ready_at_ms > now.saturating_add(MAX_DELAY_MS) {
            return Err(ApiError::bad_request(format!(
                "ready_at_ms is at most {MAX_DELAY_MS} ms from now"
            )));
        }
        if self.reason.as_ref().is_some_and(|r| r.len() > 4096) {
            return Err(ApiError::bad_request("reason is at most 4096 bytes"));
        }
        Ok(())
    }
}

/// Guild's `DelayError`: the job waits in its stage until `ready_at_ms`.
pub async fn delay(
    State(api): State<Api>,
    PathText(id): PathText,
    JsonBody(req): JsonBody<DelayRequest>,
) -> Result<Json<Value>, ApiError> {
    api.count(Command::FlowDelay);
    req.checked(Broker::now())?;
    let worker = api.workers.get(&req.worker)?;
    let reason = req.reason.unwrap_or_default();
    transition(&api, |txn, now| {
        txn.flow_delay(worker.conn, &id, req.token, req.ready_at_ms, &reason, now)
    })
    .await
}

/// Runs one flow transition, waits until the log holds it, and answers with where it
/// left the job.
async fn transition(
    api: &Api,
    op: impl FnOnce(&mut Txn<'_>, Millis) -> Result<FlowOutcome, FlowError>,
) -> Result<Json<Value>, ApiError> {
    let (out, lsn) = {
        let mut txn = api.broker.lock();
        let out = op(&mut txn, Broker::now())?;
        (out, txn.commit())
    };
    api.broker.wait_durable(lsn).await;
    Ok(Json(serde_json::json!({
        "id": out.id,
        "stage": out.stage,
        "status": out.status,
    })))
}
