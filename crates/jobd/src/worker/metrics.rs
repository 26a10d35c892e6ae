//! What a jobd worker counts, through the broker's metrics registry (so `jobyard serve
//! --jobd-config` shows it at `/metrics`; a standalone `jobyard jobd` keeps the same
//! counters in its own engine's registry, which nothing exports).
//!
//! - `jobyard_commands_total{protocol="jobd",command=…}`: requests by type;
//!   `jobyard_connections{protocol="jobd"}` and friends: client connections (and the
//!   link to the master), counted by the worker's accept loop; the protocol's
//!   `jobs_created/completed/failed`: rows taken and ended.
//! - per target ([`TARGET_FIGURES`]): jobs launched, finished, failed, running.
//! - per worker ([`WORKER_FIGURES`]): launcher spawn failures, database errors and retries,
//!   the master link.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use jobyard_broker::{FigureKind, LabelledMetrics, LabelledRow, Metrics, ProtocolMetrics};

/// Request types counted in `jobyard_commands_total` (the last one takes any other).
pub const REQUESTS: &[&str] = &[
    "poll",
    "pause",
    "continue",
    "status",
    "run-manual",
    "add-target",
    "remove-target",
    "set-target-concurrency",
    "send-signal",
    "unknown",
];

/// Per-target figures, label `target`.
pub const TARGET_FIGURES: &[(&str, FigureKind)] = &[
    ("jobyard_jobd_jobs_launched_total", FigureKind::Counter),
    ("jobyard_jobd_jobs_finished_total", FigureKind::Counter),
    ("jobyard_jobd_jobs_failed_total", FigureKind::Counter),
    ("jobyard_jobd_running_processes", FigureKind::Gauge),
];
/// Launchers started.
pub const LAUNCHED: usize = 0;
/// Rows written `done` (ok or fail, including launchers that could not start).
pub const FINISHED: usize = 1;
/// Rows written `done` with `result='fail'`.
pub const FAILED: usize = 2;
/// Launcher processes running now.
pub const RUNNING: usize = 3;

/// Per-worker figures, label `worker` (the ini's `name`).
pub const WORKER_FIGURES: &[(&str, FigureKind)] = &[
    (
        "jobyard_jobd_launcher_spawn_failures_total",
        FigureKind::Counter,
    ),
    ("jobyard_jobd_db_errors_total", FigureKind::Counter),
    ("jobyard_jobd_db_retries_total", FigureKind::Counter),
    ("jobyard_jobd_master_connected", FigureKind::Gauge),
    ("jobyard_jobd_master_connections_total", FigureKind::Counter),
];
/// Launchers that could not be started (their rows fail).
pub const SPAWN_FAILURES: usize = 0;
/// Statements or transactions the database failed.
pub const DB_ERRORS: usize = 1;
/// Of those, the ones tried again (fetches, running marks, final writes).
pub const DB_RETRIES: usize = 2;
/// 1 while the worker is connected to its master.
pub const MASTER_CONNECTED: usize = 3;
/// Connections to the master made since start.
pub const MASTER_CONNECTIONS: usize = 4;

/// One worker's handles on the registry, fetched once at start.
#[derive(Clone)]
pub struct JobdMetrics {
    /// Requests, connections and job totals of the `jobd` protocol.
    pub protocol: Arc<ProtocolMetrics>,
    targets: Arc<LabelledMetrics>,
    /// This worker's own figures.
    pub worker: Arc<LabelledRow>,
}

impl JobdMetrics {
    /// Registers (or finds) the jobd figures in `metrics` for the worker called `name`.
    pub fn new(metrics: &Metrics, name: &str) -> JobdMetrics {
        JobdMetrics {
            protocol: metrics.protocol("jobd", REQUESTS),
            targets: metrics.labelled("target", TARGET_FIGURES),
            worker: metrics.labelled("worker", WORKER_FIGURES).row(name),
        }
    }

    /// The figures of one target (look it up once per target, not per job).
    pub fn target(&self, name: &str) -> Arc<LabelledRow> {
        self.targets.row(name)
    }

    /// Counts one request of type `kind`.
    pub fn request(&self, kind: &str) {
        let last = REQUESTS.len() - 1;
        let i = REQUESTS.iter().position(|r| *r == kind).unwrap_or(last);
        self.protocol.count(i);
    }

    /// Counts `n` rows taken from the table (the protocol's `jobs_created`).
    pub fn rows_taken(&self, n: usize) {
        self.protocol
            .jobs_created
            .fetch_add(n as u64, Ordering::Relaxed);
    }

    /// Counts a database error; `retried` when the operation is tried again.
    pub fn db_error(&self, retried: bool) {
        self.worker.inc(DB_ERRORS);
        if retried {
            self.worker.inc(DB_RETRIES);
        }
    }
}
