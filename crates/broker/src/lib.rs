//! The broker: one live [`Engine`] shared by every protocol adapter.
//!
//! Adapters call [`Broker::lock`] to get a [`Txn`], run engine operations on it, and
//! [`Txn::commit`] it. Committing appends the engine's changes to the log *inside* the
//! lock, so the log's order is the engine's order, and hands notices to the mailboxes of
//! the connections they concern. The adapter then awaits [`Broker::wait_durable`] for the
//! returned position before it replies, which is how "acknowledged means on disk" holds
//! while many connections share one write and one fsync.
//!
//! The broker also runs the engine's clock (leases, delays, pauses and reserve timeouts
//! fire on time whether or not any client speaks), compacts the log when it has grown
//! well past the live data, opens storage ([`Broker::open`]) and keeps the server's one
//! metrics registry ([`Broker::metrics`]).

pub mod attempts;
pub mod budget;
mod dropped;
mod durability;
mod enqueue;
pub mod history;
pub mod labelled;
pub mod lease_latency;
mod mailbox;
pub mod metrics;
mod open;
mod schedules;
mod timers;
pub mod workers;

use std::borrow::Cow;
use std::collections::HashMap;
use std::ops::{Deref, DerefMut};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use jobyard_engine::{Body, ConnId, Engine, EngineCore, Job, JobId, Millis, NoticeKind};
use jobyard_storage::{DirLock, Log};
use tokio::sync::Notify;

pub use attempts::Attempt;
pub use durability::Compaction;
pub use jobyard_storage::{Addrs, ClusterNode, ClusterState, ClusterView, Leadership, Lsn, Role};
pub use labelled::{FigureKind, LabelledMetrics, LabelledRow};
pub use lease_latency::{
    HistogramSnapshot, LatencyHistogram, LeaseLatency, QueueLeaseLatency, LEASE_BUCKETS_US,
};
pub use mailbox::{Mailbox, MAILBOX_CAP};
pub use metrics::{Metrics, ProtocolMetrics};
pub use open::{OpenError, StorageOptions, DEFAULT_BODIES_IN_LOG, DEFAULT_HOT_BODY_BYTES};
pub use schedules::{when_of, ScheduleSpec};
pub use workers::{Listed, ProcessInfo, WorkerInfo, Workers};

/// The engine and who to tell about what it does. Guarded by one mutex.
struct Core {
    engine: EngineCore,
    mailboxes: HashMap<ConnId, mailbox::Sender>,
    /// Lease-to-complete histogram handles by queue id (see [`lease_latency`]).
    lease_handles: lease_latency::LeaseHandles,
    /// Each job's last attempts (see [`attempts`]).
    attempts: attempts::AttemptLog,
}

/// The shared live engine. Cheap to clone through an `Arc`.
pub struct Broker {
    core: Mutex<Core>,
    log: Option<Log>,
    /// The log's leadership of a PostgreSQL storage: checked at every lock, so no job is
    /// handed out once the lease may have run out.
    leadership: Option<Arc<jobyard_storage::Leadership>>,
    data_dir: Option<PathBuf>,
    durable_changed: Arc<Notify>,
    timer_changed: Notify,
    /// When the timer task next wakes up on its own (ms since epoch; MAX = never).
    timer_at: AtomicU64,
    next_conn: AtomicU64,
    draining: AtomicBool,
    /// Set by [`Broker::shutdown`]: a snapshot being copied is abandoned (the log keeps its
    /// segments, so nothing is lost) rather than making the shutdown wait for it.
    stopping: AtomicBool,
    compaction: Compaction,
    metrics: Metrics,
    /// The front ends' workers and worker processes, for the operator.
    workers: Workers,
    /// The last hours of every queue's figures, sampled once a second for the dashboard.
    history: history::History,
    /// Wakes the scheduler when a schedule is declared, changed or resumed.
    schedules_changed: Notify,
    /// Origin of the monotonic microsecond clock that stamps leases.
    started: Instant,
    /// Held for as long as the broker lives: one server per data directory.
    dir_lock: Mutex<Option<DirLock>>,
    /// This node's view of the cluster sharing its PostgreSQL storage (set once, by
    /// [`Broker::open`]); unset with any other storage.
    cluster_view: std::sync::OnceLock<Arc<ClusterView>>,
}

impl Broker {
    /// A broker over an engine recovered from `log` and its data directory (none when the
    /// log is in PostgreSQL), or an in-memory one when `log` is `None`. `durable_changed`
    /// must be the notifier the log's writer signals.
    pub fn new(
        engine: EngineCore,
        log: Option<(Log, Option<PathBuf>)>,
        durable_changed: Arc<Notify>,
        compaction: Compaction,
    ) -> Arc<Broker> {
        let (log, data_dir) = match log {
            Some((log, dir)) => (Some(log), dir),
            None => (None, None),
        };
        let mut engine = engine;
        engine.time_leases(true);
        let leadership = log.as_ref().and_then(Log::leadership);
        Arc::new(Broker {
            leadership,
            core: Mutex::new(Core {
                engine,
                mailboxes: HashMap::new(),
                lease_handles: lease_latency::LeaseHandles::default(),
                attempts: attempts::AttemptLog::default(),
            }),
            log,
            data_dir,
            durable_changed,
            timer_changed: Notify::new(),
            timer_at: AtomicU64::new(u64::MAX),
            next_conn: AtomicU64::new(1),
            draining: AtomicBool::new(false),
            stopping: AtomicBool::new(false),
            compaction,
            metrics: Metrics::default(),
            workers: Workers::default(),
            history: history::History::default(),
            schedules_changed: Notify::new(),
            started: Instant::now(),
            dir_lock: Mutex::new(None),
            cluster_view: std::sync::OnceLock::new(),
        })
    }

    /// A broker with no storage: jobs live in memory only.
    pub fn in_memory() -> Arc<Broker> {
        Broker::new(
            EngineCore::new(),
            None,
            Arc::new(Notify::new()),
            Compaction::default(),
        )
    }

    /// The server's metrics registry.
    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    /// The front ends' workers and worker processes (a protocol-neutral registry the
    /// dashboard lists).
    pub fn workers(&self) -> &Workers {
        &self.workers
    }

    /// The sampled history of every queue's figures (see [`history`]).
    pub fn history(&self) -> &history::History {
        &self.history
    }

    /// Every queue's lease-to-complete histograms, sorted by queue name. Histograms of
    /// queues that are gone and saw nothing for a while are forgotten first.
    pub fn lease_latency(&self) -> Vec<Arc<QueueLeaseLatency>> {
        let registry = &self.metrics.lease_latency;
        let mut txn = self.lock();
        let now = self.lease_clock();
        let core = &mut *txn.core;
        let engine = &core.engine;
        if registry.forget_idle(|name| engine.queue_id(name).is_some(), now) {
            core.lease_handles.drop_forgotten(registry);
        }
        drop(txn);
        registry.queues()
    }

    /// Microseconds since the broker started, never going back: the clock of lease stamps.
    fn lease_clock(&self) -> u64 {
        self.started.elapsed().as_micros() as u64
    }

    /// Current wall-clock time in the engine's unit.
    pub fn now() -> Millis {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis() as Millis)
            .unwrap_or(0)
    }

    /// This node's leadership of a PostgreSQL storage (its epoch, and whether it may hand
    /// out jobs; the live nodes are in [`Broker::cluster_view`]); `None` with any other
    /// storage.
    pub fn leadership(&self) -> Option<&Arc<jobyard_storage::Leadership>> {
        self.leadership.as_ref()
    }

    /// This node's view of the cluster sharing its PostgreSQL storage (role, epoch, leader,
    /// live nodes), kept current by the storage; `None` with any other storage, which is a
    /// cluster of one.
    pub fn cluster_view(&self) -> Option<&Arc<ClusterView>> {
        self.cluster_view.get()
    }

    /// Locks the engine for a series of operations.
    pub fn lock(&self) -> Txn<'_> {
        let mut txn = Txn {
            broker: self,
            core: self.core.lock().unwrap_or_else(|e| e.into_inner()),
            lsn: 0,
            handed_off: false,
            dropped: dropped::DroppedBodies::default(),
        };
        if let Some(leadership) = &self.leadership {
            txn.core.engine.set_handing_out(leadership.may_hand_out());
        }
        // Bodies the log has written (or compaction moved) since the last turn: the
        // engine keeps their places instead. Done before anything reads a body, so a body
        // is never looked for in a file compaction has already let go of.
        if let Some(log) = &self.log {
            let mut located = log.take_located();
            if !located.is_empty() {
                let engine = &mut txn.core.engine;
                for (id, at) in located.moved {
                    engine.body_moved(id, at);
                }
                if !located.written.is_empty() {
                    engine.bodies_written(located.written.drain(..));
                }
                log.give_back_located(located.written);
                txn.dropped.take_from(&mut txn.core.engine);
            }
        }
        txn
    }

    /// Registers a new session (a connection, or a worker token of a front end whose
    /// peers are not connections); notices for it arrive in the returned mailbox.
    pub fn connect(&self) -> (ConnId, Mailbox) {
        let conn = self.next_conn.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = mailbox::channel();
        self.lock().core.mailboxes.insert(conn, tx);
        (conn, rx)
    }

    /// Reads jobs a chunk at a time, taking the engine lock once per chunk, so an admin
    /// command that walks a million jobs never holds every connection up for the whole walk
    /// (as the snapshot copy does). Jobs gone by the time their chunk is read are skipped.
    pub fn for_each_job(&self, ids: &[JobId], mut f: impl FnMut(&Engine, &Job)) {
        for chunk in ids.chunks(durability::SNAPSHOT_CHUNK) {
            let txn = self.lock();
            for id in chunk {
                if let Some(job) = txn.job(*id) {
                    f(&txn, job);
                }
            }
        }
    }

    /// Forgets a connection: its wait ends and the jobs it held are ready again.
    pub fn disconnect(&self, conn: ConnId) {
        let mut txn = self.lock();
        txn.core.mailboxes.remove(&conn);
        txn.disconnect(conn, Self::now());
    }

    /// Whether puts are refused (SIGUSR1 / drain mode). One way: only a restart ends it.
    pub fn draining(&self) -> bool {
        self.draining.load(Ordering::Relaxed)
    }

    pub fn start_draining(&self) {
        self.draining.store(true, Ordering::Relaxed);
    }

    /// The log, when jobs are persisted.
    pub fn log(&self) -> Option<&Log> {
        self.log.as_ref()
    }

    /// Waits until everything up to `lsn` is durable (as the fsync mode defines it).
    pub async fn wait_durable(&self, lsn: Lsn) {
        let Some(log) = &self.log else { return };
        if lsn == 0 || log.durable() >= lsn || log.write_through(lsn) {
            return;
        }
        loop {
            let notified = self.durable_changed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if log.durable() >= lsn {
                return;
            }
            notified.await;
        }
    }

    /// Starts the clock, the history sampler, the scheduler and the compaction check. Call
    /// once, inside a tokio runtime.
    pub fn start(self: &Arc<Self>) {
        tokio::spawn(timers::run(self.clone()));
        tokio::spawn(history::sampler::run(self.clone()));
        tokio::spawn(schedules::run(self.clone()));
        if self.log.is_some() {
            tokio::spawn(durability::compact_when_needed(self.clone()));
        }
    }

    /// Writes and syncs everything in the log and stops its writer, after a snapshot in
    /// progress has finished or, if it was still copying jobs, been abandoned. Call once
    /// connections are closed.
    pub fn shutdown(&self) {
        self.stopping.store(true, Ordering::Release);
        if let Some(log) = &self.log {
            while log.snapshot_running() {
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            log.close();
        }
    }
}

/// A locked engine. Dereferences to [`Engine`]; [`Txn::commit`] (or dropping it) sends the
/// changes to the log and the notices to their connections.
///
/// A front end runs the engine's operations on it, and nothing else: the plumbing (taking
/// the changes and notices out, ticking the clock, stamping leases, placing bodies,
/// replaying, snapshotting) is on [`EngineCore`], which only the broker holds. So every
/// change a front end makes reaches the log through the commit, in the engine's order, and
/// the compiler keeps it that way:
///
/// ```no_run
/// fn front_end(txn: &mut jobyard_broker::Txn<'_>) {
///     let q = txn.queue_id_or_create(b"emails");
///     txn.pin(q);
/// }
/// ```
///
/// A front end cannot take the changes out (they would never reach the log):
///
/// ```compile_fail,E0624
/// fn front_end(txn: &mut jobyard_broker::Txn<'_>) {
///     let q = txn.queue_id_or_create(b"emails");
///     txn.pin(q);
///     txn.take_changes();
/// }
/// ```
///
/// nor the notices meant for other sessions' mailboxes:
///
/// ```compile_fail,E0624
/// fn front_end(txn: &mut jobyard_broker::Txn<'_>) {
///     let q = txn.queue_id_or_create(b"emails");
///     txn.pin(q);
///     txn.take_notices();
/// }
/// ```
///
/// nor run the clock, replay a change or stamp leases:
///
/// ```compile_fail,E0624
/// fn front_end(txn: &mut jobyard_broker::Txn<'_>) {
///     let q = txn.queue_id_or_create(b"emails");
///     txn.pin(q);
///     txn.tick(0);
/// }
/// ```
///
/// ```compile_fail,E0624
/// fn front_end(txn: &mut jobyard_broker::Txn<'_>, change: jobyard_engine::Change) {
///     let q = txn.queue_id_or_create(b"emails");
///     txn.pin(q);
///     txn.replay(change);
/// }
/// ```
///
/// ```compile_fail,E0624
/// fn front_end(txn: &mut jobyard_broker::Txn<'_>) {
///     let q = txn.queue_id_or_create(b"emails");
///     txn.pin(q);
///     txn.stamp_leases(0);
/// }
/// ```
pub struct Txn<'a> {
    broker: &'a Broker,
    core: MutexGuard<'a, Core>,
    lsn: Lsn,
    /// Whether this turn handed a job to a waiting lease (see [`Txn::commit_handing_off`]).
    handed_off: bool,
    /// Bodies the engine let go of this turn: declared after `core`, so they are freed
    /// after the lock is released, not while every other connection waits for it.
    dropped: dropped::DroppedBodies,
}

impl Txn<'_> {
    /// A job's last attempts, oldest first, and whether it has ended (`None`: no attempt
    /// known: never leased, or ended long enough ago to be forgotten).
    pub fn attempts(&self, job: JobId) -> Option<(Vec<Attempt>, bool)> {
        self.core.attempts.of(job)
    }

    /// When the lease now held on `job` began, wall-clock milliseconds (`None`: not leased,
    /// or leased in a transaction not committed yet).
    pub fn lease_began_ms(&self, job: JobId) -> Option<Millis> {
        let stamp = self.core.engine.lease_started(job)?;
        let lasted_ms = self.broker.lease_clock().saturating_sub(stamp) / 1000;
        Some(Broker::now().saturating_sub(lasted_ms))
    }

    /// A job's body, read back from the log when only the log holds it.
    pub fn body<'j>(&self, job: &'j Job) -> std::io::Result<Cow<'j, [u8]>> {
        match (&job.body, &self.broker.log) {
            (Body::Mem(b), _) => Ok(Cow::Borrowed(b)),
            (Body::Log(at), Some(log)) => log.read_body(*at).map(Cow::Owned),
            (Body::Log(_), None) => Err(std::io::Error::other("no log to read the body from")),
        }
    }

    /// Ends the transaction and returns the log position its changes must reach before
    /// anything about them is acknowledged (0 if there were none).
    pub fn commit(mut self) -> Lsn {
        self.flush();
        self.lsn
    }

    /// Like [`Txn::commit`], and also tells whether the turn handed a job to another
    /// connection's waiting lease. A front end that answers both after the same fsync
    /// uses it to let the lease's answer go first: the lease's holder starts the next
    /// step of the work, the reporter's answer only frees it.
    pub fn commit_handing_off(mut self) -> (Lsn, bool) {
        self.flush();
        (self.lsn, self.handed_off)
    }

    /// The engine with its plumbing, for the broker's own work (the clock, compaction);
    /// never handed to a front end.
    fn engine_core(&mut self) -> &mut EngineCore {
        &mut self.core.engine
    }

    fn flush(&mut self) {
        let core = &mut *self.core;
        if core.engine.has_changes() {
            match &self.broker.log {
                Some(log) => self.lsn = log.append(core.engine.take_changes()),
                None => {
                    core.engine.take_changes();
                }
            }
        }
        // Lease timing: one clock read, only for a transaction that made or ended a lease.
        if core.engine.has_lease_timing_work() {
            let now = self.broker.lease_clock();
            core.engine.stamp_leases(now);
            let registry = &self.broker.metrics.lease_latency;
            for end in core.engine.take_lease_ends() {
                core.lease_handles.record(registry, &end, now);
            }
        }
        // Attempts: the clocks are read only for a transaction in which a lease ended.
        core.attempts.buffer.extend(core.engine.take_lease_closes());
        if !core.attempts.buffer.is_empty() {
            let engine = &core.engine;
            let now = self.broker.lease_clock();
            core.attempts
                .record(now, Broker::now(), |id| engine.job(id).is_some());
        }
        for notice in core.engine.take_notices() {
            if let Some(tx) = core.mailboxes.get(&notice.conn) {
                self.handed_off |= matches!(notice.kind, NoticeKind::Reserved(_));
                tx.send(notice.kind);
            }
        }
        if let Some(next) = core.engine.next_deadline() {
            if next < self.broker.timer_at.load(Ordering::Relaxed) {
                self.broker.timer_at.store(next, Ordering::Relaxed);
                self.broker.timer_changed.notify_one();
            }
        }
    }
}

impl Deref for Txn<'_> {
    type Target = Engine;
    fn deref(&self) -> &Engine {
        &self.core.engine
    }
}

impl DerefMut for Txn<'_> {
    fn deref_mut(&mut self) -> &mut Engine {
        &mut self.core.engine
    }
}

impl Drop for Txn<'_> {
    fn drop(&mut self) {
        self.flush();
    }
}
