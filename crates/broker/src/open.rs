//! Opening storage: lock the data directory (or, in PostgreSQL, follow the log as a
//! standby until this node holds the leader's lease), rebuild the engine from the log,
//! start the writer.
//!
//! Lives in the broker (not in the binary) so every way of starting a server — `jobyard
//! serve`, the beanstalkd and gearmand command lines, tests — opens storage the same way,
//! and the log's durability notifications are wired to the broker's waiters in one place.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::Bytes;
use jobyard_engine::Change;
use jobyard_engine::EngineCore;
use jobyard_storage::{
    body_ref, recover_placed, ClusterView, DirLock, FsyncMode, Log, LogOptions, PgLocation,
};
use tokio::sync::Notify;

use crate::{Broker, Compaction};

/// Whether durable bodies are kept only in the log unless told otherwise: memory per
/// queued job is a product target (docs/performance.md).
pub const DEFAULT_BODIES_IN_LOG: bool = true;

/// The most bytes of bodies kept in memory for a turn after their records are written,
/// unless told otherwise (see [`EngineCore::set_hot_body_budget`]): a turn's bodies are one
/// write batch, rarely more than a few hundred KB; past this, the oldest go at once.
pub const DEFAULT_HOT_BODY_BYTES: usize = 1 << 20;

/// How to open storage.
#[derive(Clone, Debug)]
pub struct StorageOptions {
    /// `None`: jobs live in memory only (beanstalkd without `-b`).
    pub data_dir: Option<PathBuf>,
    pub fsync: FsyncMode,
    pub segment_bytes: u64,
    pub compaction: Compaction,
    /// Start despite damaged records, skipping them.
    pub salvage: bool,
    /// Keep durable bodies only in the log once written
    /// ([`jobyard_storage::LogOptions::bodies_in_log`]), but for the newest ones.
    pub bodies_in_log: bool,
    /// With `bodies_in_log`: the most bytes of just-written bodies kept in memory until the
    /// next write, so jobs handed out right after their put are not read back (see
    /// [`EngineCore::set_hot_body_budget`]).
    pub hot_body_bytes: usize,
    /// Queues created (and pinned) before the log is replayed, so they list first
    /// (beanstalkd's `default`).
    pub queues_first: Vec<Bytes>,
    /// Keep the log in PostgreSQL instead of `data_dir` (`--storage postgres://...`).
    pub postgres: Option<PgLocation>,
    /// With `postgres`: this node's view of its cluster, kept current by the storage from
    /// the first connection on (starting, standby, leader), so the server can show it (and
    /// forward clients to the leader) while [`Broker::open`] still waits. `None`: the
    /// broker makes one. Unused with any other storage.
    pub cluster_view: Option<Arc<ClusterView>>,
}

/// Why storage could not be opened: a message, and the process exit code the drop-in
/// command lines use for it (beanstalkd's: 10 when the directory is locked).
#[derive(Debug)]
pub struct OpenError {
    pub message: String,
    pub exit_code: i32,
}

impl std::fmt::Display for OpenError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

fn fail(message: String, exit_code: i32) -> OpenError {
    OpenError { message, exit_code }
}

impl Broker {
    /// A broker over the data directory of `options` (recovered, locked, log started), or
    /// over an empty in-memory engine when there is none.
    ///
    /// With PostgreSQL storage (`options.postgres`) this blocks until this node leads:
    /// first while PostgreSQL cannot be reached (retrying with backoff), then as a standby
    /// that follows the log into its engine while another node holds the lease. Run it on
    /// a thread that may block. Meanwhile `options.cluster_view` (pass one to watch it)
    /// is kept current, which is how the server learns everything before this returns:
    /// [`Role::Starting`](crate::Role::Starting) while connecting and loading,
    /// [`Role::Standby`](crate::Role::Standby) with the leader's name, epoch and advertised
    /// addresses (refreshed every 250 ms) and this node's lag, then
    /// [`Role::Leader`](crate::Role::Leader) just before it returns; the same view is then
    /// [`Broker::cluster_view`]. It returns an error only for what retrying cannot fix (a
    /// wrong setting, a log it cannot read).
    pub fn open(options: StorageOptions) -> Result<Arc<Broker>, OpenError> {
        let durable_changed = Arc::new(Notify::new());
        let mut engine = fresh_engine(&options.queues_first);
        if let Some(postgres) = &options.postgres {
            let view = options
                .cluster_view
                .clone()
                .unwrap_or_else(|| Arc::new(ClusterView::new(postgres.node_name.clone())));
            let log = open_postgres(
                postgres,
                &options,
                &view,
                &mut engine,
                durable_changed.clone(),
            )?;
            let broker = Broker::new(
                engine,
                Some((log, None)),
                durable_changed,
                options.compaction,
            );
            let _ = broker.cluster_view.set(view);
            return Ok(broker);
        }
        let Some(dir) = &options.data_dir else {
            return Ok(Broker::new(
                engine,
                None,
                durable_changed,
                options.compaction,
            ));
        };
        let (log, lock) = open_dir(dir, &options, &mut engine, durable_changed.clone())?;
        let broker = Broker::new(
            engine,
            Some((log, Some(dir.clone()))),
            durable_changed,
            options.compaction,
        );
        *broker.dir_lock.lock().unwrap_or_else(|e| e.into_inner()) = Some(lock);
        Ok(broker)
    }
}

/// An engine before any log is replayed: only the queues that list first (pinned).
fn fresh_engine(queues_first: &[Bytes]) -> EngineCore {
    let mut engine = EngineCore::new();
    for name in queues_first {
        let q = engine.queue_id_or_create(name);
        engine.pin(q);
    }
    engine
}

fn open_dir(
    dir: &Path,
    options: &StorageOptions,
    engine: &mut EngineCore,
    durable_changed: Arc<Notify>,
) -> Result<(Log, DirLock), OpenError> {
    std::fs::create_dir_all(dir)
        .map_err(|e| fail(format!("cannot create {}: {e}", dir.display()), 1))?;
    let lock = DirLock::acquire(dir).map_err(|e| match e.kind() {
        std::io::ErrorKind::WouldBlock => fail(
            format!(
                "data directory {} is in use by another process ({e})",
                dir.display()
            ),
            10,
        ),
        // A read-only or inaccessible directory is not "in use": say what it is.
        _ => fail(
            format!(
                "cannot open {} for writing: {e}",
                dir.join("lock").display()
            ),
            1,
        ),
    })?;
    let started = std::time::Instant::now();
    // With bodies kept in the log, recovery records where each body is instead of keeping
    // it (each body is dropped as soon as its job is rebuilt, so memory never holds them
    // all). Not when salvaging: the snapshot that follows a salvage is taken in one go
    // from memory.
    let place_bodies = options.bodies_in_log && !options.salvage;
    let report = recover_placed(dir, options.salvage, |change, place| {
        let at = match (&change, place) {
            (Change::Put { body, .. }, Some((file, offset))) if place_bodies => {
                body_ref(file, offset, body.len())
            }
            _ => None,
        };
        engine.replay_placed(change, at);
    })
    .map_err(|e| fail(format!("cannot recover the log: {e}"), 1))?;
    engine.raise_next_id(report.next_id);
    if options.bodies_in_log {
        engine.set_hot_body_budget(options.hot_body_bytes);
    }
    if let Some((path, offset, dropped)) = &report.torn_tail {
        tracing::warn!(
            "dropped {dropped} bytes of a record cut off at {}:{offset} (written when the \
             server stopped; never acknowledged)",
            path.display()
        );
    }
    for (path, offset, skipped) in &report.salvaged {
        tracing::warn!(
            "salvage: skipped {skipped} unreadable bytes at {}:{offset}",
            path.display()
        );
    }
    for path in &report.missing {
        tracing::warn!(
            "salvage: started without {}, which the log needed (the jobs it held are lost)",
            path.display()
        );
    }
    tracing::info!(
        "recovered {} jobs from {} records in {:?}",
        engine.job_count(),
        report.records,
        started.elapsed()
    );
    let log_options = LogOptions {
        fsync: options.fsync,
        segment_bytes: options.segment_bytes,
        bodies_in_log: options.bodies_in_log,
    };
    let salvaged = !report.salvaged.is_empty() || !report.missing.is_empty();
    let log = Log::open_after_recovery(
        dir,
        report.next_segment,
        log_options,
        Box::new(move |_| durable_changed.notify_waiters()),
        if place_bodies { &report.files } else { &[] },
    )
    .map_err(|e| fail(format!("cannot open the log in {}: {e}", dir.display()), 1))?;
    if salvaged {
        // What salvage skipped or did without must not be needed again: a snapshot of
        // what was recovered replaces every file before it.
        log.request_snapshot(engine.snapshot(), engine.next_id());
    }
    Ok((log, lock))
}

/// Opens the log in PostgreSQL: follows it into `engine` as a standby until this node
/// leads (keeping `view` current), then continues it as the leader. A PostgreSQL that is
/// down or starting is waited for, with backoff, and said so; a wrong setting (URL,
/// password, database, privileges, a newer schema) is one line.
#[cfg(feature = "postgres")]
fn open_postgres(
    postgres: &PgLocation,
    options: &StorageOptions,
    view: &Arc<ClusterView>,
    engine: &mut EngineCore,
    durable_changed: Arc<Notify>,
) -> Result<Log, OpenError> {
    // The client blocks on a runtime of its own, which cannot run inside the server's
    // (whose start-up may call this): a plain thread does the connecting and the replay.
    std::thread::scope(|scope| {
        scope
            .spawn(|| open_postgres_blocking(postgres, options, view, engine, durable_changed))
            .join()
            .unwrap_or_else(|_| Err(fail("opening PostgreSQL storage panicked".into(), 1)))
    })
}

/// The broker's engine as a standby keeps it: the log's changes replayed as recovery
/// replays them, and a fresh engine when the follower must start again from a snapshot.
#[cfg(feature = "postgres")]
struct EngineReplica<'a> {
    engine: &'a mut EngineCore,
    queues_first: &'a [Bytes],
}

#[cfg(feature = "postgres")]
impl jobyard_storage::Replica for EngineReplica<'_> {
    fn apply(&mut self, change: Change) {
        self.engine.replay_placed(change, None);
    }

    fn reset(&mut self) {
        *self.engine = fresh_engine(self.queues_first);
    }
}

/// [`open_postgres`] on a thread where blocking is allowed.
#[cfg(feature = "postgres")]
fn open_postgres_blocking(
    postgres: &PgLocation,
    options: &StorageOptions,
    view: &Arc<ClusterView>,
    engine: &mut EngineCore,
    durable_changed: Arc<Notify>,
) -> Result<Log, OpenError> {
    use jobyard_storage::PgTarget;
    let target =
        PgTarget::parse(&postgres.url, &postgres.schema).map_err(|e| fail(e.to_string(), 1))?;
    let store = connect_with_backoff(&target, postgres, view)?;
    tracing::info!(
        "storage: PostgreSQL at {}, schema {} (cluster {})",
        target.shown(),
        target.schema(),
        store.cluster_id()
    );
    let mut replica = EngineReplica {
        engine,
        queues_first: &options.queues_first,
    };
    let recovered = store
        .follow_until_leading(&mut replica)
        .map_err(|e| fail(e.to_string(), 1))?;
    let report = recovered.report();
    engine.raise_next_id(report.next_id);
    let next_section = report.next_segment;
    tracing::info!(
        "leading with {} jobs, rebuilt from {} records",
        engine.job_count(),
        report.records
    );
    if options.fsync != FsyncMode::Always {
        tracing::warn!(
            "--fsync {:?} does not apply to PostgreSQL storage: every batch is committed \
             before it is acknowledged",
            options.fsync
        );
    }
    let log_options = LogOptions {
        fsync: FsyncMode::Always,
        segment_bytes: options.segment_bytes,
        bodies_in_log: false,
    };
    Log::open_postgres(
        recovered,
        next_section,
        log_options,
        Box::new(move |_| durable_changed.notify_waiters()),
    )
    .map_err(|e| fail(format!("cannot start the log writer: {e}"), 1))
}

/// The longest wait between two attempts to reach PostgreSQL at start.
#[cfg(feature = "postgres")]
const MAX_CONNECT_BACKOFF: std::time::Duration = std::time::Duration::from_secs(10);

/// Connects to the storage, trying again with growing pauses while PostgreSQL cannot be
/// reached (a server that starts before its database is not a crash loop).
#[cfg(feature = "postgres")]
fn connect_with_backoff(
    target: &jobyard_storage::PgTarget,
    postgres: &PgLocation,
    view: &Arc<ClusterView>,
) -> Result<jobyard_storage::PgStore, OpenError> {
    let mut delay = std::time::Duration::from_millis(250);
    loop {
        match jobyard_storage::PgStore::connect(
            target,
            &postgres.node_name,
            &postgres.advertise,
            view.clone(),
        ) {
            Ok(store) => return Ok(store),
            Err(e) if e.is_retryable() => {
                tracing::warn!("{e}; trying again in {delay:?}");
                std::thread::sleep(delay);
                delay = (delay * 2).min(MAX_CONNECT_BACKOFF);
            }
            Err(e) => return Err(fail(e.to_string(), 1)),
        }
    }
}

/// Without the `postgres` feature there is no PostgreSQL client to open it with.
#[cfg(not(feature = "postgres"))]
fn open_postgres(
    postgres: &PgLocation,
    _options: &StorageOptions,
    _view: &Arc<ClusterView>,
    _engine: &mut EngineCore,
    _durable_changed: Arc<Notify>,
) -> Result<Log, OpenError> {
    Err(fail(
        format!(
            "--storage {}: this jobyard was built without PostgreSQL support (feature `postgres`)",
            postgres.shown()
        ),
        1,
    ))
}
