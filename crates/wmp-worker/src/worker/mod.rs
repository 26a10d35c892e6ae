//! The worker SDK: connect to several managers at once (one DEALER each), register a
//! handler per role (queue), run up to `concurrency` jobs at a time, and stop gracefully.
//!
//! ```no_run
//! # async fn demo() {
//! use jobyard_wmp_worker::worker::{Outcome, Worker};
//! let worker = Worker::builder()
//!     .connect("tcp://127.0.0.1:5570")
//!     .concurrency(4)
//!     .handle("resize", |job| async move { Outcome::Ok(job.body) })
//!     .build()
//!     .unwrap();
//! worker.run(tokio::signal::ctrl_c()).await;
//! # }
//! ```
//!
//! Protocol rules (locks, READY retries, late TAKE) are in [`core`]; connections in [`crate::link`].

pub mod core;

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use tokio::sync::mpsc;
use tokio::task::JoinSet;

use jobyard_wmp_wire::{decode, Headers, Limits};

use crate::transport::{Frames, SocketOptions};

pub use self::core::WorkerStats;
use self::core::{Core, JobKey, Out};
use crate::link::{self, LinkEvent};

/// One job handed to a handler.
#[derive(Debug, Clone)]
pub struct Job {
    /// The manager that handed it out.
    pub manager: String,
    /// The manager's job id (jobs may run more than once: dedupe on it if that matters).
    pub job: u64,
    /// Which hand-out this is, 1-based.
    pub attempt: u64,
    /// The queue (role) it came from.
    pub queue: String,
    /// The lease: finish within this many milliseconds or the job is handed out again.
    pub timeout_ms: u64,
    /// The job body.
    pub body: Bytes,
    /// Headers the manager sent beyond the defined ones (e.g. `handle`, `priority`).
    pub extra: Headers,
}

/// What a handler reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Success, with the result.
    Ok(Bytes),
    /// The job ran and failed; the manager applies its retry policy.
    Fail {
        /// A short machine-readable code (`error` header), if any.
        error: Option<String>,
        /// Error text for people.
        message: Bytes,
    },
    /// The job was not run; the manager requeues it at once without counting a failure.
    Reject,
}

/// The boxed future a handler returns.
pub type HandlerFuture = Pin<Box<dyn Future<Output = Outcome> + Send>>;

/// A job handler, shared by all concurrent runs.
pub type Handler = Arc<dyn Fn(Job) -> HandlerFuture + Send + Sync>;

/// Tunables; defaults are the spec's timers (docs/wmp.md, "Timers").
#[derive(Debug, Clone)]
pub struct WorkerConfig {
    /// Manager (or device) endpoints, one DEALER each.
    pub connects: Vec<String>,
    /// Jobs run at once, over all roles and managers.
    pub concurrency: usize,
    /// How long a lock waits for TAKE or NO (5 s).
    pub lock_timeout: Duration,
    /// First READY retry interval (1 s); doubles while a manager is silent.
    pub ready_retry_min: Duration,
    /// Longest READY retry interval (30 s); keeps an idle worker inside the manager's `ready_ttl`.
    pub ready_retry_max: Duration,
    /// libzmq socket options (reconnect backoff, heartbeats, linger); the frame limit is
    /// taken from `limits`.
    pub socket: SocketOptions,
    /// Display name sent in READY (`worker=`).
    pub name: Option<String>,
    /// Bounds for received messages.
    pub limits: Limits,
}

impl Default for WorkerConfig {
    fn default() -> Self {
        WorkerConfig {
            connects: Vec::new(),
            concurrency: 1,
            lock_timeout: Duration::from_secs(5),
            ready_retry_min: Duration::from_secs(1),
            ready_retry_max: Duration::from_secs(30),
            socket: SocketOptions::default(),
            name: None,
            limits: Limits::default(),
        }
    }
}

/// Why a worker could not be built.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BuildError {
    /// No endpoint to connect to.
    NoManagers,
    /// No handler registered.
    NoHandlers,
    /// An endpoint that is not `transport://address` (e.g. `tcp://host:5570`).
    BadEndpoint(String),
    /// A role name that cannot be sent in a `roles` header (empty, or contains `,` or a
    /// character a header value may not hold).
    BadRole(String),
}

impl std::fmt::Display for BuildError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BuildError::NoManagers => f.write_str("no manager endpoint given"),
            BuildError::NoHandlers => f.write_str("no handler registered"),
            BuildError::BadEndpoint(e) => write!(
                f,
                "endpoint {e:?} is not transport://address (e.g. tcp://host:5570)"
            ),
            BuildError::BadRole(r) => write!(
                f,
                "role {r:?} cannot be named in WMP (empty, ',' or a control character)"
            ),
        }
    }
}

impl std::error::Error for BuildError {}

/// Collects the configuration and handlers of a [`Worker`].
#[derive(Default)]
pub struct WorkerBuilder {
    config: WorkerConfig,
    handlers: HashMap<String, Handler>,
    any: Option<Handler>,
}

impl WorkerBuilder {
    /// Adds a manager (or device) endpoint, e.g. `tcp://host:5570`.
    pub fn connect(mut self, endpoint: impl Into<String>) -> Self {
        self.config.connects.push(endpoint.into());
        self
    }

    /// Jobs run at once (default 1).
    pub fn concurrency(mut self, n: usize) -> Self {
        self.config.concurrency = n.max(1);
        self
    }

    /// Replaces the whole configuration (endpoints added so far are kept if `config` has none).
    pub fn config(mut self, mut config: WorkerConfig) -> Self {
        if config.connects.is_empty() {
            config.connects = std::mem::take(&mut self.config.connects);
        }
        self.config = config;
        self
    }

    /// Handles jobs of queue `role`.
    pub fn handle<F, Fut>(mut self, role: impl Into<String>, f: F) -> Self
    where
        F: Fn(Job) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Outcome> + Send + 'static,
    {
        self.handlers
            .insert(role.into(), Arc::new(move |job| Box::pin(f(job))));
        self
    }

    /// Handles jobs of every queue (READY then carries no `roles`: "any queue").
    pub fn handle_any<F, Fut>(mut self, f: F) -> Self
    where
        F: Fn(Job) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Outcome> + Send + 'static,
    {
        self.any = Some(Arc::new(move |job| Box::pin(f(job))));
        self
    }

    /// Checks and builds.
    pub fn build(self) -> Result<Worker, BuildError> {
        if self.config.connects.is_empty() {
            return Err(BuildError::NoManagers);
        }
        if self.handlers.is_empty() && self.any.is_none() {
            return Err(BuildError::NoHandlers);
        }
        for endpoint in &self.config.connects {
            if !matches!(endpoint.split_once("://"), Some((t, a)) if !t.is_empty() && !a.is_empty())
            {
                return Err(BuildError::BadEndpoint(endpoint.clone()));
            }
        }
        for role in self.handlers.keys() {
            if role.is_empty() || role.contains(',') || !Headers::is_valid_value(role) {
                return Err(BuildError::BadRole(role.clone()));
            }
        }
        Ok(Worker {
            config: self.config,
            handlers: self.handlers,
            any: self.any,
        })
    }
}

/// A configured worker; [`Worker::run`] runs it.
pub struct Worker {
    config: WorkerConfig,
    handlers: HashMap<String, Handler>,
    any: Option<Handler>,
}

impl Worker {
    /// Starts a builder.
    pub fn builder() -> WorkerBuilder {
        WorkerBuilder::default()
    }

    /// The roles announced in READY: `None` (any queue) with a catch-all handler.
    pub fn roles(&self) -> Option<Vec<String>> {
        if self.any.is_some() {
            return None;
        }
        let mut roles: Vec<String> = self.handlers.keys().cloned().collect();
        roles.sort();
        Some(roles)
    }

    /// Runs until `shutdown` completes, then stops asking for work, rejects late TAKEs,
    /// waits for running handlers, sends their DONEs and returns the counters.
    pub async fn run(self, shutdown: impl Future) -> WorkerStats {
        let roles = self.roles();
        let links = self.config.connects.len();
        let mut core = Core::new(&self.config, roles, links);
        let (event_tx, mut events) = mpsc::channel::<LinkEvent>(1024);
        let mut senders: Vec<mpsc::Sender<Frames>> = Vec::with_capacity(links);
        let mut link_tasks = JoinSet::new();
        let ctx = zmq::Context::new();
        let mut opts = self.config.socket;
        opts.max_frame = self.config.limits.max_frame_len();
        for (i, endpoint) in self.config.connects.iter().enumerate() {
            let (tx, rx) = mpsc::channel(1024);
            senders.push(tx);
            link_tasks.spawn(link::run(
                ctx.clone(),
                i,
                endpoint.clone(),
                opts,
                rx,
                event_tx.clone(),
            ));
        }
        drop(event_tx);
        let mut jobs: JoinSet<(JobKey, Outcome)> = JoinSet::new();
        let mut keys_by_task = HashMap::new();
        let mut dropped_sends = 0u64;
        let mut shutdown = std::pin::pin!(shutdown);
        let mut stopping = false;
        loop {
            if stopping && core.finished() {
                break;
            }
            let wake_at = core
                .next_deadline()
                .unwrap_or_else(|| Instant::now() + Duration::from_secs(3600));
            let out: Vec<Out> = tokio::select! {
                _ = &mut shutdown, if !stopping => {
                    stopping = true;
                    core.stop();
                    Vec::new()
                }
                ev = events.recv() => match ev {
                    None => break,
                    Some(LinkEvent::Up(link)) => core.link_up(link, Instant::now()),
                    Some(LinkEvent::Down(link)) => { core.link_down(link); Vec::new() }
                    Some(LinkEvent::Frames(link, frames)) => match decode(&frames, &self.config.limits) {
                        Ok(msg) => {
                            let (out, start) = core.on_message(link, msg, Instant::now());
                            if let Some(start) = start {
                                let handler = self.handler_for(&start.job.queue);
                                let key = start.key.clone();
                                let handle = jobs.spawn(async move { (start.key, handler(start.job).await) });
                                keys_by_task.insert(handle.id(), key);
                            }
                            out
                        }
                        Err(e) => {
                            tracing::debug!(reason = e.reason(), "wmp worker dropped a message");
                            core.stats.dropped += 1;
                            Vec::new()
                        }
                    },
                },
                Some(done) = jobs.join_next_with_id(), if !jobs.is_empty() => {
                    let (id, key, outcome) = match done {
                        Ok((id, (key, outcome))) => (id, key, outcome),
                        Err(e) => {
                            let key = keys_by_task.get(&e.id()).cloned().expect("every job task is keyed");
                            let outcome = Outcome::Fail { error: Some("panic".into()), message: Bytes::from("the handler panicked") };
                            (e.id(), key, outcome)
                        }
                    };
                    keys_by_task.remove(&id);
                    core.job_finished(key, outcome, Instant::now())
                }
                _ = tokio::time::sleep_until(wake_at.into()) => core.tick(Instant::now()),
            };
            for (link, frames) in out {
                if senders[link].try_send(frames).is_err() {
                    dropped_sends += 1;
                }
            }
        }
        // Closing the senders lets each link hand what is queued to libzmq and close its
        // socket; ending the context then waits (up to the linger time) until it is sent.
        // Incoming events are discarded meanwhile; the channel ends when every link has.
        drop(senders);
        let drain = async { while events.recv().await.is_some() {} };
        if tokio::time::timeout(opts.linger + Duration::from_secs(1), drain)
            .await
            .is_err()
        {
            link_tasks.abort_all();
        }
        while link_tasks.join_next().await.is_some() {}
        let _ = tokio::task::spawn_blocking(move || drop(ctx)).await;
        let mut stats = core.stats.clone();
        stats.dropped += dropped_sends;
        stats
    }

    fn handler_for(&self, queue: &str) -> Handler {
        match self.handlers.get(queue).or(self.any.as_ref()) {
            Some(h) => h.clone(),
            // Core only starts jobs of served queues, so this is unreachable; fail safely.
            None => Arc::new(|_| Box::pin(async { Outcome::Reject })),
        }
    }
}
