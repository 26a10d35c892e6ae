//! The lease machinery every lease route shares, plain jobs' and flows' alike: checking a
//! holder's fencing token, leasing with a long poll for a worker session, and reporting
//! on one job and leasing the next in a single transaction (`lease_after`, what a flow
//! worker's `next` uses). What differs between plain and flow jobs is only the hand-out
//! (`HandOut`): how a job just leased is fenced and described for the worker.
//!
//! A lease belongs to a worker session (see `workers`) and carries a fencing token: the
//! job's attempt number, logged by `Engine::fence` before the job is handed out, so no
//! token is ever handed out twice, also across restarts. A token that is not the job's
//! current attempt is refused with 409 `stale_token` (the lease it came with ended and the
//! job may be elsewhere now).

use std::sync::Arc;
use std::time::Duration;

use axum::Json;
use jobyard_broker::{Broker, Mailbox, Txn};
use jobyard_engine::{ConnId, Engine, JobId, Lease, NoticeKind, QueueId, ReserveOutcome, WaitMode};
use serde_json::Value;

use crate::error::ApiError;
use crate::limits::MAX_LEASE_MS;
use crate::state::Api;
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

/// A lease length is 1 to [`MAX_LEASE_MS`] milliseconds.
pub(crate) fn check_lease_ms(ms: Option<u64>) -> Result<Option<u64>, ApiError> {
    match ms {
        Some(ms) if !(1..=MAX_LEASE_MS).contains(&ms) => Err(ApiError::bad_request(format!(
            "lease_ms is 1 to {MAX_LEASE_MS}"
        ))),
        ms => Ok(ms),
    }
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

/// The reply once the hand-out (or what `first` did) is durable.
async fn answer(api: &Api, worker: &Worker, (job, lsn): Handed) -> LeaseOutcome {
    api.broker.wait_durable(lsn).await;
    LeaseOutcome::Answered(match job {
        Some(job) => serde_json::json!({ "worker": worker.id(), "job": job }),
        None => no_job(worker),
    })
}

/// The reply when no job came.
fn no_job(worker: &Worker) -> Value {
    serde_json::json!({ "worker": worker.id(), "job": null })
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use axum::http::StatusCode;
    use serde_json::{json, Value};

    use crate::test_support::{error_code, TestApi};

    /// Leases from `queue` for `worker` (a new session when `None`), waiting up to `wait_ms`.
    async fn lease(api: &TestApi, worker: Option<&str>, queue: &str, extra: Value) -> Value {
        let mut body = json!({ "queues": [queue] });
        if let Some(w) = worker {
            body["worker"] = w.into();
        }
        for (k, v) in extra.as_object().expect("an object") {
            body[k] = v.clone();
        }
        let (status, reply) = api.post("/v1/lease", body).await;
        assert_eq!(status, StatusCode::OK, "{reply}");
        reply
    }

    #[tokio::test]
    async fn a_lease_carries_a_fencing_token_the_holder_completes_with() {
        let api = TestApi::new();
        let id = api.put("fence", "hello").await;
        let reply = lease(&api, None, "fence", json!({})).await;
        let job = &reply["job"];
        assert_eq!(job["id"], id);
        assert_eq!(job["body"], "hello");
        assert_eq!(job["token"], 1, "the first attempt's token");
        let done = json!({ "worker": reply["worker"], "token": 1, "result": "ok" });
        let (status, ended) = api.post(&format!("/v1/jobs/{id}/complete"), done).await;
        assert_eq!(status, StatusCode::OK, "{ended}");
        assert_eq!(ended["status"], "ok");
        assert!(api.broker.lock().job(id).is_none(), "the job ended");
    }

    #[tokio::test]
    async fn a_stale_token_is_refused_once_the_lease_expired_and_the_job_was_leased_again() {
        let api = TestApi::new();
        let id = api.put("expire", "work").await;
        let first = lease(&api, None, "expire", json!({ "lease_ms": 30 })).await;
        assert_eq!(first["job"]["token"], 1);
        // The engine's clock ends the 30 ms lease; the job is ready again and re-leased.
        let second = lease(&api, None, "expire", json!({ "wait_ms": 5000 })).await;
        assert_eq!(second["job"]["id"], id);
        assert_eq!(second["job"]["token"], 2, "a new attempt, a new token");
        let late = json!({ "worker": first["worker"], "token": 1 });
        let (status, refused) = api.post(&format!("/v1/jobs/{id}/complete"), late).await;
        assert_eq!(status, StatusCode::CONFLICT, "{refused}");
        assert_eq!(error_code(&refused), "stale_token");
        let current = json!({ "worker": second["worker"], "token": 2 });
        let (status, ended) = api.post(&format!("/v1/jobs/{id}/complete"), current).await;
        assert_eq!(status, StatusCode::OK, "{ended}");
    }

    #[tokio::test]
    async fn a_long_poll_is_woken_by_a_put() {
        let api = TestApi::new();
        let waiting = tokio::spawn({
            let api = api.clone();
            async move { lease(&api, None, "wake", json!({ "wait_ms": 10_000 })).await }
        });
        // Let the lease request start waiting before the job arrives.
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!waiting.is_finished(), "nothing to lease yet");
        let started = Instant::now();
        let id = api.put("wake", "late").await;
        let reply = waiting.await.expect("the lease request ends");
        assert_eq!(reply["job"]["id"], id);
        assert_eq!(reply["job"]["token"], 1);
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "woken, not timed out"
        );
    }

    #[tokio::test]
    async fn a_long_poll_with_nothing_to_lease_times_out_empty() {
        let api = TestApi::new();
        let started = Instant::now();
        let reply = lease(&api, None, "empty", json!({ "wait_ms": 200 })).await;
        let waited = started.elapsed();
        assert!(reply["job"].is_null(), "{reply}");
        assert!(reply["worker"].is_string(), "the session it was leased for");
        assert!(waited >= Duration::from_millis(200), "waited {waited:?}");
        // The engine's timer answers, well before the backstop (wait + 5 s).
        assert!(waited < Duration::from_secs(3), "waited {waited:?}");
    }
}
