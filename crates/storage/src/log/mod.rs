//! The log: appends are buffered under a short lock, and one writer hands whatever
//! accumulated to the backend with one write and one sync (group commit), so concurrent
//! commands share them. Segment files are the backend ([`crate::segments`]); everything
//! here is the same for any [`LogBackend`].

mod backend;
mod bodies;
mod fsync;
mod group_commit;
mod options;
mod snapshot;
mod space;
mod state;
mod writer_thread;

use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use jobyard_engine::Change;

use crate::codec::encode_change;
#[cfg(feature = "postgres")]
use crate::postgres::PgLog;
use crate::segments::SegmentFiles;
use crate::stats::LogStats;
use crate::Lsn;

#[cfg(feature = "postgres")]
use backend::ConsumedRows;
pub(crate) use backend::{BatchStart, LogBackend};
pub(crate) use fsync::{fsync_failed, sync_or_die};
pub use options::{FsyncMode, LogOptions};
pub use snapshot::SnapshotFeed;
#[cfg(feature = "postgres")]
pub(crate) use space::NoRoom;
pub(crate) use space::{is_no_space, NO_ROOM_MESSAGE};
use state::{Pending, Shared, WriterState};

/// How long [`Log::close`] keeps retrying a write that fails before it stops anyway.
pub(crate) const CLOSE_GIVE_UP: Duration = Duration::from_secs(3);

/// The append side of the log, shared by every connection.
pub struct Log {
    shared: Backed,
    thread: Mutex<Option<JoinHandle<()>>>,
}

/// The log's state over the backend chosen at open. A match on it is the only cost of
/// having two: every call past it is the same generic code, monomorphized per backend.
enum Backed {
    Files(Arc<Shared<SegmentFiles>>),
    #[cfg(feature = "postgres")]
    Postgres(Arc<Shared<PgLog>>),
}

/// Runs `$body` with `$shared` bound to the log's `Arc<Shared<B>>`, whatever its backend.
macro_rules! with_shared {
    ($log:expr, $shared:ident => $body:expr) => {
        match &$log.shared {
            $crate::log::Backed::Files($shared) => $body,
            #[cfg(feature = "postgres")]
            $crate::log::Backed::Postgres($shared) => $body,
        }
    };
}
pub(crate) use with_shared;

impl Log {
    /// Starts a fresh segment `first_segment` in `dir` and the writer thread.
    /// `on_durable` is called from the writer thread each time more records are safe.
    pub fn open(
        dir: &Path,
        first_segment: u64,
        options: LogOptions,
        on_durable: Box<dyn Fn(Lsn) + Send + Sync>,
    ) -> io::Result<Log> {
        Log::open_after_recovery(dir, first_segment, options, on_durable, &[])
    }

    /// [`Log::open`] that also makes the files recovery read (`RecoveryReport::files`)
    /// readable for bodies, file number `n` as body file index `n`, so places recovery
    /// reported ([`crate::recover_placed`]) can be used as they are (`bodies_in_log`).
    pub fn open_after_recovery(
        dir: &Path,
        first_segment: u64,
        options: LogOptions,
        on_durable: Box<dyn Fn(Lsn) + Send + Sync>,
        recovered: &[PathBuf],
    ) -> io::Result<Log> {
        let (files, writer, full) = SegmentFiles::open(dir, first_segment, &options, recovered)?;
        let (shared, thread) = start(files, writer, full, first_segment, options, on_durable)?;
        Ok(Log {
            shared: Backed::Files(shared),
            thread: Mutex::new(Some(thread)),
        })
    }

    /// Continues a log kept in PostgreSQL where its recovery ended, with section
    /// `first_section` (the report's `next_segment`). Every batch is committed before it
    /// is acknowledged, so the fsync mode is always [`FsyncMode::Always`]; bodies stay in
    /// memory ([`LogOptions::bodies_in_log`] is ignored).
    #[cfg(feature = "postgres")]
    pub fn open_postgres(
        recovered: crate::postgres::PgRecovered,
        first_section: u64,
        options: LogOptions,
        on_durable: Box<dyn Fn(Lsn) + Send + Sync>,
    ) -> io::Result<Log> {
        let options = LogOptions {
            fsync: FsyncMode::Always,
            bodies_in_log: false,
            ..options
        };
        let (backend, writer) = recovered.into_backend(first_section, &options);
        let (shared, thread) = start(backend, writer, false, first_section, options, on_durable)?;
        Ok(Log {
            shared: Backed::Postgres(shared),
            thread: Mutex::new(Some(thread)),
        })
    }

    /// Encodes changes into the pending buffer; returns the LSN that covers them.
    /// Call it in the same critical section that made the changes, so the log's order is
    /// the engine's order.
    pub fn append(&self, changes: impl Iterator<Item = Change>) -> Lsn {
        with_shared!(self, shared => {
            let mut p = shared.pending.lock().expect("log lock");
            let was_empty = p.buf.is_empty();
            let track = shared.backend.bodies().is_some();
            for change in changes {
                encode_change(&change, &mut p.buf);
                p.appended += 1;
                if let (true, Change::Put { id, body, .. }) = (track, &change) {
                    // The body ends the record.
                    let at = p.buf.len() - body.len();
                    p.bodies.push((*id, at, body.len()));
                }
            }
            let lsn = p.appended;
            // In `always` mode the writer thread does every write. Otherwise whoever waits for
            // the records writes them inline, and the writer thread only sweeps up, on its
            // timer, records that nobody waits for — waking it here would cost a context
            // switch per batch.
            // A dozing writer is woken too, once, so its sweep resumes with the traffic.
            if was_empty
                && !p.buf.is_empty()
                && (shared.options.fsync == FsyncMode::Always || p.dozing)
            {
                p.dozing = false;
                shared.wake.notify_one();
            }
            lsn

        })
    }

    /// [`Log::append`] for the puts of rows consumed from PostgreSQL's transactional
    /// enqueue table (`rows`: their ids): the batch that makes these records durable
    /// also deletes the rows, in the same PostgreSQL transaction, so each row becomes a
    /// logged job exactly once. Call it with the engine locked, as `append`. A log in
    /// files has no such table: the ids are ignored there.
    #[cfg(feature = "postgres")]
    pub fn append_consuming(&self, changes: impl Iterator<Item = Change>, rows: Vec<i64>) -> Lsn {
        match &self.shared {
            Backed::Files(_) => self.append(changes),
            Backed::Postgres(shared) => {
                let mut p = shared.pending.lock().expect("log lock");
                let was_empty = p.buf.is_empty();
                for change in changes {
                    encode_change(&change, &mut p.buf);
                    p.appended += 1;
                }
                if !rows.is_empty() {
                    let ends_at = p.buf.len();
                    p.consumed.push(ConsumedRows { ends_at, ids: rows });
                }
                // Always mode: the writer thread writes every batch.
                if was_empty && !p.buf.is_empty() {
                    shared.wake.notify_one();
                }
                p.appended
            }
        }
    }

    /// The PostgreSQL backend, when the log is kept there.
    #[cfg(feature = "postgres")]
    pub(crate) fn postgres(&self) -> Option<&PgLog> {
        match &self.shared {
            Backed::Files(_) => None,
            Backed::Postgres(shared) => Some(&shared.backend),
        }
    }

    /// Makes everything up to `lsn` durable on the calling thread when the fsync mode only
    /// asks for `write(2)` before a reply (`interval`, `never`), and returns true. Saves a
    /// hand-off to the writer thread per batch; concurrent callers still share one write.
    /// Returns false in `always` mode, where the caller must wait for the writer thread
    /// (an fsync must not block the caller's thread).
    pub fn write_through(&self, lsn: Lsn) -> bool {
        with_shared!(self, shared => {
            if shared.options.fsync == FsyncMode::Always {
                return false;
            }
            if self.durable() >= lsn {
                return true;
            }
            if shared.failing.load(Ordering::Acquire) {
                // The writer thread is retrying a failed write under the writer lock: wait
                // for it asynchronously instead of blocking this thread on the lock.
                return false;
            }
            let mut w = shared.writer.lock().expect("log writer lock");
            if self.durable() < lsn {
                group_commit::write_batch(shared, &mut w, false);
            }
            true

        })
    }

    /// The LSN of the last records appended: waiting for it covers every change already
    /// made, also ones another caller appended (a change another transaction made on
    /// this caller's behalf).
    pub fn appended(&self) -> Lsn {
        with_shared!(self, shared => {
            shared.pending.lock().expect("log lock").appended

        })
    }

    /// Everything up to this LSN may be acknowledged.
    pub fn durable(&self) -> Lsn {
        with_shared!(self, shared => {
            shared.durable.load(Ordering::Acquire)

        })
    }

    /// Records written since start (for stats).
    pub fn records_written(&self) -> u64 {
        with_shared!(self, shared => {
            shared.records_written.load(Ordering::Relaxed)

        })
    }

    /// Figures for operators: bytes and write batches (records: [`Log::records_written`];
    /// syncs: [`crate::sync_stats`]).
    pub fn stats(&self) -> &LogStats {
        with_shared!(self, shared => {
            &shared.stats

        })
    }

    /// The segment new records go to.
    pub fn current_segment(&self) -> u64 {
        with_shared!(self, shared => {
            shared.current_segment.load(Ordering::Relaxed)

        })
    }

    /// The bytes the log holds when its backend keeps count (PostgreSQL: the rows'
    /// data); `None` for segment files, whose size is measured on disk
    /// ([`crate::disk_bytes`]). Compaction compares it with the live data.
    pub fn stored_bytes(&self) -> Option<u64> {
        match &self.shared {
            Backed::Files(_) => None,
            #[cfg(feature = "postgres")]
            Backed::Postgres(shared) => Some(shared.backend.stored_bytes()),
        }
    }

    /// This node's leadership of a PostgreSQL storage (its epoch, whether it may hand out
    /// jobs; the live nodes are in the cluster view); `None` for segment files, which have
    /// no other node.
    pub fn leadership(&self) -> Option<Arc<crate::Leadership>> {
        match &self.shared {
            Backed::Files(_) => None,
            #[cfg(feature = "postgres")]
            Backed::Postgres(shared) => Some(shared.backend.leadership().clone()),
        }
    }

    /// The oldest file still needed for recovery.
    pub fn oldest_segment(&self) -> u64 {
        with_shared!(self, shared => {
            shared.backend.oldest_section()

        })
    }

    /// Writes and syncs everything appended, then stops the writer. Later appends are
    /// never written, so call it only once nothing else will be acknowledged.
    ///
    /// If the log cannot be written (disk full, I/O error), it keeps trying for 3 s
    /// (`CLOSE_GIVE_UP`) and then stops anyway: what was not written was never
    /// acknowledged, and what was acknowledged is already on disk.
    pub fn close(&self) {
        with_shared!(self, shared => {
            let thread = self.thread.lock().expect("log thread lock").take();
            if let Some(thread) = thread {
                shared.closing.store(true, Ordering::Release);
                shared.pending.lock().expect("log lock").shutdown = true;
                shared.wake.notify_one();
                let _ = thread.join();
            }

        })
    }
}

/// The log's shared state over `backend` and its writer thread.
fn start<B: LogBackend>(
    backend: B,
    writer: B::Writer,
    full: bool,
    first_segment: u64,
    options: LogOptions,
    on_durable: Box<dyn Fn(Lsn) + Send + Sync>,
) -> io::Result<(Arc<Shared<B>>, JoinHandle<()>)> {
    let shared = Arc::new(Shared {
        backend,
        options,
        pending: Mutex::new(Pending::default()),
        wake: Condvar::new(),
        durable: AtomicU64::new(0),
        snapshot_running: AtomicBool::new(false),
        records_written: AtomicU64::new(0),
        stats: LogStats::default(),
        current_segment: AtomicU64::new(first_segment),
        accepting: AtomicBool::new(!full),
        failing: AtomicBool::new(false),
        closing: AtomicBool::new(false),
        snapshot_failing: AtomicBool::new(false),
        on_durable,
        writer: Mutex::new(WriterState::new(writer, full)),
    });
    let worker = shared.clone();
    let thread = std::thread::Builder::new()
        .name("jobyard-log".into())
        .spawn(move || writer_thread::write_loop(worker))?;
    Ok((shared, thread))
}

impl Drop for Log {
    fn drop(&mut self) {
        self.close();
    }
}
