//! The log writer: appends are buffered under a short lock, and one thread writes and
//! syncs whatever accumulated, so concurrent commands share one write and one fsync.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, SyncSender};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use jobyard_engine::Change;

use jobyard_engine::{JobId, LogRef};

use crate::bodies::{BodyFiles, FileKey, Located, KEEP_PLACES};
use crate::codec::{encode_change, encode_segment_end};
use crate::files::{
    create_segment, free_bytes, header, list, preallocate, release_preallocation, segment_path,
    snapshot_path, sync_dir, DataFile, HEADER_LEN, SNAPSHOT_END, SNAPSHOT_MAGIC,
};
use crate::stats::{sync_stats, LogStats};
use crate::Lsn;

/// When the log forces data to stable storage.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FsyncMode {
    /// Every write is synced before anything in it is acknowledged.
    Always,
    /// Acknowledge after `write(2)`; sync at most this often. Survives a process crash,
    /// may lose the last interval in a power loss.
    Interval(Duration),
    /// Acknowledge after `write(2)`; the OS decides when to sync.
    Never,
}

/// How the log is written.
#[derive(Clone, Debug)]
pub struct LogOptions {
    pub fsync: FsyncMode,
    /// A segment is closed and a new one started past this size.
    pub segment_bytes: u64,
    /// Report where each durable body was written ([`Log::take_located`]) so the engine
    /// can drop its copy, and read bodies back ([`Log::read_body`]). Off here by default;
    /// the server turns it on unless told otherwise (docs/performance.md).
    pub bodies_in_log: bool,
}

impl LogOptions {
    /// Space kept back at the end of each segment for records that do not add jobs
    /// (deletes, releases, buries, kicks): when no new segment can be made, new jobs are
    /// refused but these still fit, so consumers keep working on a full disk.
    pub fn reserve_bytes(&self) -> u64 {
        (self.segment_bytes / 8).clamp(64 << 10, 8 << 20)
    }

    /// Disk space reserved for a segment when it is created.
    fn preallocated(&self) -> u64 {
        self.segment_bytes + self.reserve_bytes()
    }

    /// How much more is reserved at a time when a segment runs past what it has reserved
    /// (a disk with less room than a whole segment, a batch larger than one).
    fn extension(&self) -> u64 {
        self.reserve_bytes() / 2
    }
}

impl Default for LogOptions {
    fn default() -> Self {
        LogOptions {
            fsync: FsyncMode::Always,
            segment_bytes: 64 << 20,
            bodies_in_log: false,
        }
    }
}

/// Chunks of jobs in flight to the snapshot thread; a full channel makes the feeder wait,
/// which bounds the memory a snapshot takes whatever the number of jobs.
const FEED_DEPTH: usize = 4;

/// What the snapshot thread receives.
enum FeedItem {
    Jobs(Vec<Change>),
    /// Everything was fed: the snapshot may be completed. A feed dropped without this
    /// abandons the snapshot (the log keeps its segments).
    Done,
}

/// The writing end of a snapshot started by [`Log::begin_snapshot`].
pub struct SnapshotFeed {
    tx: SyncSender<FeedItem>,
}

impl SnapshotFeed {
    /// Adds jobs (as `Put` changes). Blocks while the snapshot thread is behind; returns
    /// false if the snapshot failed, after which further jobs are pointless.
    pub fn send(&self, jobs: Vec<Change>) -> bool {
        self.tx.send(FeedItem::Jobs(jobs)).is_ok()
    }

    /// Completes the snapshot: it is synced, renamed into place and older files deleted.
    pub fn finish(self) {
        let _ = self.tx.send(FeedItem::Done);
    }
}

struct SnapshotRequest {
    /// Offset in the pending buffer where the new segment must start.
    at: usize,
    feed: Receiver<FeedItem>,
    next_id: u64,
}

#[derive(Default)]
struct Pending {
    buf: Vec<u8>,
    /// Bodies in `buf` whose place is reported once written: (job, offset in `buf`, length).
    bodies: Vec<PendingBody>,
    appended: Lsn,
    snapshot: Option<SnapshotRequest>,
    shutdown: bool,
    /// The writer thread sleeps without a timeout (`interval`/`never` mode, nothing to do
    /// for a while): the next append must wake it.
    dozing: bool,
    /// `never` mode: enough was written since the last writeback to start the next now.
    writeback_due: bool,
}

/// A body in the pending buffer: (job, offset in the buffer, length).
type PendingBody = (u64, usize, usize);

struct Shared {
    dir: PathBuf,
    /// Set with [`LogOptions::bodies_in_log`].
    bodies: Option<BodyFiles>,
    options: LogOptions,
    pending: Mutex<Pending>,
    wake: Condvar,
    durable: AtomicU64,
    snapshot_running: AtomicBool,
    records_written: AtomicU64,
    stats: LogStats,
    current_segment: AtomicU64,
    /// Whether new jobs may be logged: false while no new segment can be made or writes
    /// fail. Read by producers before they add a job (an atomic load, nothing more).
    accepting: AtomicBool,
    /// A write is failing and being retried: waiters must not block on the writer lock.
    failing: AtomicBool,
    /// Set by [`Log::close`]: a write that keeps failing is given up after a while.
    closing: AtomicBool,
    /// The last snapshot failed (logged once, not at every attempt).
    snapshot_failing: AtomicBool,
    on_durable: Box<dyn Fn(Lsn) + Send + Sync>,
    /// The open segment and the writer's scratch state. Held while writing a batch: by the
    /// writer thread, or (when replies need only `write(2)`) by a connection writing inline.
    writer: Mutex<WriterState>,
}

struct WriterState {
    segment: Segment,
    spare: Vec<u8>,
    spare_bodies: Vec<PendingBody>,
    /// The places a write found, kept from write to write (see [`BodyFiles::give_back`]).
    spare_found: Vec<(JobId, LogRef)>,
    last_sync: Instant,
    unsynced: bool,
    /// `never` mode: bytes written since the writer thread last started their writeback.
    since_writeback: u64,
    /// No new segment could be made (or its space reserved): new jobs are refused and
    /// other records go into the current segment's reserve.
    full: bool,
    /// When making a segment was last tried while `full`.
    last_probe: Instant,
}

/// The append side of the log, shared by every connection.
pub struct Log {
    shared: Arc<Shared>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

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
        let (segment, full) = match Segment::create_reserving(dir, first_segment, &options) {
            Ok(segment) => (segment, false),
            // Start on a full disk anyway: reads and deletes work, new jobs wait for room.
            Err(e) if is_no_space(&e) => (Segment::create(dir, first_segment, 0)?, true),
            Err(e) => return Err(e),
        };
        if full {
            tracing::warn!("{}", NO_ROOM_MESSAGE);
        }
        if first_segment > 1 {
            seal_previous(dir, first_segment - 1, options.preallocated());
        }
        let bodies = options
            .bodies_in_log
            .then(|| BodyFiles::recovered(recovered));
        let mut segment = segment;
        segment.body_index = register_segment(bodies.as_ref(), dir, &segment);
        let shared = Arc::new(Shared {
            dir: dir.to_path_buf(),
            bodies,
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
            writer: Mutex::new(WriterState {
                segment,
                spare: Vec::new(),
                spare_bodies: Vec::new(),
                spare_found: Vec::new(),
                last_sync: Instant::now(),
                unsynced: false,
                since_writeback: 0,
                full,
                last_probe: Instant::now(),
            }),
        });
        let worker = shared.clone();
        let thread = std::thread::Builder::new()
            .name("jobyard-log".into())
            .spawn(move || write_loop(worker))?;
        Ok(Log {
            shared,
            thread: Mutex::new(Some(thread)),
        })
    }

    /// Encodes changes into the pending buffer; returns the LSN that covers them.
    /// Call it in the same critical section that made the changes, so the log's order is
    /// the engine's order.
    pub fn append(&self, changes: impl Iterator<Item = Change>) -> Lsn {
        let mut p = self.shared.pending.lock().expect("log lock");
        let was_empty = p.buf.is_empty();
        let track = self.shared.bodies.is_some();
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
            && (self.shared.options.fsync == FsyncMode::Always || p.dozing)
        {
            p.dozing = false;
            self.shared.wake.notify_one();
        }
        lsn
    }

    /// Makes everything up to `lsn` durable on the calling thread when the fsync mode only
    /// asks for `write(2)` before a reply (`interval`, `never`), and returns true. Saves a
    /// hand-off to the writer thread per batch; concurrent callers still share one write.
    /// Returns false in `always` mode, where the caller must wait for the writer thread
    /// (an fsync must not block the caller's thread).
    pub fn write_through(&self, lsn: Lsn) -> bool {
        if self.shared.options.fsync == FsyncMode::Always {
            return false;
        }
        if self.durable() >= lsn {
            return true;
        }
        if self.shared.failing.load(Ordering::Acquire) {
            // The writer thread is retrying a failed write under the writer lock: wait
            // for it asynchronously instead of blocking this thread on the lock.
            return false;
        }
        let mut w = self.shared.writer.lock().expect("log writer lock");
        if self.durable() < lsn {
            write_batch(&self.shared, &mut w, false);
        }
        true
    }

    /// Whether a new job whose record takes about `bytes` may be added now. False while
    /// the disk has no room for a new segment or log writes fail: the caller should refuse
    /// the job (beanstalkd `OUT_OF_MEMORY`, Gearman `ERROR`) rather than add it and leave
    /// its producer waiting. Records that do not add jobs need no such check: they fit in
    /// the space each segment keeps in reserve.
    ///
    /// For a usual job this is one atomic load. A job too large for the reserve to absorb
    /// also asks the file system for its free space.
    pub fn has_room(&self, bytes: usize) -> bool {
        if !self.shared.accepting.load(Ordering::Relaxed) {
            return false;
        }
        let reserve = self.shared.options.reserve_bytes();
        if (bytes as u64) < (reserve / 4).min(1 << 20) {
            return true;
        }
        free_bytes(&self.shared.dir).map_or(true, |free| free >= bytes as u64 + reserve)
    }

    /// The LSN of the last records appended: waiting for it covers every change already
    /// made, also ones another caller appended (a change another transaction made on
    /// this caller's behalf).
    pub fn appended(&self) -> Lsn {
        self.shared.pending.lock().expect("log lock").appended
    }

    /// Whether bodies are reported and read back ([`LogOptions::bodies_in_log`]).
    pub fn bodies_in_log(&self) -> bool {
        self.shared.bodies.is_some()
    }

    /// Where bodies were written (or copied by compaction) since the last call: the
    /// engine may keep these places instead of the bodies. One atomic load when none.
    pub fn take_located(&self) -> Located {
        self.shared
            .bodies
            .as_ref()
            .map_or_else(Located::default, BodyFiles::take_located)
    }

    /// Returns the `written` list of a [`Located`] the engine has finished with, so the
    /// writer's next places go into memory already allocated (see
    /// [`BodyFiles::give_back`]).
    pub fn give_back_located(&self, written: Vec<(JobId, LogRef)>) {
        if let Some(bodies) = &self.shared.bodies {
            bodies.give_back(written);
        }
    }

    /// Bodies read back from the log so far, and the `pread`s that read them (fewer when
    /// bodies are read in the order they were written: see `read_ahead`).
    pub fn body_read_stats(&self) -> (u64, u64) {
        self.shared
            .bodies
            .as_ref()
            .map_or((0, 0), BodyFiles::read_stats)
    }

    /// Reads a body back from the log (one `pread`, or none when read ahead).
    pub fn read_body(&self, at: LogRef) -> io::Result<Vec<u8>> {
        match &self.shared.bodies {
            Some(bodies) => bodies.read(at),
            None => Err(io::Error::other("bodies are not kept in the log")),
        }
    }

    /// Everything up to this LSN may be acknowledged.
    pub fn durable(&self) -> Lsn {
        self.shared.durable.load(Ordering::Acquire)
    }

    /// Records written since start (for stats).
    pub fn records_written(&self) -> u64 {
        self.shared.records_written.load(Ordering::Relaxed)
    }

    /// Figures for operators: bytes and write batches (records: [`Log::records_written`];
    /// syncs: [`sync_stats`]).
    pub fn stats(&self) -> &LogStats {
        &self.shared.stats
    }

    /// The segment new records go to.
    pub fn current_segment(&self) -> u64 {
        self.shared.current_segment.load(Ordering::Relaxed)
    }

    /// The oldest file still needed for recovery.
    pub fn oldest_segment(&self) -> u64 {
        list(&self.shared.dir)
            .ok()
            .and_then(|files| {
                files.iter().find_map(|(k, _)| match k {
                    DataFile::Segment(n) | DataFile::Snapshot(n) => Some(*n),
                    DataFile::Temp => None,
                })
            })
            .unwrap_or(0)
    }

    pub fn snapshot_running(&self) -> bool {
        self.shared.snapshot_running.load(Ordering::Acquire)
    }

    /// Starts a new segment at the current end of the log and a snapshot that the returned
    /// feed fills, while appends go on. Once the feed is finished and the snapshot is on
    /// disk, every older file is deleted. Returns `None` if a snapshot is already running.
    ///
    /// Recovery loads the snapshot and then replays every record of the new segment on,
    /// so the jobs fed may be in any state they reached after this call (a "fuzzy"
    /// snapshot): every record sets a job's state outright, so replaying the records
    /// after the cut over a later state ends in the same place. That lets the caller
    /// copy the engine a chunk at a time instead of stopping it for the whole copy.
    /// `next_id` must be the engine's at this call or later.
    pub fn begin_snapshot(&self, next_id: u64) -> Option<SnapshotFeed> {
        // A snapshot starts a new segment, which a full disk has no room for.
        if !self.shared.accepting.load(Ordering::Relaxed) {
            return None;
        }
        if self.shared.snapshot_running.swap(true, Ordering::AcqRel) {
            return None;
        }
        let (tx, rx) = mpsc::sync_channel(FEED_DEPTH);
        let mut p = self.shared.pending.lock().expect("log lock");
        let at = p.buf.len();
        p.snapshot = Some(SnapshotRequest {
            at,
            feed: rx,
            next_id,
        });
        self.shared.wake.notify_one();
        Some(SnapshotFeed { tx })
    }

    /// A snapshot of `changes` (the engine's state at exactly this point) in one go; see
    /// [`Log::begin_snapshot`]. Returns false if a snapshot is already running.
    pub fn request_snapshot(&self, changes: Vec<Change>, next_id: u64) -> bool {
        let Some(feed) = self.begin_snapshot(next_id) else {
            return false;
        };
        feed.send(changes);
        feed.finish();
        true
    }

    /// Writes and syncs everything appended, then stops the writer. Later appends are
    /// never written, so call it only once nothing else will be acknowledged.
    ///
    /// If the log cannot be written (disk full, I/O error), it keeps trying for
    /// [`CLOSE_GIVE_UP`] and then stops anyway: what was not written was never
    /// acknowledged, and what was acknowledged is already on disk.
    pub fn close(&self) {
        let thread = self.thread.lock().expect("log thread lock").take();
        if let Some(thread) = thread {
            self.shared.closing.store(true, Ordering::Release);
            self.shared.pending.lock().expect("log lock").shutdown = true;
            self.shared.wake.notify_one();
            let _ = thread.join();
        }
    }
}

impl Drop for Log {
    fn drop(&mut self) {
        self.close();
    }
}

/// How long [`Log::close`] keeps retrying a write that fails before it stops anyway.
pub const CLOSE_GIVE_UP: Duration = Duration::from_secs(3);

/// While the disk is full, how often making a new segment is tried again.
const SPACE_PROBE: Duration = Duration::from_millis(250);

const NO_ROOM_MESSAGE: &str = "the disk has no room for a new log segment: new jobs are \
    refused (OUT_OF_MEMORY / Gearman ERROR) until it has; deletes and other changes of \
    stored jobs go on in the space kept in reserve";

fn is_no_space(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::ENOSPC) | Some(libc::EDQUOT))
}

/// How far ahead of the records a segment synced at every write is filled with zeros.
///
/// Appending past the end of a file makes each `fdatasync` commit the new size (an ext4
/// journal commit) besides the data; overwriting bytes already written flushes only the
/// data. Measured on this machine (docs/performance.md): 150-byte appends + `fdatasync`,
/// p50 151-166 µs into `KEEP_SIZE` preallocation against 111-113 µs into zeros written
/// 256 KiB ahead. The zeros of a
/// chunk go out with the next commit's sync, so the size is committed once per chunk.
const ZERO_AHEAD: u64 = 256 << 10;

struct Segment {
    file: File,
    seq: u64,
    len: u64,
    /// Up to here the file's blocks are reserved: appends below it cannot run out of space.
    reserved_to: u64,
    /// Up to here the file holds written bytes (records, then zeros): see [`ZERO_AHEAD`].
    written_to: u64,
    /// Whether to keep zeros ahead of the records (`always` mode, where every write is
    /// synced; elsewhere it would only double the bytes written).
    zero_ahead: bool,
    /// The segment's index among the files bodies are read from (`bodies_in_log`).
    body_index: Option<u32>,
}

impl Segment {
    /// A new segment with a whole segment's space (and the reserve) reserved, or, on a
    /// disk with less room than that, the reserve and one extension; fails (with nothing
    /// left behind) if not even that fits.
    fn create_reserving(dir: &Path, seq: u64, options: &LogOptions) -> io::Result<Segment> {
        let mut made = match Segment::create(dir, seq, options.preallocated()) {
            Err(e) if is_no_space(&e) => {
                let small = options.reserve_bytes() + options.extension();
                Segment::create(dir, seq, small)
            }
            made => made,
        };
        if let Ok(segment) = &mut made {
            segment.zero_ahead = options.fsync == FsyncMode::Always;
        }
        made
    }

    fn create(dir: &Path, seq: u64, prealloc: u64) -> io::Result<Segment> {
        let file = create_segment(dir, seq, prealloc)?;
        Ok(Segment {
            file,
            seq,
            len: HEADER_LEN as u64,
            reserved_to: prealloc.max(HEADER_LEN as u64),
            written_to: HEADER_LEN as u64,
            zero_ahead: false,
            body_index: None,
        })
    }

    /// Appends `data`. After a failed write the file is cut back to its last good length,
    /// so a retry never leaves a half record in the middle of the log.
    fn write(&mut self, data: &[u8]) -> io::Result<()> {
        if data.is_empty() {
            return Ok(());
        }
        if self.zero_ahead {
            self.fill_ahead(self.len + data.len() as u64);
        }
        match self.file.write_all(data) {
            Ok(()) => {
                self.len += data.len() as u64;
                self.written_to = self.written_to.max(self.len);
                Ok(())
            }
            Err(e) => {
                let _ = self.file.set_len(self.len);
                let _ = std::io::Seek::seek(&mut self.file, io::SeekFrom::Start(self.len));
                self.written_to = self.len;
                Err(e)
            }
        }
    }

    /// Cuts the zeros ahead of the records, synced, and writes none from now on.
    fn stop_zero_ahead(&mut self) {
        self.zero_ahead = false;
        if self.written_to > self.len {
            if let Err(e) = self
                .file
                .set_len(self.len)
                .and_then(|_| self.file.sync_all())
            {
                fsync_failed(&e);
            }
            self.written_to = self.len;
        }
    }

    /// Makes sure the file holds written bytes up to `end`, by writing the next chunk of
    /// zeros when the records are about to pass the zeros. Stays within the reserved space,
    /// so it cannot take disk the segment was not given. Best effort: if it fails the
    /// records are appended past the end as before (recovery reads a zero tail as the end
    /// of the records: see `recovery`).
    fn fill_ahead(&mut self, end: u64) {
        use std::os::unix::fs::FileExt;
        if end <= self.written_to {
            return;
        }
        let target = (end + ZERO_AHEAD).min(self.reserved_to);
        let from = self.written_to.max(self.len);
        if target <= end || target <= from {
            return;
        }
        let zeros = vec![0u8; (target - from) as usize];
        if self.file.write_all_at(&zeros, from).is_ok() {
            self.written_to = target;
        }
    }

    /// Closes the segment for good once its successor `next` exists: names it in an end
    /// record (so recovery notices if it goes missing), syncs, and gives back the space
    /// reserved past the end.
    fn seal(&mut self, next: u64) {
        let mut end = Vec::with_capacity(32);
        encode_segment_end(next, &mut end);
        // Without the end record recovery merely cannot check for the successor: not
        // worth failing over.
        let _ = self.write(&end);
        sync_or_die(self);
        release_preallocation(&self.file, self.len, self.reserved_to);
    }
}

/// Whether the file of `len` bytes ends with the record naming `next` as its successor.
fn ends_naming(file: &File, len: u64, next: u64) -> bool {
    use std::os::unix::fs::FileExt;
    let mut end = Vec::with_capacity(32);
    encode_segment_end(next, &mut end);
    let mut tail = vec![0; end.len()];
    len >= end.len() as u64
        && file.read_at(&mut tail, len - end.len() as u64).ok() == Some(end.len())
        && tail == end
}

/// Seals the segment the previous run wrote last, now that a successor exists (see
/// [`Segment::seal`]). It was recovered, and torn records cut off, just before.
fn seal_previous(dir: &Path, seq: u64, reserved: u64) {
    let path = segment_path(dir, seq);
    let Ok(file) = OpenOptions::new().read(true).append(true).open(&path) else {
        return;
    };
    let Ok(meta) = file.metadata() else { return };
    if ends_naming(&file, meta.len(), seq + 1) {
        // Already sealed: a salvaged start dropped the segment it named and makes it again.
        return;
    }
    let mut segment = Segment {
        file,
        seq,
        len: meta.len(),
        reserved_to: meta.len() + reserved,
        written_to: meta.len(),
        zero_ahead: false,
        body_index: None,
    };
    segment.seal(seq + 1);
}

/// Syncs a file, counting the time it took.
fn timed_sync(file: &File) -> io::Result<()> {
    let started = Instant::now();
    let r = file.sync_data();
    sync_stats().synced(started.elapsed());
    r
}

/// Syncs a segment, or ends the process if that fails.
///
/// After a failed fsync the kernel may have dropped the dirty pages and a second fsync can
/// report success for data that never reached the disk, so retrying would acknowledge jobs
/// that are not stored. Stopping is the only honest answer: nothing in the failed batch was
/// acknowledged, and the next start recovers exactly what the disk holds.
fn sync_or_die(segment: &Segment) {
    let started = Instant::now();
    if let Err(e) = segment.file.sync_data() {
        fsync_failed(&e);
    }
    sync_stats().synced(started.elapsed());
}

fn fsync_failed(e: &io::Error) -> ! {
    tracing::error!(
        "fsync of the log failed: {e}; stopping so that nothing unsynced is acknowledged \
         (restart to recover what is on disk)"
    );
    eprintln!("jobyard: fsync failed: {e}");
    std::process::exit(75);
}

/// How often the writer thread writes out records nobody waited for in `never` mode and
/// starts the writeback of what connections wrote. Each sweep wakes a CPU and starts a
/// little I/O (about 100 µs of CPU here): twenty a second cost 2 µs per job at 1,000
/// jobs/s. Fast writing starts its writeback by size instead ([`WRITEBACK_AFTER_BYTES`]).
const NEVER_MODE_SWEEP: Duration = Duration::from_secs(1);
/// In `never` mode, written bytes that make the writer thread start their writeback at
/// once rather than at its next sweep: the dirty backlog that a segment's closing fsync
/// must write stays about this small however fast the log is written.
const WRITEBACK_AFTER_BYTES: u64 = 4 << 20;

/// Sweeps in a row that found nothing to write or sync before the writer thread stops
/// waking on its timer (`interval`/`never` mode) until the next append: an idle server
/// should not wake a CPU twenty times a second for nothing.
const QUIET_SWEEPS_BEFORE_DOZING: u32 = 2;

/// The writer thread: writes whatever accumulates (every batch in `always` mode, where it
/// also syncs), performs the periodic sync of `interval` mode, retries making a segment
/// while the disk is full, and flushes at shutdown.
fn write_loop(shared: Arc<Shared>) {
    let interval = match shared.options.fsync {
        FsyncMode::Interval(every) => Some(every),
        FsyncMode::Never => Some(NEVER_MODE_SWEEP),
        FsyncMode::Always => None,
    };
    let mut quiet_sweeps = 0;
    loop {
        let (shutdown, nothing_pending) = {
            let mut p = shared.pending.lock().expect("log lock");
            while p.buf.is_empty() && p.snapshot.is_none() && !p.shutdown && !p.writeback_due {
                // While the disk is full nobody appends new jobs, so the thread wakes on
                // its own to find out whether space came back.
                let full = !shared.accepting.load(Ordering::Relaxed);
                let doze = quiet_sweeps >= QUIET_SWEEPS_BEFORE_DOZING;
                let timeout = match (interval, full) {
                    (Some(every), true) => Some(every.min(SPACE_PROBE)),
                    (Some(_), false) if doze => None,
                    (Some(every), false) => Some(every),
                    (None, true) => Some(SPACE_PROBE),
                    (None, false) => None,
                };
                match timeout {
                    Some(every) => {
                        let (guard, timeout) =
                            shared.wake.wait_timeout(p, every).expect("log lock");
                        p = guard;
                        if timeout.timed_out() {
                            break;
                        }
                    }
                    None => {
                        p.dozing = interval.is_some();
                        p = shared.wake.wait(p).expect("log lock");
                        p.dozing = false;
                        // Traffic again: back to the timer, even if an inline writer
                        // took the records first.
                        quiet_sweeps = 0;
                    }
                }
            }
            p.writeback_due = false;
            (p.shutdown, p.buf.is_empty() && p.snapshot.is_none())
        };
        let (file_to_flush, unsynced) = {
            let mut w = shared.writer.lock().expect("log writer lock");
            if !write_batch(&shared, &mut w, shutdown) {
                // Closing, and the log could not be written for CLOSE_GIVE_UP: stop. What
                // is left was never acknowledged.
                release_preallocation(&w.segment.file, w.segment.len, w.segment.reserved_to);
                return;
            }
            let file = match interval {
                Some(every)
                    if w.unsynced
                        && (w.last_sync.elapsed() >= every
                            || w.since_writeback >= WRITEBACK_AFTER_BYTES) =>
                {
                    w.unsynced = false;
                    w.since_writeback = 0;
                    w.last_sync = Instant::now();
                    w.segment.file.try_clone().ok()
                }
                _ => None,
            };
            (file, w.unsynced)
        };
        let quiet = nothing_pending && file_to_flush.is_none() && !unsynced;
        quiet_sweeps = if quiet { quiet_sweeps + 1 } else { 0 };
        // The periodic flush runs outside the writer lock, so inline writers never wait on it.
        if let Some(file) = file_to_flush {
            if shared.options.fsync == FsyncMode::Never {
                start_writeback(&file);
            } else if let Err(e) = timed_sync(&file) {
                fsync_failed(&e);
            }
        }
        if shutdown && shared.pending.lock().expect("log lock").buf.is_empty() {
            let w = shared.writer.lock().expect("log writer lock");
            sync_or_die(&w.segment);
            release_preallocation(&w.segment.file, w.segment.len, w.segment.reserved_to);
            return;
        }
    }
}

/// Asks the kernel to start writing the file's dirty pages, without waiting for them and
/// without any promise (`never` mode promises nothing). It keeps the dirty backlog small,
/// so the fsync that closes a segment, which holds the writer lock and so every writing
/// connection, is short: without it, 64 MB of dirty log made that fsync a 40–60 ms stall.
fn start_writeback(file: &File) {
    use std::os::fd::AsRawFd;
    // SAFETY: the descriptor is owned by `file` for the whole call; the call only
    // schedules I/O and touches no memory of ours.
    unsafe {
        libc::sync_file_range(file.as_raw_fd(), 0, 0, libc::SYNC_FILE_RANGE_WRITE);
    }
}

/// Writes everything pending with one `write(2)`, syncs if the mode asks for it, and
/// advances the durable position. Called with the writer lock held. Returns false only
/// when closing and the write kept failing for [`CLOSE_GIVE_UP`] (nothing was advanced).
fn write_batch(shared: &Arc<Shared>, w: &mut WriterState, shutdown: bool) -> bool {
    let (upto, snapshot, records) = {
        let mut p = shared.pending.lock().expect("log lock");
        std::mem::swap(&mut p.buf, &mut w.spare);
        std::mem::swap(&mut p.bodies, &mut w.spare_bodies);
        let durable = shared.durable.load(Ordering::Relaxed);
        (p.appended, p.snapshot.take(), p.appended - durable)
    };
    let data = std::mem::take(&mut w.spare);
    shared.stats.wrote(data.len());
    let mut snapshot = snapshot;
    let at = snapshot.as_ref().map_or(data.len(), |req| req.at);
    let mut bodies = std::mem::take(&mut w.spare_bodies);
    let mut found = std::mem::take(&mut w.spare_found);
    let first = (w.segment.body_index, w.segment.len);
    let mut written = write_data(shared, w, &data[..at], &mut snapshot);
    if written {
        locate(shared, &bodies, 0..at, first, 0, &mut found);
    }
    if written {
        if let Some(req) = snapshot.take() {
            match rotate(shared, w) {
                Ok(()) => spawn_snapshot(shared, w.segment.seq, req),
                Err(e) => {
                    note_space(shared, w, Some(&e));
                    abandon_snapshot(shared, req);
                }
            }
        }
        let second = (w.segment.body_index, w.segment.len);
        written = write_data(shared, w, &data[at..], &mut None);
        if written {
            locate(shared, &bodies, at..data.len(), second, at, &mut found);
        }
    }
    if let Some(b) = &shared.bodies {
        b.publish(&mut found);
    }
    found.clear();
    if found.capacity() <= KEEP_PLACES {
        w.spare_found = found;
    }
    bodies.clear();
    w.spare_bodies = bodies;
    if let Some(req) = snapshot.take() {
        abandon_snapshot(shared, req);
    }
    if !written {
        return false;
    }
    let must_sync = match shared.options.fsync {
        FsyncMode::Always => !data.is_empty(),
        FsyncMode::Interval(_) => {
            w.unsynced |= !data.is_empty();
            w.unsynced && shutdown
        }
        FsyncMode::Never => {
            w.unsynced |= !data.is_empty();
            let before = w.since_writeback;
            w.since_writeback += data.len() as u64;
            if before < WRITEBACK_AFTER_BYTES && w.since_writeback >= WRITEBACK_AFTER_BYTES {
                // Under the pending lock, so the writer thread cannot miss it between its
                // check and its wait.
                shared.pending.lock().expect("log lock").writeback_due = true;
                shared.wake.notify_one();
            }
            shutdown
        }
    };
    if must_sync {
        sync_or_die(&w.segment);
        w.last_sync = Instant::now();
        w.unsynced = false;
    }
    if records > 0 {
        shared.records_written.fetch_add(records, Ordering::Relaxed);
        shared.durable.store(upto, Ordering::Release);
        (shared.on_durable)(upto);
    }
    w.spare = data;
    w.spare.clear();
    if w.spare.capacity() > 16 << 20 {
        w.spare = Vec::new();
    }
    let due = w.segment.len >= shared.options.segment_bytes;
    if due && !w.full {
        let made = rotate(shared, w);
        note_space(shared, w, made.as_ref().err());
    } else if w.full && w.last_probe.elapsed() >= SPACE_PROBE {
        // Is there room again? A new segment if this one is done, else more reserved
        // space in this one.
        w.last_probe = Instant::now();
        let found = if due {
            rotate(shared, w)
        } else {
            reserve_ahead(shared, w, 0)
        };
        note_space(shared, w, found.as_ref().err());
    }
    true
}

/// Reserves space so that, after `more` bytes are appended, the reserve is still free in
/// the current segment (plus an extension, so this is not needed at every batch).
fn reserve_ahead(shared: &Shared, w: &mut WriterState, more: u64) -> io::Result<()> {
    let needed = w.segment.len + more + shared.options.reserve_bytes();
    if needed <= w.segment.reserved_to {
        return Ok(());
    }
    let want = needed + shared.options.extension();
    let from = w.segment.reserved_to;
    preallocate(&w.segment.file, from, want - from)?;
    w.segment.reserved_to = want;
    Ok(())
}

/// Starts the next segment: made (with its space reserved) before the current one is
/// sealed, so a crash in between leaves two whole segments. Nothing changes on failure.
fn rotate(shared: &Shared, w: &mut WriterState) -> io::Result<()> {
    let next = w.segment.seq + 1;
    // Only the newest segment may end in zeros (recovery reads zeros anywhere else as
    // damage), so they go, durably, before a successor exists.
    let zero_ahead = w.segment.zero_ahead;
    w.segment.stop_zero_ahead();
    let segment = match Segment::create_reserving(&shared.dir, next, &shared.options) {
        Ok(segment) => segment,
        Err(e) => {
            w.segment.zero_ahead = zero_ahead;
            return Err(e);
        }
    };
    let mut segment = segment;
    segment.body_index = register_segment(shared.bodies.as_ref(), &shared.dir, &segment);
    let mut old = std::mem::replace(&mut w.segment, segment);
    old.seal(next);
    shared.current_segment.store(next, Ordering::Relaxed);
    Ok(())
}

/// Makes a segment readable for bodies when they are kept in the log.
fn register_segment(bodies: Option<&BodyFiles>, dir: &Path, segment: &Segment) -> Option<u32> {
    let key = FileKey {
        seq: segment.seq,
        snapshot: false,
    };
    bodies.and_then(|b| b.register(key, &segment_path(dir, segment.seq)))
}

/// The places of the pending bodies within `range` of a batch, written from `start.1` of
/// the segment with body index `start.0`; `base` is where that part begins in the batch.
fn locate(
    shared: &Shared,
    bodies: &[PendingBody],
    range: std::ops::Range<usize>,
    start: (Option<u32>, u64),
    base: usize,
    found: &mut Vec<(u64, LogRef)>,
) {
    let (Some(files), (Some(index), from)) = (&shared.bodies, start) else {
        return;
    };
    for &(id, at, len) in bodies.iter().filter(|b| range.contains(&b.1)) {
        files.located_at(found, id, index, from + (at - base) as u64, len);
    }
}

/// Records whether the disk has room for new segments (`problem` is why not), logging
/// only when that changes, and tells producers through [`Log::has_room`].
fn note_space(shared: &Shared, w: &mut WriterState, problem: Option<&io::Error>) {
    let full = problem.is_some();
    if full != w.full {
        match problem {
            Some(e) if is_no_space(e) => tracing::warn!("{NO_ROOM_MESSAGE} ({e})"),
            Some(e) => tracing::error!(
                "cannot make a new log segment: {e}; new jobs are refused until it can be made"
            ),
            None => tracing::info!("the disk has room for the log again: accepting new jobs"),
        }
        w.full = full;
    }
    let writes_fail = shared.failing.load(Ordering::Relaxed);
    shared
        .accepting
        .store(!w.full && !writes_fail, Ordering::Relaxed);
}

/// A snapshot that was requested is not made after all: dropping its request stops its
/// feeder, and the log keeps every segment. Nobody waits for it any longer (a shutdown
/// waits for a running snapshot).
fn abandon_snapshot(shared: &Shared, req: SnapshotRequest) {
    drop(req);
    shared.snapshot_running.store(false, Ordering::Release);
}

/// Appends `data` to the current segment, reserving space first if it runs past what
/// is reserved. A failing write is retried with back-off (nothing after it is
/// acknowledged meanwhile, and new jobs are refused), logged when it starts failing and
/// when it works again; a `snapshot` waiting for this write is abandoned. Returns false if
/// the log is closing and it failed for [`CLOSE_GIVE_UP`].
fn write_data(
    shared: &Shared,
    w: &mut WriterState,
    data: &[u8],
    snapshot: &mut Option<SnapshotRequest>,
) -> bool {
    if data.is_empty() {
        return true;
    }
    if !w.full {
        // Keeps the reserve free behind this batch. If that fails, new jobs are refused
        // from now on and this batch goes into the reserve.
        if let Err(e) = reserve_ahead(shared, w, data.len() as u64) {
            note_space(shared, w, Some(&e));
        }
    }
    let end = w.segment.len + data.len() as u64;
    if end > w.segment.reserved_to {
        // Past the reserve (records that add no jobs used it all, or a batch larger than
        // it): written anyway, the file system may still find the blocks.
        let from = w.segment.reserved_to;
        if preallocate(&w.segment.file, from, end - from).is_ok() {
            w.segment.reserved_to = end;
        }
    }
    let mut delay = Duration::from_millis(10);
    let mut give_up_at: Option<Instant> = None;
    loop {
        match w.segment.write(data) {
            Ok(()) => {
                if shared.failing.swap(false, Ordering::AcqRel) {
                    tracing::info!("log writes work again");
                    let full = w.full;
                    shared.accepting.store(!full, Ordering::Relaxed);
                }
                return true;
            }
            Err(e) => {
                // No snapshot on a log that cannot be written (nor one requested since):
                // a shutdown waits for a running snapshot, and must not wait for this.
                let requested = shared.pending.lock().expect("log lock").snapshot.take();
                for req in [snapshot.take(), requested].into_iter().flatten() {
                    abandon_snapshot(shared, req);
                }
                if !shared.failing.swap(true, Ordering::AcqRel) {
                    shared.accepting.store(false, Ordering::Relaxed);
                    tracing::error!(
                        "log write failed: {e}; retrying until it works (new jobs are refused; \
                         nothing after it is acknowledged until it is written)"
                    );
                }
                if shared.closing.load(Ordering::Acquire) {
                    let at = *give_up_at.get_or_insert_with(|| Instant::now() + CLOSE_GIVE_UP);
                    if Instant::now() >= at {
                        tracing::error!(
                            "shutting down with {} bytes of log records unwritten ({e}); they \
                             were never acknowledged",
                            data.len()
                        );
                        return false;
                    }
                }
                std::thread::sleep(delay);
                delay = (delay * 2).min(Duration::from_millis(500));
            }
        }
    }
}

/// Writes the snapshot on its own thread so appends keep flowing meanwhile.
fn spawn_snapshot(shared: &Arc<Shared>, seq: u64, req: SnapshotRequest) {
    let shared_for_thread = shared.clone();
    let spawned = std::thread::Builder::new()
        .name("jobyard-snapshot".into())
        .spawn(move || {
            let shared = shared_for_thread;
            match write_snapshot(&shared, seq, req.feed, req.next_id) {
                Ok(jobs) => {
                    if shared.snapshot_failing.swap(false, Ordering::Relaxed) {
                        tracing::info!("snapshots work again");
                    }
                    tracing::info!("snapshot {seq} written ({jobs} jobs); older log files removed")
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {
                    tracing::info!("snapshot {seq} abandoned; the log keeps all segments")
                }
                // Compaction tries again every second: say it once, not every time.
                Err(e) if shared.snapshot_failing.swap(true, Ordering::Relaxed) => {
                    tracing::debug!("snapshot {seq} failed again: {e}")
                }
                Err(e) => tracing::error!(
                    "snapshot {seq} failed: {e}; the log keeps all segments (tried again \
                     later; logged again when it works)"
                ),
            }
            shared.snapshot_running.store(false, Ordering::Release);
        });
    if let Err(e) = spawned {
        tracing::error!("cannot start snapshot thread: {e}");
        shared.snapshot_running.store(false, Ordering::Release);
    }
}

/// Writes what the feed sends to `snap-<seq>.snap` and returns the number of jobs. The file
/// is written under a temporary name and renamed only once complete and synced, so an
/// interrupted snapshot leaves nothing recovery would trust.
fn write_snapshot(
    shared: &Shared,
    seq: u64,
    feed: Receiver<FeedItem>,
    next_id: u64,
) -> io::Result<u64> {
    let dir = shared.dir.as_path();
    let final_path = snapshot_path(dir, seq);
    let tmp = final_path.with_extension("snap.tmp");
    let mut copied = shared.bodies.as_ref().map(|_| Vec::new());
    let written = write_snapshot_file(&tmp, seq, feed, next_id, copied.as_mut());
    let jobs = match written {
        Ok(done) => done,
        Err(e) => {
            let _ = fs::remove_file(&tmp);
            return Err(e);
        }
    };
    fs::rename(&tmp, &final_path)?;
    sync_dir(dir)?;
    if let (Some(bodies), Some(copied)) = (&shared.bodies, copied) {
        // The engine learns the copies' places before the old files are forgotten: a
        // reader always finds a body either where it was or in the snapshot.
        let key = FileKey {
            seq,
            snapshot: true,
        };
        if let Some(index) = bodies.register_complete(key, &final_path) {
            let mut found = Vec::with_capacity(copied.len());
            for (id, at, len) in copied {
                bodies.located_at(&mut found, id, index, at, len);
            }
            bodies.publish_moved(&mut found);
        }
        bodies.forget_older_than(seq);
    }
    for (kind, path) in list(dir)? {
        let old = match kind {
            DataFile::Segment(n) | DataFile::Snapshot(n) => n < seq,
            DataFile::Temp => false,
        };
        if old {
            fs::remove_file(path)?;
        }
    }
    sync_dir(dir)?;
    Ok(jobs)
}

/// Writes the snapshot file; when `copied` is given, notes where each body went in it.
fn write_snapshot_file(
    tmp: &Path,
    seq: u64,
    feed: Receiver<FeedItem>,
    next_id: u64,
    mut copied: Option<&mut Vec<(u64, u64, usize)>>,
) -> io::Result<u64> {
    let mut out = io::BufWriter::with_capacity(1 << 20, File::create(tmp)?);
    out.write_all(&header(SNAPSHOT_MAGIC, seq))?;
    out.write_all(&next_id.to_le_bytes())?;
    let mut buf = Vec::with_capacity(64 << 10);
    let mut jobs = 0u64;
    // File offset of `buf`'s first byte.
    let mut flushed = (HEADER_LEN + 8) as u64;
    loop {
        match feed.recv() {
            Ok(FeedItem::Jobs(changes)) => {
                for change in &changes {
                    encode_change(change, &mut buf);
                    if let (Some(copied), Change::Put { id, body, .. }) = (&mut copied, change) {
                        let at = flushed + (buf.len() - body.len()) as u64;
                        copied.push((*id, at, body.len()));
                    }
                    if buf.len() >= 60 << 10 {
                        out.write_all(&buf)?;
                        flushed += buf.len() as u64;
                        buf.clear();
                    }
                }
                jobs += changes.len() as u64;
            }
            Ok(FeedItem::Done) => break,
            Err(_) => {
                return Err(io::Error::new(
                    io::ErrorKind::Interrupted,
                    "abandoned before it was complete",
                ))
            }
        }
    }
    out.write_all(&buf)?;
    out.write_all(SNAPSHOT_END)?;
    out.write_all(&jobs.to_le_bytes())?;
    let file = out.into_inner().map_err(|e| e.into_error())?;
    file.sync_all()?;
    Ok(jobs)
}
