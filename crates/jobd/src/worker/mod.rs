//! The jobd worker daemon: serves poll, pause, continue, status, run-manual, add-target,
//! remove-target, set-target-concurrency and send-signal (docs/jobd.md, "Protocol"), runs jobs from
//! the MySQL table through the launcher, and keeps a registration with the master.
//!
//! By concept: [`accept`] starts a daemon and accepts its connections; `commands` and
//! `manual` answer requests; `fetch` takes rows for free slots, `runner` runs them and
//! `ends` stores how they ended, `retries` decides a failed launch under the target's
//! retry policy; `registration` keeps the master informed; `shutdown`
//! stops it gracefully. [`scheduler`] keeps the targets as queues of jobyard's engine
//! ([`targets`] is what it reports); [`front_end`] runs a worker inside `jobyard serve`.
//! The speed-ups that keep MariaDB's work per job low are [`batching`] (a busy target's
//! fetch waits for more free slots) and [`carry`] (ends written in a fetch's commit), with
//! the store's done writer; [`timing`] and [`metrics`] say where the time and the jobs go.

pub mod accept;
pub mod batching;
pub mod carry;
mod commands;
mod ends;
mod fetch;
pub mod front_end;
mod manual;
pub mod metrics;
mod registration;
mod retries;
mod runner;
pub mod scheduler;
mod shutdown;
pub mod targets;
pub mod timing;

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicUsize};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use jobyard_broker::LabelledRow;
use tokio::sync::{oneshot, Notify};

pub use accept::{serve_jobd, start_jobd, start_jobd_with, JobdHandle};
use carry::Carry;
pub use front_end::JobdFrontEnd;
use metrics::JobdMetrics;
use scheduler::EngineScheduler;
use timing::Fetched;

use crate::config::JobdConfig;
use crate::connection::PeerConnection;
use crate::launch::{LaunchSpec, Outcome};
use crate::store::{DoneWriter, Store};
type Waiter = oneshot::Sender<Result<Outcome, String>>;

struct State {
    sched: EngineScheduler,
    /// Targets a poll asked for that are not fetched yet (parked while full or paused).
    pending: BTreeSet<String>,
    polling: bool,
    /// A busy target's fetch is waiting for more free slots (see [`batching`]): a timer
    /// will fetch anyway at the end of [`batching::MAX_WAIT`]; the carry stays open
    /// meanwhile, since a fetch will come.
    batch_wait_armed: bool,
    retry_armed: bool,
    retry_pause: Duration,
    /// run-manual callers, by job id.
    waiters: HashMap<u64, Waiter>,
    /// Process group of each running job.
    running: HashMap<u64, i32>,
    /// Running jobs an operator sent a signal (`send-signal`): an end by that signal is
    /// what the operator asked for, not a failed attempt to retry.
    signalled: HashSet<u64>,
    /// Fetched rows already marked `running` in the table (they need no second write),
    /// with the fetch that took them (for the debug timing of each job).
    premarked: BTreeMap<u64, Fetched>,
    /// Each target's figures (looked up once per target, not per job).
    target_metrics: HashMap<String, Arc<LabelledRow>>,
    /// Ends of jobs waiting to be written in a fetch's commit (see [`Carry`]).
    carry: Carry,
}

struct Inner {
    state: Mutex<State>,
    store: Store,
    /// The final UPDATEs, batched (see [`DoneWriter`]).
    writer: DoneWriter,
    metrics: JobdMetrics,
    spec: LaunchSpec,
    fetch_limit: u64,
    name: String,
    master: Mutex<Option<Arc<PeerConnection>>>,
    shutting_down: AtomicBool,
    /// run_job tasks in flight (running or writing their result).
    active: AtomicUsize,
    idle: Notify,
}

/// A cheap handle on one worker daemon's state.
#[derive(Clone)]
pub struct Worker {
    inner: Arc<Inner>,
}

impl Worker {
    /// A worker for `config` with an engine of its own (no listener; see [`start_jobd`]).
    pub fn new(config: &JobdConfig) -> Worker {
        Worker::with_scheduler(config, EngineScheduler::standalone())
    }

    /// A worker whose targets live in `sched`'s engine, reporting to that engine's metrics
    /// registry; the config's targets are added to it.
    pub fn with_scheduler(config: &JobdConfig, mut sched: EngineScheduler) -> Worker {
        let metrics = JobdMetrics::new(sched.broker().metrics(), &config.name);
        let mut target_metrics = HashMap::new();
        for (t, c) in &config.targets {
            let _ = sched.add(t, *c);
            target_metrics.insert(t.clone(), metrics.target(t));
        }
        let pool_size = config.targets.iter().map(|t| t.1).sum::<u32>().clamp(2, 16) + 2;
        let store = Store::connect(&config.mysql, pool_size).with_metrics(metrics.clone());
        Worker {
            inner: Arc::new(Inner {
                state: Mutex::new(State {
                    sched,
                    pending: BTreeSet::new(),
                    polling: false,
                    batch_wait_armed: false,
                    retry_armed: false,
                    retry_pause: Duration::from_millis(200),
                    waiters: HashMap::new(),
                    running: HashMap::new(),
                    signalled: HashSet::new(),
                    premarked: BTreeMap::new(),
                    target_metrics,
                    carry: Carry::default(),
                }),
                writer: DoneWriter::new(store.clone()),
                store,
                metrics,
                spec: LaunchSpec {
                    template: config.launcher.clone(),
                    cwd: config.launcher_cwd.clone(),
                    env: config.launcher_env.clone(),
                    max_output: config.max_output_buffer,
                },
                fetch_limit: config.mysql_fetch_limit,
                name: config.name.clone(),
                master: Mutex::new(None),
                shutting_down: AtomicBool::new(false),
                active: AtomicUsize::new(0),
                idle: Notify::new(),
            }),
        }
    }
}
