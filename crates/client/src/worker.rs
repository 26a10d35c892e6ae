//! A pool of workers: N slots, each with its own worker session (the server allows one
//! lease request per session at a time), leasing with a long poll, running the handler
//! while heartbeating, and reporting with the lease's fencing token.
//!
//! Stopping is graceful: slots waiting for a job give up the wait at once (the server
//! makes a job handed out in that instant ready again), slots running a handler let it
//! finish and report, then every session is ended.

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use serde_json::{json, Map, Value};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::error::Error;
use crate::types::{put_bytes, Job};
use crate::Client;

/// How long one lease request waits on the server when no job is ready.
const DEFAULT_POLL_WAIT: Duration = Duration::from_secs(20);
/// Pause after a failed call before trying again, so a down server is not hammered.
const RETRY_PAUSE: Duration = Duration::from_millis(500);

/// Why a handler did not complete its job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Failure {
    /// End the job as failed, with this error text for its waiters.
    Fail(String),
    /// Give the job back, ready again after this delay (whole seconds, rounded down).
    Retry(Duration),
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

/// Settings of a worker pool; [`WorkerBuilder::start`] runs it.
#[derive(Debug, Clone)]
pub struct WorkerBuilder {
    client: Client,
    queues: Vec<String>,
    concurrency: usize,
    poll_wait: Duration,
    lease: Option<Duration>,
}

impl WorkerBuilder {
    pub(crate) fn new(client: Client, queues: Vec<String>) -> WorkerBuilder {
        WorkerBuilder {
            client,
            queues,
            concurrency: 1,
            poll_wait: DEFAULT_POLL_WAIT,
            lease: None,
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

    /// Lease length; absent, each job's own ttr. Heartbeats renew it every half lease.
    pub fn lease(mut self, lease: Duration) -> Self {
        self.lease = Some(lease.max(Duration::from_millis(1)));
        self
    }

    /// Starts the slots on the current tokio runtime. `handler` gets each leased job and
    /// returns its result or a [`Failure`]; a handler that panics fails its job.
    pub fn start<H, F, E>(self, handler: H) -> Workers
    where
        H: Fn(Job) -> F + Send + Sync + 'static,
        F: Future<Output = Result<Bytes, E>> + Send + 'static,
        E: Into<Failure> + 'static,
    {
        let (stop_tx, stop_rx) = watch::channel(false);
        let counts = Arc::new(Counts::default());
        let handler = Arc::new(move |job: Job| {
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
    /// Jobs given back for a retry.
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

impl Workers {
    /// Stops leasing, waits for running handlers to finish and report, ends the sessions;
    /// returns the final counts.
    pub async fn stop(self) -> Summary {
        let _ = self.stop.send(true);
        for t in self.tasks {
            let _ = t.await;
        }
        Summary {
            completed: self.counts.completed.load(Ordering::Relaxed),
            failed: self.counts.failed.load(Ordering::Relaxed),
            retried: self.counts.retried.load(Ordering::Relaxed),
            lost: self.counts.lost.load(Ordering::Relaxed),
        }
    }

    /// Jobs completed so far.
    pub fn completed(&self) -> u64 {
        self.counts.completed.load(Ordering::Relaxed)
    }

    /// Jobs failed so far (handler errors and panics).
    pub fn failed(&self) -> u64 {
        self.counts.failed.load(Ordering::Relaxed)
    }

    /// Jobs given back for a retry so far.
    pub fn retried(&self) -> u64 {
        self.counts.retried.load(Ordering::Relaxed)
    }

    /// Results the server refused because the lease was gone (it ran out, or the job was
    /// deleted): the job was, or will be, handed to someone else.
    pub fn lost(&self) -> u64 {
        self.counts.lost.load(Ordering::Relaxed)
    }
}

/// One lease at a time, on its own session.
struct Slot {
    settings: Arc<WorkerBuilder>,
    counts: Arc<Counts>,
    stop: watch::Receiver<bool>,
}

impl Slot {
    async fn run<H, F>(mut self, handler: Arc<H>)
    where
        H: Fn(Job) -> F + Send + Sync + 'static,
        F: Future<Output = Result<Bytes, Failure>> + Send + 'static,
    {
        let mut session: Option<String> = None;
        while !*self.stop.borrow() {
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
                Ok(Some(job)) => self.work(&worker, job, handler.as_ref()).await,
                Ok(None) => {}
                Err(e) if e.code() == Some("unknown_worker") => session = None,
                Err(e) => {
                    tracing::warn!(error = %e, "lease failed; retrying");
                    self.pause().await;
                }
            }
        }
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

    async fn lease(&self, worker: &str) -> Result<Option<Job>, Error> {
        let mut req = json!({
            "worker": worker,
            "queues": self.settings.queues,
            "wait_ms": self.settings.poll_wait.as_millis() as u64,
        });
        if let Some(l) = self.settings.lease {
            req["lease_ms"] = json!(l.as_millis() as u64);
        }
        let reply = self.client().post("/v1/lease", &req).await?;
        match &reply["job"] {
            Value::Null => Ok(None),
            job => Job::from_lease(job).map(Some),
        }
    }

    /// Runs the handler (in its own task, so a panic is caught) while heartbeating, then
    /// reports. A stop request does not interrupt a running handler.
    async fn work<H, F>(&self, worker: &str, job: Job, handler: &H)
    where
        H: Fn(Job) -> F + Send + Sync + 'static,
        F: Future<Output = Result<Bytes, Failure>> + Send + 'static,
    {
        let (id, token) = (job.id, job.token);
        let beat = Duration::from_millis((job.lease_ms / 2).max(1));
        let mut running = tokio::spawn(handler(job));
        let outcome = loop {
            tokio::select! {
                done = &mut running => break done,
                _ = tokio::time::sleep(beat) => {
                    let req = json!({"worker": worker, "token": token});
                    let path = format!("/v1/jobs/{id}/heartbeat");
                    if let Err(e) = self.client().post(&path, &req).await {
                        tracing::warn!(job = id, error = %e, "heartbeat refused");
                    }
                }
            }
        };
        let outcome = outcome.unwrap_or_else(|_| Err(Failure::Fail("handler panicked".into())));
        let mut req = Map::new();
        req.insert("worker".into(), json!(worker));
        req.insert("token".into(), json!(token));
        let (verb, counter) = match outcome {
            Ok(result) => {
                put_bytes(&mut req, "result", &result);
                ("complete", &self.counts.completed)
            }
            Err(Failure::Fail(error)) => {
                req.insert("error".into(), json!(error));
                ("fail", &self.counts.failed)
            }
            Err(Failure::Retry(delay)) => {
                req.insert("delay".into(), json!(delay.as_secs()));
                ("release", &self.counts.retried)
            }
        };
        let path = format!("/v1/jobs/{id}/{verb}");
        match self.client().post(&path, &Value::Object(req)).await {
            Ok(_) => {
                counter.fetch_add(1, Ordering::Relaxed);
            }
            Err(e) if matches!(e.code(), Some("stale_token" | "not_leased" | "not_found")) => {
                self.counts.lost.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(job = id, error = %e, "result refused: the lease was gone");
            }
            Err(e) => tracing::warn!(job = id, error = %e, "could not report the result"),
        }
    }
}
