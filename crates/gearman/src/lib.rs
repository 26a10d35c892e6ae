//! The Gearman protocol (as gearmand 1.1 speaks it) on the jobyard engine.
//!
//! Same shape as the beanstalkd adapter: [`decode`] frames bytes (bounded), [`packet`] knows
//! the packet layouts, [`admin`] parses admin text lines, `session` applies requests to
//! the engine, `registry` routes results to waiting clients, and `connection` runs the
//! loop, replying only once the log holds what a reply acknowledges. A Gearman function
//! is an engine queue, so beanstalkd tubes and Gearman functions of one name are one queue.

pub mod admin;
mod admin_exec;
mod connection;
pub mod decode;
pub mod handle;
pub mod packet;
mod registry;
mod session;

use std::sync::{Arc, Mutex, MutexGuard};

use jobyard_engine::JobId;

use jobyard_broker::budget::InflightBudget;
use jobyard_broker::Broker;
use tokio::sync::Notify;

pub use connection::handle;

/// Default largest packet body: 64 MiB. gearmand has no limit at all (it allocates
/// whatever a header claims); one is needed so a bad header cannot exhaust memory.
pub const DEFAULT_MAX_PACKET: u32 = 64 << 20;

/// Engine priorities for Gearman's three levels. HIGH sorts before every beanstalkd
/// "urgent" job, NORMAL equals beanstalkd's default-ish urgency threshold, LOW is last.
pub const PRI_HIGH: u32 = 0;
pub const PRI_NORMAL: u32 = 1024;
pub const PRI_LOW: u32 = u32::MAX;

/// Lease in seconds a beanstalkd consumer gets when it reserves a Gearman job.
pub const GEARMAN_JOB_TTR: u32 = 120;

/// TCP keepalive for accepted connections (gearmand's `--keepalive*`).
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct Keepalive {
    pub idle_secs: Option<u32>,
    pub interval_secs: Option<u32>,
    pub count: Option<u32>,
}

/// Settings of the Gearman listener, mostly gearmand's flags.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    /// Largest packet body accepted; larger ones get an ERROR and the connection closes.
    pub max_packet: u32,
    /// `--job-retries`: a job is handed out at most this many times (0 = unlimited).
    pub job_retries: u32,
    /// `--round-robin`: the ability just served goes to the back of the worker's list.
    pub round_robin: bool,
    /// `--exceptions`: every connection starts with the `exceptions` option on.
    pub exceptions: bool,
    /// Job handles are `PREFIX:ID` (`--job-handle-prefix`; default `H:<hostname>`).
    pub handle_prefix: String,
    /// Whether the admin `shutdown` command works (off by default: the admin protocol has
    /// no access control, and gearmand 1.1.15+ removed the command for that reason).
    pub allow_shutdown: bool,
    /// SO_KEEPALIVE settings for accepted sockets, if enabled.
    pub keepalive: Option<Keepalive>,
    /// What the `verbose` admin command reports (gearmand's level names).
    pub verbose_level: String,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            max_packet: DEFAULT_MAX_PACKET,
            job_retries: 0,
            round_robin: false,
            exceptions: false,
            handle_prefix: handle::default_prefix(),
            allow_shutdown: false,
            keepalive: None,
            verbose_level: "INFO".into(),
        }
    }
}

/// Runs [`Server::finish_jobs_ended_elsewhere`] once a second while the server lives.
async fn sweep_jobs_ended_elsewhere(server: std::sync::Weak<Server>) {
    loop {
        tokio::time::sleep(std::time::Duration::from_secs(1)).await;
        match server.upgrade() {
            Some(server) => server.finish_jobs_ended_elsewhere(),
            None => return,
        }
    }
}

/// Shared state of the Gearman listener.
pub struct Server {
    pub broker: Arc<Broker>,
    pub config: Config,
    /// Bytes of unfinished packets all connections may buffer (shared with beanstalkd).
    pub inflight: Arc<InflightBudget>,
    registry: Mutex<registry::Registry>,
    shutdown: Arc<Notify>,
}

impl Server {
    /// Creates the listener's state. `shutdown` is notified when an allowed admin
    /// `shutdown` command asks the whole server to stop.
    /// Must be called inside a tokio runtime: it starts the sweep of jobs ended elsewhere.
    pub fn new(
        broker: Arc<Broker>,
        config: Config,
        shutdown: Arc<Notify>,
        inflight: Arc<InflightBudget>,
    ) -> Arc<Server> {
        let server = Arc::new(Server {
            broker,
            config,
            inflight,
            registry: Mutex::new(registry::Registry::default()),
            shutdown,
        });
        tokio::spawn(sweep_jobs_ended_elsewhere(Arc::downgrade(&server)));
        server
    }

    /// The Gearman-side state. Take the broker lock first if both are needed.
    pub(crate) fn registry(&self) -> MutexGuard<'_, registry::Registry> {
        self.registry.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Answers the clients of jobs that ended without Gearman seeing it (a beanstalkd
    /// consumer deleted a Gearman job, say) and forgets them. Deleting is how other
    /// protocols say "done", so the clients get WORK_COMPLETE with an empty result.
    fn finish_jobs_ended_elsewhere(&self) {
        let txn = self.broker.lock();
        let mut registry = self.registry();
        let gone: Vec<JobId> = registry
            .jobs
            .keys()
            .copied()
            .filter(|&id| txn.job(id).is_none())
            .collect();
        for id in gone {
            let h = handle::format(&self.config.handle_prefix, id);
            registry.finish(id, packet::kind::WORK_COMPLETE, &h, &h);
        }
    }

    pub(crate) fn request_shutdown(&self) {
        self.shutdown.notify_one();
    }
}
