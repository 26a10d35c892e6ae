//! A pool of workers: N slots, each with its own worker session (the server allows one
//! lease request per session at a time), leasing with a long poll, running the handler
//! while heartbeating, and reporting with the lease's fencing token.
//!
//! A flow stage job's report also asks for the slot's next job (`next`, with no wait): while
//! jobs keep coming a slot makes one request per job, and when none is ready it goes back to
//! its long poll.
//!
//! Stopping is graceful: slots waiting for a job give up the wait at once (the server
//! makes a job handed out in that instant ready again), slots running a handler let it
//! finish and report, then every session is ended.
//!
//! The same loop serves plain queue jobs ([`Job`]) and flow stage jobs
//! ([`crate::StageJob`]); what differs (where to lease, how to read a job, how to report)
//! is the [`Leased`] trait.

use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::{json, Map, Value};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::error::Error;
use crate::Client;

/// How long one lease request waits on the server when no job is ready.
const DEFAULT_POLL_WAIT: Duration = Duration::from_secs(20);
/// Pause after a failed call before trying again, so a down server is not hammered.
const RETRY_PAUSE: Duration = Duration::from_millis(500);

/// Why a handler did not complete its job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Failure {
    /// The job failed: a plain job ends as failed with this error; a flow job is retried
    /// while its stage allows, then recorded as failed.
    Fail(String),
    /// Run the job again after this delay (a plain job is released; a flow job delayed).
    Retry(Duration),
    /// Put the job off until this time (milliseconds since the Unix epoch), with a reason
    /// (Guild's `DelayError`; a plain job is released with the equivalent delay).
    DelayUntil {
        /// When the job is ready again.
        ready_at_ms: u64,
        /// Why, kept in a flow job's `delayReason`.
        reason: String,
    },
}

impl From<String> for Failure {
    fn from(e: String) -> Failure {
        Failure::Fail(e)
    }
}

impl From<&str> for Failure {
    fn from(e: &str) -> Failure {
        Failure::Fail(e.to_string())
    }
}

/// A leased job of some kind: how it is leased, read and reported.
pub trait Leased: Sized + Send + 'static {
    /// What a handler returns on success.
    type Output: Send + 'static;
    /// Reads the `job` object of a lease reply.
    fn from_lease(job: &Value) -> Result<Self, Error>;
    /// Path of this job's calls (`/v1/jobs/<id>` or `/v1/flow-jobs/<id>`).
    fn path(&self) -> String;
    /// The fencing token of this lease.
    fn token(&self) -> u64;
    /// The lease length, for the heartbeat interval.
    fn lease_ms(&self) -> u64;
    /// Fills a complete request from the handler's output.
    fn put_output(output: Self::Output, request: &mut Map<String, Value>);
    /// The verb and fields reporting a failure.
    fn failure(failure: Failure, request: &mut Map<String, Value>) -> &'static str;
    /// Whether a report may ask for the worker's next job in the same request (`next`),
    /// saving a lease round trip per job while jobs keep coming.
    const REPORT_LEASES_NEXT: bool = false;

    /// The job of a lease reply (`{"worker", "job"}`), if it has one.
    fn from_reply(reply: &Value) -> Result<Option<Self>, Error> {
        match &reply["job"] {
            Value::Null => Ok(None),
            job => Self::from_lease(job).map(Some),
        }
    }
}

/// Milliseconds since the Unix epoch, now.
pub(crate) fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Settings of a worker pool; [`WorkerBuilder::start`] runs it.
#[derive(Debug, Clone)]
pub struct WorkerBuilder<J> {
    client: Client,
    lease_path: String,
    lease_fields: Map<String, Value>,
    concurrency: usize,
    poll_wait: Duration,
    lease: Option<Duration>,
    kind: std::marker::PhantomData<fn() -> J>,
}

impl<J: Leased> WorkerBuilder<J> {
    pub(crate) fn new(
        client: Client,
        lease_path: String,
        lease_fields: Map<String, Value>,
    ) -> WorkerBuilder<J> {
        WorkerBuilder {
            client,
            lease_path,
            lease_fields,
            concurrency: 1,
            poll_wait: DEFAULT_POLL_WAIT,
            lease: None,
            kind: std::marker::PhantomData,
        }
    }

    /// How many jobs run at once (at least 1).
    pub fn concurrency(mut self, n: usize) -> Self {
        self.concurrency = n.max(1);
        self
    }

    /// How long one lease request waits for a job (at most 60 s, the server's limit).
    pub fn poll_wait(mut self, wait: Duration) -> Self {
        self.poll_wait = wait.min(Duration::from_secs(60));
        self
    }

    /// Lease length; absent, the job's ttr (the stage's `leaseMs` for flow jobs).
    /// Heartbeats renew it every half lease.
    pub fn lease(mut self, lease: Duration) -> Self {
        self.lease = Some(lease.max(Duration::from_millis(1)));
        self
    }

    /// Starts the slots on the current tokio runtime. `handler` gets each leased job and
    /// returns its result or a [`Failure`]; a handler that panics fails its job.
    pub fn start<H, F, E>(self, handler: H) -> Workers
    where
        H: Fn(J) -> F + Send + Sync + 'static,
        F: Future<Output = Result<J::Output, E>> + Send + 'static,
        E: Into<Failure> + 'static,
    {
        let (stop_tx, stop_rx) = watch::channel(false);
        let counts = Arc::new(Counts::default());
        let no_next = Arc::new(AtomicBool::new(false));
        let handler = Arc::new(move |job: J| {
            let fut = handler(job);
            async move { fut.await.map_err(Into::into) }
        });
        let settings = Arc::new(self);
        let tasks = (0..settings.concurrency)
            .map(|_| {
                let slot = Slot {
                    settings: settings.clone(),
                    counts: counts.clone(),
                    stop: stop_rx.clone(),
                    no_next: no_next.clone(),
                };
                let handler = handler.clone();
                tokio::spawn(async move { slot.run(handler).await })
            })
            .collect();
        Workers {
            stop: stop_tx,
            tasks,
            counts,
        }
    }
}

/// Running workers. Dropping this without [`Workers::stop`] leaves them running.
#[derive(Debug)]
pub struct Workers {
    stop: watch::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
    counts: Arc<Counts>,
}

/// What a pool did, from start to stop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Summary {
    /// Jobs completed.
    pub completed: u64,
    /// Jobs failed (handler errors and panics).
    pub failed: u64,
    /// Jobs given back for a retry or put off.
    pub retried: u64,
    /// Results refused because the lease was gone.
    pub lost: u64,
}

#[derive(Debug, Default)]
struct Counts {
    completed: AtomicU64,
    failed: AtomicU64,
    retried: AtomicU64,
    lost: AtomicU64,
}

impl Counts {
    fn summary(&self) -> Summary {
        Summary {
            completed: self.completed.load(Ordering::Relaxed),
            failed: self.failed.load(Ordering::Relaxed),
            retried: self.retried.load(Ordering::Relaxed),
            lost: self.lost.load(Ordering::Relaxed),
        }
    }
}

impl Workers {
    /// Stops leasing, waits for running handlers to finish and report, ends the sessions;
    /// returns the final counts.
    pub async fn stop(self) -> Summary {
        let _ = self.stop.send(true);
        for t in self.tasks {
            let _ = t.await;
        }
        self.counts.summary()
    }

    /// The counts so far.
    pub fn summary(&self) -> Summary {
        self.counts.summary()
    }
}

/// One lease at a time, on its own session.
struct Slot<J> {
    settings: Arc<WorkerBuilder<J>>,
    counts: Arc<Counts>,
    stop: watch::Receiver<bool>,
    /// Set once the server refused `next` (a server older than it): reports go without.
    no_next: Arc<AtomicBool>,
}

impl<J: Leased> Slot<J> {
    async fn run<H, F>(mut self, handler: Arc<H>)
    where
        H: Fn(J) -> F + Send + Sync + 'static,
        F: Future<Output = Result<J::Output, Failure>> + Send + 'static,
    {
        let mut session: Option<String> = None;
        // A job handed out with the last report's reply, run before leasing again.
        let mut handed: Option<J> = None;
        while !*self.stop.borrow() {
            if let (Some(job), Some(worker)) = (handed.take(), &session) {
                handed = self.work(worker, job, handler.as_ref()).await;
                continue;
            }
            let worker = match &session {
                Some(w) => w.clone(),
                None => match self.open_session().await {
                    Some(w) => {
                        session = Some(w.clone());
                        w
                    }
                    None => continue,
                },
            };
            let mut stop = self.stop.clone();
            let leased = tokio::select! {
                r = self.lease(&worker) => r,
                _ = stop.changed() => break,
            };
            match leased {
                Ok(Some(job)) => handed = self.work(&worker, job, handler.as_ref()).await,
                Ok(None) => {}
                Err(e) if e.code() == Some("unknown_worker") => session = None,
                Err(e) => {
                    tracing::warn!(error = %e, "lease failed; retrying");
                    self.pause().await;
                }
            }
        }
        // A job handed out with a report while stopping was not started: ending the
        // session makes it ready again for another worker.
        drop(handed);
        if let Some(w) = session {
            let _ = self.client().delete_path(&format!("/v1/workers/{w}")).await;
        }
    }

    fn client(&self) -> &Client {
        &self.settings.client
    }

    async fn open_session(&mut self) -> Option<String> {
        match self.client().post("/v1/workers", &json!({})).await {
            Ok(reply) => reply["worker"].as_str().map(str::to_string),
            Err(e) => {
                tracing::warn!(error = %e, "could not open a worker session; retrying");
                self.pause().await;
                None
            }
        }
    }

    /// Sleeps [`RETRY_PAUSE`], or less if asked to stop.
    async fn pause(&mut self) {
        tokio::select! {
            _ = tokio::time::sleep(RETRY_PAUSE) => {}
            _ = self.stop.changed() => {}
        }
    }

    async fn lease(&self, worker: &str) -> Result<Option<J>, Error> {
        let mut req = self.settings.lease_fields.clone();
        req.insert("worker".into(), json!(worker));
        let wait = self.settings.poll_wait.as_millis() as u64;
        req.insert("wait_ms".into(), json!(wait));
        if let Some(l) = self.settings.lease {
            req.insert("lease_ms".into(), json!(l.as_millis() as u64));
        }
        let reply = self
            .client()
            .post(&self.settings.lease_path, &Value::Object(req))
            .await?;
        J::from_reply(&reply)
    }

    /// `next` of a report: the next job if one is ready now. No wait, so the report's
    /// answer (and a stop) is never held up; an idle worker goes back to its long poll.
    fn next_request(&self) -> Value {
        match self.settings.lease {
            Some(l) => json!({"wait_ms": 0, "lease_ms": l.as_millis() as u64}),
            None => json!({"wait_ms": 0}),
        }
    }

    /// Runs the handler (in its own task, so a panic is caught) while heartbeating, then
    /// reports. A stop request does not interrupt a running handler. Returns the next job
    /// when the report's reply brought one.
    async fn work<H, F>(&self, worker: &str, job: J, handler: &H) -> Option<J>
    where
        H: Fn(J) -> F + Send + Sync + 'static,
        F: Future<Output = Result<J::Output, Failure>> + Send + 'static,
    {
        let (path, token) = (job.path(), job.token());
        let beat = Duration::from_millis((job.lease_ms() / 2).max(1));
        let mut running = tokio::spawn(handler(job));
        let outcome = loop {
            tokio::select! {
                done = &mut running => break done,
                _ = tokio::time::sleep(beat) => {
                    let req = json!({"worker": worker, "token": token});
                    if let Err(e) = self.client().post(&format!("{path}/heartbeat"), &req).await {
                        tracing::warn!(job = %path, error = %e, "heartbeat refused");
                    }
                }
            }
        };
        let outcome = outcome.unwrap_or_else(|_| Err(Failure::Fail("handler panicked".into())));
        let mut req = Map::new();
        req.insert("worker".into(), json!(worker));
        req.insert("token".into(), json!(token));
        let (verb, counter) = match outcome {
            Ok(output) => {
                J::put_output(output, &mut req);
                ("complete", &self.counts.completed)
            }
            Err(failure) => {
                let counter = match failure {
                    Failure::Fail(_) => &self.counts.failed,
                    _ => &self.counts.retried,
                };
                (J::failure(failure, &mut req), counter)
            }
        };
        let ask_next =
            J::REPORT_LEASES_NEXT && !*self.stop.borrow() && !self.no_next.load(Ordering::Relaxed);
        if ask_next {
            req.insert("next".into(), self.next_request());
        }
        let url = format!("{path}/{verb}");
        let mut req = Value::Object(req);
        let mut sent = self.client().post(&url, &req).await;
        if ask_next && matches!(&sent, Err(e) if refuses_next(e)) {
            // A server older than `next` refused the unknown field, having applied
            // nothing: report again without it, and never ask that server again.
            self.no_next.store(true, Ordering::Relaxed);
            req.as_object_mut().expect("an object").remove("next");
            sent = self.client().post(&url, &req).await;
        }
        match sent {
            Ok(reply) => {
                counter.fetch_add(1, Ordering::Relaxed);
                match reply.get("next").map(J::from_reply) {
                    Some(Ok(next)) => next,
                    Some(Err(e)) => {
                        tracing::warn!(error = %e, "could not read the next job");
                        None
                    }
                    None => None,
                }
            }
            Err(e) if matches!(e.code(), Some("stale_token" | "not_leased" | "not_found")) => {
                self.counts.lost.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(job = %path, error = %e, "result refused: the lease was gone");
                None
            }
            Err(e) => {
                tracing::warn!(job = %path, error = %e, "could not report the result");
                None
            }
        }
    }
}

/// Whether a report was refused for its `next` field alone (a server that predates it).
fn refuses_next(e: &Error) -> bool {
    matches!(e, Error::Api { code, message, .. } if code == "bad_json" && message.contains("`next`"))
}
