//! Leasing jobs and what a lease holder does with them: heartbeat, complete, fail, release.
//!
//! A lease belongs to a worker session (see `workers`) and carries a fencing token: the
//! job's attempt number, logged by `Engine::fence` before the job is handed out, so no
//! token is ever handed out twice, also across restarts. Every call of a holder names the
//! worker and the token; a token that is not the job's current attempt is refused with 409
//! `stale_token` (the lease it came with ended and the job may be elsewhere now).

use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::Json;
use jobyard_broker::{Broker, Mailbox, ProtocolMetrics, Txn};
use jobyard_engine::{
    ConnId, Engine, JobEnd, JobId, Lease, NoticeKind, QueueId, ReserveOutcome, WaitMode,
};
use serde::Deserialize;
use serde_json::{Map, Value};

use crate::encoding::{attributes_in, attributes_out, bytes_in, bytes_out};
use crate::error::ApiError;
use crate::extract::{job_id, JsonBody, PathText};
use crate::limits::{MAX_LEASE_MS, MAX_LEASE_QUEUES, MAX_WAIT_MS};
use crate::queues::check_plain_queue;
use crate::state::{Api, Command};
use crate::workers::Worker;

/// Checks that `conn` holds job `id` under `token`, and returns `conn`. The token is
/// checked first: it says most precisely what happened to a lease that is gone.
pub(crate) fn holder(
    engine: &Engine,
    conn: ConnId,
    id: JobId,
    token: Option<u32>,
) -> Result<ConnId, ApiError> {
    let job = engine.job(id).ok_or_else(|| ApiError::job_not_found(id))?;
    let Some(token) = token else {
        return Err(ApiError::bad_request("`token` is required with `worker`"));
    };
    if token != job.reserves {
        return Err(ApiError::stale_token(id, job.reserves));
    }
    if job.state != jobyard_engine::JobState::Reserved || job.owner != conn {
        return Err(ApiError::not_leased(id));
    }
    Ok(conn)
}

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

/// The consumer references a lease request holds on its queues (so a queue it waits on
/// exists), and its wait: both given back when the request ends, however it ends. A
/// client that hangs up drops the handler mid-wait; a job the engine handed to the
/// worker meanwhile is then released at once rather than held until its lease ends.
struct LeaseWait<'a> {
    api: &'a Api,
    worker: &'a Worker,
    mailbox: tokio::sync::MutexGuard<'a, Mailbox>,
    queues: Vec<QueueId>,
    settled: bool,
    /// Turns a job the engine leased to the worker into the reply's job.
    hand: HandOut,
    /// The lease length the request asked for (the hand-out may need it).
    lease_ms: Option<u64>,
}

/// Fences a job the engine just leased to `conn` and describes it for the worker (`None`
/// if it cannot be handed out after all). Plain jobs and flow jobs differ only here.
pub(crate) type HandOut = fn(&mut Txn<'_>, ConnId, JobId, Option<u64>) -> Option<Value>;

impl LeaseWait<'_> {
    /// Gives the queue references back within `txn`; the request has its answer.
    fn settle(&mut self, txn: &mut Txn<'_>) {
        for &q in &self.queues {
            txn.remove_consumer(q);
        }
        self.settled = true;
    }
}

impl Drop for LeaseWait<'_> {
    fn drop(&mut self) {
        if self.settled {
            return;
        }
        let mut txn = self.api.broker.lock();
        txn.cancel_wait(self.worker.conn);
        give_back_strays(&mut txn, self.worker.conn, &mut self.mailbox);
        self.settle(&mut txn);
    }
}

/// Releases jobs the engine handed to the worker for a request that is no longer there
/// to take them.
fn give_back_strays(txn: &mut Txn<'_>, conn: ConnId, mailbox: &mut Mailbox) {
    while let Some(n) = mailbox.try_recv() {
        if let NoticeKind::Reserved(id) = n {
            if let Some(pri) = txn.job(id).map(|j| j.pri) {
                txn.release(conn, id, pri, 0, Broker::now());
            }
        }
    }
}

/// A lease request that passed every check.
pub(crate) struct CheckedLease {
    pub(crate) worker: Option<String>,
    pub(crate) queues: Vec<String>,
    pub(crate) lease: Lease,
    pub(crate) wait_ms: u64,
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

/// A lease length is 1 to [`MAX_LEASE_MS`] milliseconds.
pub(crate) fn check_lease_ms(ms: Option<u64>) -> Result<Option<u64>, ApiError> {
    match ms {
        Some(ms) if !(1..=MAX_LEASE_MS).contains(&ms) => Err(ApiError::bad_request(format!(
            "lease_ms is 1 to {MAX_LEASE_MS}"
        ))),
        ms => Ok(ms),
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

/// Leases the best ready job of the queues for a worker session, or waits for one (long
/// poll); `hand` fences it and describes it before the answer.
pub(crate) async fn lease_for(
    api: &Api,
    checked: CheckedLease,
    hand: HandOut,
) -> Result<Json<Value>, ApiError> {
    let CheckedLease {
        worker,
        queues,
        lease,
        wait_ms,
    } = checked;
    let worker: Arc<Worker> = match &worker {
        Some(w) => api.workers.get(w)?,
        None => api.workers.create(&api.broker, &api.gate, &api.metrics)?,
    };
    let spec = LeaseSpec {
        queues,
        lease,
        wait_ms,
        hand,
    };
    match lease_after(api, &worker, spec, |_| Ok(())).await? {
        ((), LeaseOutcome::Answered(reply)) => Ok(Json(reply)),
        ((), LeaseOutcome::ShuttingDown) => Err(ApiError::shutting_down()),
    }
}

/// Where to lease from and how, for a worker already found.
pub(crate) struct LeaseSpec {
    pub(crate) queues: Vec<String>,
    pub(crate) lease: Lease,
    pub(crate) wait_ms: u64,
    pub(crate) hand: HandOut,
}

/// How the lease part of [`lease_after`] ended.
pub(crate) enum LeaseOutcome {
    /// `{"worker", "job"}`: the job handed out, or null after the wait.
    Answered(Value),
    /// The server began stopping during the wait; nothing was handed out.
    ShuttingDown,
}

/// Runs `first` and a lease attempt in one engine transaction (so one log write and one
/// fsync wait cover both), then, if no job was ready, waits for one like a lease request.
///
/// This is how a worker reports a job and takes its next one in a single request. Refused
/// before anything is applied when the worker has another lease request in progress or
/// when `first` refuses; once `first` has been applied the request does not fail (a stop
/// during the wait is [`LeaseOutcome::ShuttingDown`]), and the answer comes only when
/// everything it reports is durable.
pub(crate) async fn lease_after<P>(
    api: &Api,
    worker: &Arc<Worker>,
    spec: LeaseSpec,
    first: impl FnOnce(&mut Txn<'_>) -> Result<P, ApiError>,
) -> Result<(P, LeaseOutcome), ApiError> {
    let LeaseSpec {
        queues,
        lease,
        wait_ms,
        hand,
    } = spec;
    let lease_ms = match lease {
        Lease::For(ms) => Some(ms),
        _ => None,
    };
    let mailbox = worker
        .mailbox
        .try_lock()
        .map_err(|_| ApiError::worker_busy())?;
    let mut shutdown = api.gate.shutdown_signal();
    let mut wait = LeaseWait {
        api,
        worker,
        mailbox,
        queues: Vec::new(),
        settled: false,
        hand,
        lease_ms,
    };
    let (pre, start, first_lsn, handed_off) = {
        let mut txn = api.broker.lock();
        let pre = match first(&mut txn) {
            Ok(pre) => pre,
            Err(e) => {
                wait.settle(&mut txn);
                return Err(e);
            }
        };
        give_back_strays(&mut txn, worker.conn, &mut wait.mailbox);
        for name in &queues {
            let q = txn.queue_id_or_create(name.as_bytes());
            txn.add_consumer(q);
            wait.queues.push(q);
        }
        let outcome = txn.reserve(
            worker.conn,
            &wait.queues,
            WaitMode::Best,
            lease,
            Some(wait_ms),
            false,
            Broker::now(),
        );
        let start = match outcome {
            ReserveOutcome::Reserved(id) => Start::Handed(hand_out(&mut txn, &mut wait, id)),
            ReserveOutcome::Waiting => Start::Waiting,
            _ => {
                wait.settle(&mut txn);
                Start::Handed(None)
            }
        };
        let (lsn, handed_off) = txn.commit_handing_off();
        (pre, start, lsn, handed_off)
    };
    if let Start::Handed(job) = start {
        // A busy worker's reply carries its next job: that one is not held back (at
        // saturation a yield waits behind every other runnable task).
        let_handed_lease_answer_first(handed_off && job.is_none()).await;
        return Ok((pre, answer(api, worker, (job, first_lsn)).await));
    }
    // Past the engine's own timeout by a margin: the engine's timer answers first; this
    // only bounds the wait if that notice were lost.
    let backstop = tokio::time::sleep(Duration::from_millis(wait_ms + 5_000));
    tokio::pin!(backstop);
    loop {
        let notice = tokio::select! {
            n = wait.mailbox.recv() => n,
            _ = &mut backstop => Some(NoticeKind::TimedOut),
            _ = shutdown.wait_for(|&stopping| stopping) => None,
        };
        let handed = {
            let mut txn = api.broker.lock();
            match notice {
                Some(NoticeKind::Reserved(id)) => {
                    let job = hand_out(&mut txn, &mut wait, id);
                    // The engine may have fenced the job in the transition that served
                    // this wait (a flow job: `flow_fence_served`), logged by whoever
                    // made that transition: wait for what is in the log now.
                    let appended = api.broker.log().map_or(0, |log| log.appended());
                    Some((job, txn.commit().max(appended)))
                }
                Some(NoticeKind::TimedOut) => {
                    txn.cancel_wait(worker.conn);
                    wait.settle(&mut txn);
                    Some((None, 0))
                }
                // A notice about an earlier lease (it ran out): not this request's business.
                Some(_) => continue,
                None => {
                    txn.cancel_wait(worker.conn);
                    wait.settle(&mut txn);
                    None
                }
            }
        };
        // What `first` did must be durable too; log positions only grow, so the later
        // of the two covers both.
        return Ok(match handed {
            Some((job, lsn)) => (pre, answer(api, worker, (job, lsn.max(first_lsn))).await),
            None => {
                api.broker.wait_durable(first_lsn).await;
                (pre, LeaseOutcome::ShuttingDown)
            }
        });
    }
}

/// How the first transaction of [`lease_after`] left the lease.
enum Start {
    /// Answered at once: the job handed out, or none (nothing ready and no wait asked).
    Handed(Option<Value>),
    /// Waiting for a job.
    Waiting,
}

/// A leased job as the worker gets it (`None` if the lease was lost before it could be
/// fenced), and the log position of its fence.
type Handed = (Option<Value>, jobyard_broker::Lsn);

/// Hands a leased job out with the request's hand-out, and ends the request's wait.
fn hand_out(txn: &mut Txn<'_>, wait: &mut LeaseWait<'_>, id: JobId) -> Option<Value> {
    let job = (wait.hand)(txn, wait.worker.conn, id, wait.lease_ms);
    wait.settle(txn);
    job
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

/// Call between committing a transaction and waiting for it to be durable: yields once if
/// the transaction handed a job to another connection's waiting lease. That lease's task,
/// woken by the transaction on this thread, then runs first and starts its own wait for the
/// same log position first, so the fsync (which wakes waiters in the order they began to
/// wait) answers it first, or, with no fsync, it writes the records itself and answers
/// first. Its answer starts the job's next step; this request's only tells a worker that
/// its report is safe. A client that reads both replies in one turn of its event loop (the
/// Node client) thus starts the next step before it handles the report's reply.
pub(crate) async fn let_handed_lease_answer_first(handed_off: bool) {
    if handed_off {
        tokio::task::yield_now().await;
    }
}

async fn answer(api: &Api, worker: &Worker, (job, lsn): Handed) -> LeaseOutcome {
    api.broker.wait_durable(lsn).await;
    LeaseOutcome::Answered(match job {
        Some(job) => serde_json::json!({ "worker": worker.id(), "job": job }),
        None => no_job(worker),
    })
}

fn no_job(worker: &Worker) -> Value {
    serde_json::json!({ "worker": worker.id(), "job": null })
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
