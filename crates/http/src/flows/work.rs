//! A flow worker's calls: lease from a stage (long poll), heartbeat, complete, fail and
//! delay. A lease carries a fencing token; every later call names the worker and the
//! token, and a token that is not the job's latest lease is refused with 409
//! `stale_token` (its lease ran out and the job may be elsewhere now).

use std::sync::Arc;

use axum::extract::State;
use axum::Json;
use jobyard_broker::{Broker, Txn};
use jobyard_engine::flows::{stage_queue_name, FlowError, FlowOutcome};
use jobyard_engine::{ConnId, JobId, Lease, Millis};
use serde::Deserialize;
use serde_json::{Map, Value};

use crate::error::ApiError;
use crate::extract::{JsonBody, PathText};
use crate::flows::jobs::check_fields_size;
use crate::leases::HeartbeatRequest;
use crate::leasing::{
    check_lease_ms, lease_after, lease_for, let_handed_lease_answer_first, CheckedLease,
    LeaseOutcome, LeaseSpec,
};
use crate::limits::{MAX_DELAY_MS, MAX_WAIT_MS};
use crate::state::{Api, Command};
use crate::workers::Worker;

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
        check_lease_and_wait(self.lease_ms, self.wait_ms)
    }
}

/// A lease length (the stage's `leaseMs` when absent) and a wait (0 when absent), checked.
fn check_lease_and_wait(
    lease_ms: Option<u64>,
    wait_ms: Option<u64>,
) -> Result<(Lease, u64), ApiError> {
    let lease = match check_lease_ms(lease_ms)? {
        Some(ms) => Lease::For(ms),
        None => Lease::JobTtr,
    };
    let wait_ms = wait_ms.unwrap_or(0);
    if wait_ms > MAX_WAIT_MS {
        return Err(ApiError::bad_request(format!(
            "wait_ms is at most {MAX_WAIT_MS}"
        )));
    }
    Ok((lease, wait_ms))
}

/// `next` in a complete, fail or delay: in the same request, lease the worker's next job
/// of the stage the reported job was leased from (the reply's `next` is what a stage
/// lease would answer). Saves a worker that is kept busy one round trip per job.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NextLease {
    /// Lease length; the stage's `leaseMs` when absent.
    lease_ms: Option<u64>,
    /// How long to wait for a job when none is ready (0, the default: answer at once).
    wait_ms: Option<u64>,
}

impl NextLease {
    /// Checks the bounds of an optional `next`.
    fn checked(next: &Option<NextLease>) -> Result<Option<(Lease, u64)>, ApiError> {
        next.as_ref()
            .map(|n| check_lease_and_wait(n.lease_ms, n.wait_ms))
            .transpose()
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
    /// Also lease the worker's next job (see [`NextLease`]).
    next: Option<NextLease>,
}

impl CompleteRequest {
    /// Checks the result's size and `next`.
    pub(crate) fn checked(&self) -> Result<Option<(Lease, u64)>, ApiError> {
        if let Some(result) = &self.result {
            check_fields_size("result", result)?;
        }
        NextLease::checked(&self.next)
    }
}

/// Completes the job's stage and moves it on (next stage, children, or the end).
pub async fn complete(
    State(api): State<Api>,
    PathText(id): PathText,
    JsonBody(req): JsonBody<CompleteRequest>,
) -> Result<Json<Value>, ApiError> {
    api.count(Command::FlowComplete);
    let next = req.checked()?;
    let worker = api.workers.get(&req.worker)?;
    let result = req.result.unwrap_or_default();
    let conn = worker.conn;
    transition(&api, &id, worker, next, |txn, now| {
        txn.flow_complete(conn, &id, req.token, result, now)
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
    /// Also lease the worker's next job (see [`NextLease`]).
    next: Option<NextLease>,
}

impl FailRequest {
    /// Checks the error's size and `next`.
    pub(crate) fn checked(&self) -> Result<Option<(Lease, u64)>, ApiError> {
        if self
            .error
            .as_ref()
            .is_some_and(|e| e.len() > crate::limits::MAX_FIELDS_BYTES)
        {
            return Err(ApiError::bad_request("the error text is too long"));
        }
        NextLease::checked(&self.next)
    }
}

/// A failure: retried while the stage allows, else recorded.
pub async fn fail(
    State(api): State<Api>,
    PathText(id): PathText,
    JsonBody(req): JsonBody<FailRequest>,
) -> Result<Json<Value>, ApiError> {
    api.count(Command::FlowFail);
    let next = req.checked()?;
    let worker = api.workers.get(&req.worker)?;
    let error = req.error.unwrap_or_default();
    let conn = worker.conn;
    transition(&api, &id, worker, next, |txn, now| {
        txn.flow_fail(conn, &id, req.token, &error, now)
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
    /// Also lease the worker's next job (see [`NextLease`]).
    next: Option<NextLease>,
}

impl DelayRequest {
    /// Checks the time (at most [`MAX_DELAY_MS`] ahead), the reason's size and `next`.
    pub(crate) fn checked(&self, now: Millis) -> Result<Option<(Lease, u64)>, ApiError> {
        if self.ready_at_ms > now.saturating_add(MAX_DELAY_MS) {
            return Err(ApiError::bad_request(format!(
                "ready_at_ms is at most {MAX_DELAY_MS} ms from now"
            )));
        }
        if self.reason.as_ref().is_some_and(|r| r.len() > 4096) {
            return Err(ApiError::bad_request("reason is at most 4096 bytes"));
        }
        NextLease::checked(&self.next)
    }
}

/// Guild's `DelayError`: the job waits in its stage until `ready_at_ms`.
pub async fn delay(
    State(api): State<Api>,
    PathText(id): PathText,
    JsonBody(req): JsonBody<DelayRequest>,
) -> Result<Json<Value>, ApiError> {
    api.count(Command::FlowDelay);
    let next = req.checked(Broker::now())?;
    let worker = api.workers.get(&req.worker)?;
    let reason = req.reason.unwrap_or_default();
    let conn = worker.conn;
    transition(&api, &id, worker, next, |txn, now| {
        txn.flow_delay(conn, &id, req.token, req.ready_at_ms, &reason, now)
    })
    .await
}

/// Runs one flow transition, waits until the log holds it, and answers with where it
/// left the job; with `next`, leases the worker's next job of the job's stage in the same
/// engine transaction (see [`lease_after`]) and adds it to the answer as `next`.
async fn transition(
    api: &Api,
    id: &str,
    worker: Arc<Worker>,
    next: Option<(Lease, u64)>,
    op: impl FnOnce(&mut Txn<'_>, Millis) -> Result<FlowOutcome, FlowError>,
) -> Result<Json<Value>, ApiError> {
    let Some((lease, wait_ms)) = next else {
        let (out, (lsn, handed_off)) = {
            let mut txn = api.broker.lock();
            let out = op(&mut txn, Broker::now())?;
            (out, txn.commit_handing_off())
        };
        let_handed_lease_answer_first(handed_off).await;
        api.broker.wait_durable(lsn).await;
        return Ok(Json(outcome_json(out)));
    };
    // The stage the job is in now is the one its holder leased it from: only the holder
    // moves it, and `op` refuses anyone else.
    let stage = api
        .broker
        .lock()
        .flow_job(id)
        .map(|j| j.stage.clone())
        .ok_or_else(|| FlowError::NotFound(id.to_string()))?;
    let spec = LeaseSpec {
        queues: vec![stage_queue_name(&stage)],
        lease,
        wait_ms,
        hand: flow_hand_out,
    };
    let (out, leased) = lease_after(api, &worker, spec, |txn| {
        op(txn, Broker::now()).map_err(ApiError::from)
    })
    .await?;
    let mut reply = outcome_json(out);
    reply["next"] = match leased {
        LeaseOutcome::Answered(next) => next,
        LeaseOutcome::ShuttingDown => serde_json::json!({ "worker": worker.id(), "job": null }),
    };
    Ok(Json(reply))
}

/// Where a transition left the job, as the reply says it.
fn outcome_json(out: FlowOutcome) -> Value {
    serde_json::json!({
        "id": out.id,
        "stage": out.stage,
        "status": out.status,
    })
}

#[cfg(test)]
mod tests {
    use axum::http::StatusCode;
    use serde_json::{json, Value};

    use crate::test_support::{error_code, TestApi};

    /// An API with a one-stage flow `wf` (stage `wf-only`) and one job in it; the job's id.
    async fn one_job() -> (TestApi, String) {
        let api = TestApi::new();
        let def = json!({ "name": "wf", "stages": [{ "name": "wf-only" }] });
        let (status, reply) = api.post("/v1/flows", def).await;
        assert_eq!(status, StatusCode::CREATED, "{reply}");
        let (status, reply) = api.post("/v1/flows/wf/jobs", json!({})).await;
        assert_eq!(status, StatusCode::CREATED, "{reply}");
        let id = reply["id"].as_str().expect("a flow job id").to_string();
        (api, id)
    }

    async fn lease_stage(api: &TestApi) -> Value {
        let (status, reply) = api.post("/v1/stages/wf-only/lease", json!({})).await;
        assert_eq!(status, StatusCode::OK, "{reply}");
        reply
    }

    #[tokio::test]
    async fn a_stage_job_is_leased_with_a_token_and_completed_with_it() {
        let (api, id) = one_job().await;
        let reply = lease_stage(&api).await;
        let job = &reply["job"];
        assert_eq!(job["id"], id.as_str());
        assert_eq!(job["stage"], "wf-only");
        let token = job["token"].as_u64().expect("a token");
        assert!(token >= 1, "{job}");
        let done = json!({ "worker": reply["worker"], "token": token, "result": { "x": 1 } });
        let (status, ended) = api
            .post(&format!("/v1/flow-jobs/{id}/complete"), done)
            .await;
        assert_eq!(status, StatusCode::OK, "{ended}");
        assert_eq!(ended["id"], id.as_str());
        assert_eq!(ended["status"], "done", "the only stage was its last");
        assert!(lease_stage(&api).await["job"].is_null(), "nothing left");
    }

    #[tokio::test]
    async fn a_wrong_token_is_refused_and_the_lease_stands() {
        let (api, id) = one_job().await;
        let reply = lease_stage(&api).await;
        let token = reply["job"]["token"].as_u64().expect("a token");
        let wrong = json!({ "worker": reply["worker"], "token": token + 1 });
        let (status, refused) = api
            .post(&format!("/v1/flow-jobs/{id}/complete"), wrong)
            .await;
        assert_eq!(status, StatusCode::CONFLICT, "{refused}");
        assert_eq!(error_code(&refused), "stale_token");
        let right = json!({ "worker": reply["worker"], "token": token });
        let (status, ended) = api
            .post(&format!("/v1/flow-jobs/{id}/complete"), right)
            .await;
        assert_eq!(status, StatusCode::OK, "{ended}");
    }
}
