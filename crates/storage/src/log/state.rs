//! What the log's users, its writer and its snapshot thread share.

use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::{Condvar, Mutex};
use std::time::Instant;

use jobyard_engine::{JobId, LogRef};

use super::backend::{ConsumedRows, LogBackend};
use super::options::LogOptions;
use super::snapshot::SnapshotRequest;
use crate::stats::LogStats;
use crate::Lsn;

/// Records appended and not yet handed to the backend.
#[derive(Default)]
pub(crate) struct Pending {
    pub buf: Vec<u8>,
    /// Bodies in `buf` whose place is reported once written.
    pub bodies: Vec<PendingBody>,
    pub appended: Lsn,
    pub snapshot: Option<SnapshotRequest>,
    pub shutdown: bool,
    /// The writer thread sleeps without a timeout (`interval`/`never` mode, nothing to do
    /// for a while): the next append must wake it.
    pub dozing: bool,
    /// `never` mode: enough was written since the last writeback to start the next now.
    pub writeback_due: bool,
    /// Enqueue rows whose puts are in `buf` (PostgreSQL only; empty otherwise).
    pub consumed: Vec<ConsumedRows>,
}

/// A body in the pending buffer: (job, offset in the buffer, length).
pub(crate) type PendingBody = (u64, usize, usize);

/// The log's state, shared through an `Arc` by the `Log`, its writer thread and snapshots.
pub(crate) struct Shared<B: LogBackend> {
    pub backend: B,
    pub options: LogOptions,
    pub pending: Mutex<Pending>,
    pub wake: Condvar,
    pub durable: AtomicU64,
    pub snapshot_running: AtomicBool,
    pub records_written: AtomicU64,
    pub stats: LogStats,
    pub current_segment: AtomicU64,
    /// Whether new jobs may be logged: false while no new segment can be made or writes
    /// fail. Read by producers before they add a job (an atomic load, nothing more).
    pub accepting: AtomicBool,
    /// A write is failing and being retried: waiters must not block on the writer lock.
    pub failing: AtomicBool,
    /// Set by `Log::close`: a write that keeps failing is given up after a while.
    pub closing: AtomicBool,
    /// The last snapshot failed (logged once, not at every attempt).
    pub snapshot_failing: AtomicBool,
    pub on_durable: Box<dyn Fn(Lsn) + Send + Sync>,
    /// The backend's writer and the writer's scratch state. Held while writing a batch: by
    /// the writer thread, or (when replies need only `write(2)`) by a connection writing
    /// inline.
    pub writer: Mutex<WriterState<B::Writer>>,
}

/// Held under the writer lock.
pub(crate) struct WriterState<W> {
    pub store: W,
    pub spare: Vec<u8>,
    pub spare_bodies: Vec<PendingBody>,
    /// The places a write found, kept from write to write (see `BodyFiles::give_back`).
    pub spare_found: Vec<(JobId, LogRef)>,
    pub last_sync: Instant,
    pub unsynced: bool,
    /// `never` mode: bytes written since the writer thread last started their writeback.
    pub since_writeback: u64,
    /// No new segment could be made (or its space reserved): new jobs are refused and
    /// other records go into the current segment's reserve.
    pub full: bool,
    /// When making a segment was last tried while `full`.
    pub last_probe: Instant,
}

impl<W> WriterState<W> {
    /// A writer that starts with `store`; `full` when it has no room for new jobs.
    pub fn new(store: W, full: bool) -> Self {
        WriterState {
            store,
            spare: Vec::new(),
            spare_bodies: Vec::new(),
            spare_found: Vec::new(),
            last_sync: Instant::now(),
            unsynced: false,
            since_writeback: 0,
            full,
            last_probe: Instant::now(),
        }
    }
}
