//! Jobs: put one on a queue, describe it, delete it, wait for its result.

use std::time::Duration;

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use jobyard_broker::{Broker, ProtocolMetrics};
use jobyard_engine::{
    EndStatus, JobEnd, JobState, NewJob, NoticeKind, DEFAULT_PRIORITY, DEFAULT_TTR,
};
use serde::Deserialize;
use serde_json::{Map, Value};

use crate::encoding::{attributes_in, attributes_out, bytes_in, bytes_out, preview_out};
use crate::error::ApiError;
use crate::extract::{job_id, JsonBody, Params, PathText};
use crate::leasing::holder;
use crate::limits::{BODY_PREVIEW_BYTES, MAX_WAIT_MS};
use crate::queues::check_plain_queue;
use crate::state::{Api, Command};

/// `POST /v1/queues/{queue}/jobs`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PutRequest {
    body: Option<String>,
    body_base64: Option<String>,
    priority: Option<u32>,
    /// Seconds before the job is ready.
    delay: Option<u32>,
    /// Seconds a lease lasts unless the lease request says otherwise.
    ttr: Option<u32>,
    attributes: Option<Value>,
}

/// Refuses a new job of about `bytes` while the server takes none: draining (503), or the
/// log has no room for it (507), as beanstalkd answers `DRAINING` and `OUT_OF_MEMORY`.
pub(crate) fn refuse_new_jobs(api: &Api, bytes: usize) -> Result<(), ApiError> {
    if api.broker.draining() {
        return Err(ApiError::draining());
    }
    if api
        .broker
        .log()
        .is_some_and(|log| !log.has_room(bytes + 64))
    {
        return Err(ApiError::no_room());
    }
    Ok(())
}

/// A put that passed every check: what goes into the engine.
pub(crate) struct CheckedPut {
    body: bytes::Bytes,
    attrs: Option<bytes::Bytes>,
    pri: u32,
    delay: u32,
    ttr: u32,
}

impl PutRequest {
    /// Decodes the body and checks every bound.
    pub(crate) fn checked(self, max_job_size: u32) -> Result<CheckedPut, ApiError> {
        Ok(CheckedPut {
            body: bytes_in(self.body, self.body_base64, "body", max_job_size)?,
            attrs: attributes_in(self.attributes)?,
            pri: self.priority.unwrap_or(DEFAULT_PRIORITY),
            delay: self.delay.unwrap_or(0),
            ttr: self.ttr.unwrap_or(DEFAULT_TTR).max(1),
        })
    }
}

/// Puts a job and answers once it is durable.
pub async fn put(
    State(api): State<Api>,
    PathText(queue): PathText,
    JsonBody(req): JsonBody<PutRequest>,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    api.count(Command::Put);
    check_plain_queue(&queue)?;
    let req = req.checked(api.config.max_job_size)?;
    refuse_new_jobs(&api, req.body.len())?;
    let now = Broker::now();
    let delay = req.delay;
    let (id, lsn) = {
        let mut txn = api.broker.lock();
        let q = txn.queue_id_or_create(queue.as_bytes());
        let put = txn.put_job(
            NewJob {
                queue: q,
                pri: req.pri,
                ttr: req.ttr,
                ready_at: if delay > 0 {
                    now + delay as u64 * 1000
                } else {
                    0
                },
                delay,
                body: req.body,
                unique: None,
                durable: true,
                attrs: req.attrs,
            },
            now,
        );
        (put.id, txn.commit())
    };
    api.broker.wait_durable(lsn).await;
    ProtocolMetrics::inc(&api.metrics.jobs_created);
    let state = if delay > 0 { "delayed" } else { "ready" };
    Ok((
        StatusCode::CREATED,
        Json(serde_json::json!({ "id": id, "queue": queue, "state": state })),
    ))
}

/// `GET /v1/jobs/{id}`.
pub async fn get(State(api): State<Api>, PathText(id): PathText) -> Result<Json<Value>, ApiError> {
    api.count(Command::GetJob);
    let id = job_id(&id)?;
    let txn = api.broker.lock();
    let job = txn.job(id).ok_or_else(|| ApiError::job_not_found(id))?;
    let now = Broker::now();
    let mut obj = Map::new();
    obj.insert("id".into(), id.into());
    bytes_out(&mut obj, "queue", &txn.queue(job.queue).name);
    obj.insert("state".into(), job.state.as_str().into());
    obj.insert("priority".into(), job.pri.into());
    obj.insert("ttr".into(), job.ttr.into());
    obj.insert("delay".into(), job.delay.into());
    obj.insert("attempts".into(), job.reserves.into());
    obj.insert("timeouts".into(), job.timeouts.into());
    obj.insert("releases".into(), job.releases.into());
    obj.insert("buries".into(), job.buries.into());
    obj.insert("kicks".into(), job.kicks.into());
    obj.insert("durable".into(), job.durable.into());
    obj.insert("watchers".into(), txn.watcher_count(id).into());
    obj.insert("created_ms".into(), job.created.into());
    obj.insert("age_ms".into(), now.saturating_sub(job.created).into());
    let left = match job.state {
        JobState::Delayed | JobState::Reserved if job.due > 0 => {
            Value::from(job.due.saturating_sub(now))
        }
        _ => Value::Null,
    };
    obj.insert("time_left_ms".into(), left);
    if let Some(key) = txn.unique_of(id) {
        bytes_out(&mut obj, "unique", key);
    }
    attributes_out(&mut obj, txn.attrs_of(id));
    let body = txn.body(job).map_err(|e| {
        ApiError::new(
            axum::http::StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            format!("cannot read the body back from the log: {e}"),
        )
    })?;
    preview_out(&mut obj, &body, BODY_PREVIEW_BYTES);
    Ok(Json(Value::Object(obj)))
}

/// Names the holder of a leased job (query parameters of `DELETE /v1/jobs/{id}`).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HolderQuery {
    worker: Option<String>,
    token: Option<u32>,
}

/// `DELETE /v1/jobs/{id}`: removes a job that is not leased, or one this worker holds.
pub async fn delete(
    State(api): State<Api>,
    PathText(id): PathText,
    Params(q): Params<HolderQuery>,
) -> Result<Json<Value>, ApiError> {
    api.count(Command::DeleteJob);
    let id = job_id(&id)?;
    let worker = match &q.worker {
        Some(w) => Some(api.workers.get(w)?),
        None => None,
    };
    let lsn = {
        let mut txn = api.broker.lock();
        let job = txn.job(id).ok_or_else(|| ApiError::job_not_found(id))?;
        if txn.is_flow_engine_job(id) {
            return Err(ApiError::bad_request(format!(
                "job {id} stands for a flow job in its stage: delete it with DELETE /v1/flow-jobs/{{id}}"
            )));
        }
        let conn = match (job.state, &worker) {
            (JobState::Reserved, Some(w)) => holder(&txn, w.conn, id, q.token)?,
            (JobState::Reserved, None) => return Err(ApiError::leased(id)),
            _ => api.anonymous,
        };
        if !txn.finish(conn, id, JobEnd::deleted()) {
            return Err(ApiError::leased(id));
        }
        txn.commit()
    };
    api.broker.wait_durable(lsn).await;
    Ok(Json(serde_json::json!({ "id": id, "deleted": true })))
}

/// `GET /v1/jobs/{id}/result`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ResultQuery {
    wait_ms: Option<u64>,
}

/// Gives up the watch and the session when the request ends, however it ends (a client
/// that hangs up drops the handler mid-wait).
struct Watching<'a> {
    api: &'a Api,
    conn: u64,
}

impl Drop for Watching<'_> {
    fn drop(&mut self) {
        self.api.broker.disconnect(self.conn);
    }
}

/// `GET /v1/jobs/{id}/result?wait_ms=N`: the job's outcome once it ends, whichever
/// protocol ends it, waiting up to `wait_ms`. Outcomes are not kept: only a request
/// waiting when the job ends hears it.
pub async fn result(
    State(api): State<Api>,
    PathText(id): PathText,
    Params(q): Params<ResultQuery>,
) -> Result<Json<Value>, ApiError> {
    api.count(Command::JobResult);
    let id = job_id(&id)?;
    let wait_ms = q.wait_ms.unwrap_or(0);
    if wait_ms > MAX_WAIT_MS {
        return Err(ApiError::bad_request(format!(
            "wait_ms is at most {MAX_WAIT_MS}"
        )));
    }
    if wait_ms == 0 {
        let txn = api.broker.lock();
        let job = txn.job(id).ok_or_else(|| ApiError::job_not_found(id))?;
        return Ok(Json(pending(id, job.state)));
    }
    let Some(_slot) = api.gate.try_enter("an HTTP result wait") else {
        ProtocolMetrics::inc(&api.metrics.refused);
        return Err(ApiError::too_many_sessions());
    };
    let (conn, mut mailbox) = api.broker.connect();
    let _watching = Watching { api: &api, conn };
    {
        let mut txn = api.broker.lock();
        if !txn.watch(conn, id) {
            return Err(ApiError::job_not_found(id));
        }
    }
    let mut shutdown = api.gate.shutdown_signal();
    if *shutdown.borrow() {
        return Err(ApiError::shutting_down());
    }
    let deadline = tokio::time::sleep(Duration::from_millis(wait_ms));
    tokio::pin!(deadline);
    loop {
        tokio::select! {
            notice = mailbox.recv() => match notice {
                Some(NoticeKind::Ended(ended, end)) if ended == id => {
                    return Ok(Json(outcome(id, &end)));
                }
                Some(_) => continue,
                None => return Err(ApiError::shutting_down()),
            },
            _ = &mut deadline => {
                let txn = api.broker.lock();
                let job = txn.job(id).ok_or_else(|| ApiError::job_not_found(id))?;
                return Ok(Json(pending(id, job.state)));
            }
            _ = shutdown.wait_for(|&stopping| stopping) => return Err(ApiError::shutting_down()),
        }
    }
}

fn pending(id: u64, state: JobState) -> Value {
    serde_json::json!({ "id": id, "ended": false, "state": state.as_str() })
}

fn outcome(id: u64, end: &JobEnd) -> Value {
    let mut obj = Map::new();
    obj.insert("id".into(), id.into());
    obj.insert("ended".into(), true.into());
    obj.insert("status".into(), end.status.as_str().into());
    if end.status != EndStatus::Deleted || !end.result.is_empty() {
        bytes_out(&mut obj, "result", &end.result);
    }
    if let Some(e) = &end.error {
        bytes_out(&mut obj, "error", e);
    }
    if let Some(c) = end.exit_code {
        obj.insert("exit_code".into(), c.into());
    }
    if let Some(s) = end.signal {
        obj.insert("signal".into(), s.into());
    }
    Value::Object(obj)
}
