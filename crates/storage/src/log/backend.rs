//! The seam between the log's machinery and the place its records go.

use std::io;

use jobyard_engine::Change;

use crate::bodies::BodyFiles;

/// Where the log's records go: segment files today ([`crate::segments::SegmentFiles`]).
///
/// Everything else about the log is the same whatever the backend, and stays out of it:
/// appends encode records into one pending buffer under a short lock and return an LSN;
/// group commit (one writer, the writer thread or a connection writing inline) takes
/// everything that accumulated and hands it to [`LogBackend::write`] as one batch, then
/// makes it durable with one [`LogBackend::sync`], and only then advances the durable
/// position and wakes the waiters (`Log::durable`, `Log::write_through`, the broker's
/// `Notify`). So a reply is acknowledged only once the backend said its batch is durable,
/// and N concurrent commands cost one backend round trip, not N. Retrying failed writes,
/// refusing new jobs while the backend has no room, fsync timing and stopping on a failed
/// sync, and scheduling snapshots are the log's too.
///
/// A second backend provides:
///
/// * **a batch** ([`write`](Self::write), [`sync`](Self::sync)): write a batch of encoded
///   records (whole records, in order) and make it durable. A failed write must leave
///   nothing of the batch behind, since it is retried whole. The writer state
///   ([`LogBackend::Writer`]) is only ever used under the log's writer lock, once per
///   batch: the backend needs no lock of its own for it.
/// * **room** ([`make_room`](Self::make_room), [`has_room_for`](Self::has_room_for)):
///   whether new jobs can be stored. An error from `make_room` makes the log refuse new
///   jobs (records that add none still go in), and the log calls it again every 250 ms
///   until it succeeds.
/// * **sections** ([`rotate`](Self::rotate)): records are kept in numbered sections
///   (segments). A snapshot is always cut at the start of a new section, so it covers
///   exactly the sections before it.
/// * **snapshots and compaction** ([`begin_snapshot`](Self::begin_snapshot),
///   [`add_to_snapshot`](Self::add_to_snapshot),
///   [`complete_snapshot`](Self::complete_snapshot), [`drop_covered`](Self::drop_covered)):
///   a snapshot of section N is filled chunk by chunk on its own thread while appends go
///   on; once complete and durable, everything it covers (sections and snapshots before
///   N) is dropped. A snapshot dropped before completion must leave nothing recovery
///   would trust.
/// * **bodies** ([`write`](Self::write)'s [`BatchStart`], [`bodies`](Self::bodies)): where
///   a batch went, so the log can publish each body's place, and the files those places
///   are read back from.
pub(crate) trait LogBackend: Send + Sync + 'static {
    /// The state of the section being written, used only under the log's writer lock.
    type Writer: Send;
    /// A handle that syncs what was written without the writer lock (`interval` and
    /// `never` modes), so inline writers never wait for that sync.
    type Flush;
    /// A snapshot being written, moved to the snapshot thread.
    type Snapshot: Send;

    /// Makes sure that after `more` bytes are written the backend still has room for
    /// records that add no jobs. An error means new jobs should be refused.
    fn make_room(&self, w: &mut Self::Writer, more: u64) -> io::Result<()>;

    /// Writes a batch of encoded records after everything written before. Returns where
    /// its first byte went, when bodies can be read back from there.
    fn write(&self, w: &mut Self::Writer, data: &[u8]) -> io::Result<Option<BatchStart>>;

    /// [`write`](Self::write) for a batch that holds the puts of rows consumed from the
    /// backend's transactional-enqueue table (`consumed`: their ids): the rows must be
    /// removed in the same transaction that makes the batch durable, so a put is logged
    /// exactly when its row is gone. Only a backend that hands such rows out (PostgreSQL)
    /// ever gets ids; the others never see this called with any.
    fn write_consuming(
        &self,
        w: &mut Self::Writer,
        data: &[u8],
        consumed: &[i64],
    ) -> io::Result<Option<BatchStart>> {
        debug_assert!(consumed.is_empty(), "this backend consumes no enqueue rows");
        self.write(w, data)
    }

    /// Makes everything written so far durable. The log stops the process if this fails
    /// (see `fsync::sync_or_die`), so it is never retried.
    fn sync(&self, w: &mut Self::Writer) -> io::Result<()>;

    /// A handle for [`LogBackend::sync_detached`] and [`LogBackend::start_writeback`].
    fn flush_handle(&self, w: &Self::Writer) -> Option<Self::Flush>;

    /// [`LogBackend::sync`] through a handle, without the writer lock.
    fn sync_detached(&self, flush: &Self::Flush) -> io::Result<()>;

    /// Asks for what was written to start going to stable storage, without waiting and
    /// without any promise (`never` mode).
    fn start_writeback(&self, flush: &Self::Flush);

    /// Whether the current section is full enough to start the next.
    fn rotation_due(&self, w: &Self::Writer) -> bool;

    /// Starts the next section and returns its number; nothing changes on failure.
    fn rotate(&self, w: &mut Self::Writer) -> io::Result<u64>;

    /// Nothing more will be written: gives back what was reserved ahead.
    fn close(&self, w: &mut Self::Writer);

    /// Whether a job whose record takes about `bytes` fits, once the log knows it has room
    /// for ordinary ones. Called once per put: keep it cheap for usual sizes.
    fn has_room_for(&self, bytes: usize) -> bool;

    /// The oldest section still needed for recovery (a snapshot counts as its section).
    fn oldest_section(&self) -> u64;

    /// The places of written bodies and the files they are read back from; `None` when
    /// bodies are not kept in the log.
    fn bodies(&self) -> Option<&BodyFiles>;

    /// Starts a snapshot of every live job as of the start of section `seq`.
    fn begin_snapshot(&self, seq: u64, next_id: u64) -> io::Result<Self::Snapshot>;

    /// Adds jobs (as `Put` changes) to a snapshot.
    fn add_to_snapshot(&self, snapshot: &mut Self::Snapshot, jobs: &[Change]) -> io::Result<()>;

    /// Makes a snapshot durable and the one recovery starts from; returns its job count.
    fn complete_snapshot(&self, snapshot: Self::Snapshot) -> io::Result<u64>;

    /// Drops every section and snapshot that snapshot `seq` covers (compaction).
    fn drop_covered(&self, seq: u64) -> io::Result<()>;
}

/// Rows of a transactional-enqueue table whose puts were appended: their records end at
/// `ends_at` in the pending buffer, so the part of a batch split at a snapshot's cut that
/// holds them is the one that removes them (see [`LogBackend::write_consuming`]).
pub(crate) struct ConsumedRows {
    pub ends_at: usize,
    pub ids: Vec<i64>,
}

/// Where a batch's first byte was written: bodies in it are read back from `file` (a body
/// file index, see [`BodyFiles`]) at `offset` plus their position in the batch.
#[derive(Clone, Copy, Debug)]
pub(crate) struct BatchStart {
    pub file: u32,
    pub offset: u64,
}
