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

use crate::codec::encode_change;
use crate::files::{
    header, list, segment_path, snapshot_path, sync_dir, DataFile, SEGMENT_MAGIC, SNAPSHOT_END,
    SNAPSHOT_MAGIC,
};
use crate::stats::LogStats;
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
}

impl Default for LogOptions {
    fn default() -> Self {
        LogOptions {
            fsync: FsyncMode::Always,
            segment_bytes: 64 << 20,
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
    appended: Lsn,
    snapshot: Option<SnapshotRequest>,
    shutdown: bool,
}

struct Shared {
    dir: PathBuf,
    options: LogOptions,
    pending: Mutex<Pending>,
    wake: Condvar,
    durable: AtomicU64,
    snapshot_running: AtomicBool,
    records_written: AtomicU64,
    stats: LogStats,
    current_segment: AtomicU64,
    on_durable: Box<dyn Fn(Lsn) + Send + Sync>,
    /// The open segment and the writer's scratch state. Held while writing a batch: by the
    /// writer thread, or (when replies need only `write(2)`) by a connection writing inline.
    writer: Mutex<WriterState>,
}

struct WriterState {
    segment: Segment,
    spare: Vec<u8>,
    last_sync: Instant,
    unsynced: bool,
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
        let segment = Segment::create(dir, first_segment)?;
        let shared = Arc::new(Shared {
            dir: dir.to_path_buf(),
            options,
            pending: Mutex::new(Pending::default()),
            wake: Condvar::new(),
            durable: AtomicU64::new(0),
            snapshot_running: AtomicBool::new(false),
            records_written: AtomicU64::new(0),
            stats: LogStats::default(),
            current_segment: AtomicU64::new(first_segment),
            on_durable,
            writer: Mutex::new(WriterState {
                segment,
                spare: Vec::new(),
                last_sync: Instant::now(),
                unsynced: false,
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
        let before = p.appended;
        for change in changes {
            encode_change(&change, &mut p.buf);
            p.appended += 1;
        }
        let lsn = p.appended;
        self.shared
            .stats
            .records
            .fetch_add(lsn - before, Ordering::Relaxed);
        // In `always` mode the writer thread does every write. Otherwise whoever waits for
        // the records writes them inline, and the writer thread only sweeps up, on its
        // timer, records that nobody waits for — waking it here would cost a context
        // switch per batch.
        if was_empty && !p.buf.is_empty() && self.shared.options.fsync == FsyncMode::Always {
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
        let mut w = self.shared.writer.lock().expect("log writer lock");
        if self.durable() < lsn {
            write_batch(&self.shared, &mut w, false);
        }
        true
    }

    /// Everything up to this LSN may be acknowledged.
    pub fn durable(&self) -> Lsn {
        self.shared.durable.load(Ordering::Acquire)
    }

    /// Records written since start (for stats).
    pub fn records_written(&self) -> u64 {
        self.shared.records_written.load(Ordering::Relaxed)
    }

    /// Figures for operators: bytes, batches, syncs and their latency.
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
    pub fn close(&self) {
        let thread = self.thread.lock().expect("log thread lock").take();
        if let Some(thread) = thread {
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

struct Segment {
    file: File,
    seq: u64,
    len: u64,
}

impl Segment {
    fn create(dir: &Path, seq: u64) -> io::Result<Segment> {
        let path = segment_path(dir, seq);
        let mut file = OpenOptions::new()
            .create(true)
            .truncate(true)
            .write(true)
            .open(&path)?;
        file.write_all(&header(SEGMENT_MAGIC, seq))?;
        file.sync_all()?;
        sync_dir(dir)?;
        Ok(Segment {
            file,
            seq,
            len: crate::files::HEADER_LEN as u64,
        })
    }

    /// Appends `data`. After a failed write the file is cut back to its last good length,
    /// so a retry never leaves a half record in the middle of the log.
    fn write(&mut self, data: &[u8]) -> io::Result<()> {
        if data.is_empty() {
            return Ok(());
        }
        match self.file.write_all(data) {
            Ok(()) => {
                self.len += data.len() as u64;
                Ok(())
            }
            Err(e) => {
                let _ = self.file.set_len(self.len);
                let _ = std::io::Seek::seek(&mut self.file, io::SeekFrom::Start(self.len));
                Err(e)
            }
        }
    }
}

fn retry<T>(what: &str, mut f: impl FnMut() -> io::Result<T>) -> T {
    let mut delay = Duration::from_millis(10);
    loop {
        match f() {
            Ok(v) => return v,
            Err(e) => {
                tracing::error!(
                    "log {what} failed: {e}; retrying (nothing is acknowledged until it succeeds)"
                );
                std::thread::sleep(delay);
                delay = (delay * 2).min(Duration::from_secs(1));
            }
        }
    }
}

/// Syncs a segment, or ends the process if that fails.
///
/// After a failed fsync the kernel may have dropped the dirty pages and a second fsync can
/// report success for data that never reached the disk, so retrying would acknowledge jobs
/// that are not stored. Stopping is the only honest answer: nothing in the failed batch was
/// acknowledged, and the next start recovers exactly what the disk holds.
fn sync_or_die(segment: &Segment, stats: &LogStats) {
    let started = Instant::now();
    if let Err(e) = segment.file.sync_data() {
        fsync_failed(&e);
    }
    stats.synced(started.elapsed());
}

fn fsync_failed(e: &io::Error) -> ! {
    tracing::error!(
        "fsync of the log failed: {e}; stopping so that nothing unsynced is acknowledged \
         (restart to recover what is on disk)"
    );
    eprintln!("jobyard: fsync failed: {e}");
    std::process::exit(75);
}

/// How often the writer thread writes out records nobody waited for in `never` mode.
const NEVER_MODE_SWEEP: Duration = Duration::from_millis(50);

/// The writer thread: writes whatever accumulates (every batch in `always` mode, where it
/// also syncs), performs the periodic sync of `interval` mode, and flushes at shutdown.
fn write_loop(shared: Arc<Shared>) {
    let interval = match shared.options.fsync {
        FsyncMode::Interval(every) => Some(every),
        FsyncMode::Never => Some(NEVER_MODE_SWEEP),
        FsyncMode::Always => None,
    };
    loop {
        let shutdown = {
            let mut p = shared.pending.lock().expect("log lock");
            while p.buf.is_empty() && p.snapshot.is_none() && !p.shutdown {
                match interval {
                    Some(every) => {
                        let (guard, timeout) =
                            shared.wake.wait_timeout(p, every).expect("log lock");
                        p = guard;
                        if timeout.timed_out() {
                            break;
                        }
                    }
                    None => p = shared.wake.wait(p).expect("log lock"),
                }
            }
            p.shutdown
        };
        let file_to_flush = {
            let mut w = shared.writer.lock().expect("log writer lock");
            write_batch(&shared, &mut w, shutdown);
            match interval {
                Some(every) if w.unsynced && w.last_sync.elapsed() >= every => {
                    w.unsynced = false;
                    w.last_sync = Instant::now();
                    w.segment.file.try_clone().ok()
                }
                _ => None,
            }
        };
        // The periodic flush runs outside the writer lock, so inline writers never wait on it.
        if let Some(file) = file_to_flush {
            if shared.options.fsync == FsyncMode::Never {
                start_writeback(&file);
            } else {
                let started = Instant::now();
                if let Err(e) = file.sync_data() {
                    fsync_failed(&e);
                }
                shared.stats.synced(started.elapsed());
            }
        }
        if shutdown && shared.pending.lock().expect("log lock").buf.is_empty() {
            let w = shared.writer.lock().expect("log writer lock");
            sync_or_die(&w.segment, &shared.stats);
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
/// advances the durable position. Called with the writer lock held.
fn write_batch(shared: &Arc<Shared>, w: &mut WriterState, shutdown: bool) {
    let (upto, snapshot, records) = {
        let mut p = shared.pending.lock().expect("log lock");
        std::mem::swap(&mut p.buf, &mut w.spare);
        let durable = shared.durable.load(Ordering::Relaxed);
        (p.appended, p.snapshot.take(), p.appended - durable)
    };
    let data = std::mem::take(&mut w.spare);
    shared.stats.wrote(data.len());
    match snapshot {
        Some(req) => {
            retry("write", || w.segment.write(&data[..req.at]));
            sync_or_die(&w.segment, &shared.stats);
            let next = w.segment.seq + 1;
            w.segment = retry("segment create", || Segment::create(&shared.dir, next));
            shared
                .current_segment
                .store(w.segment.seq, Ordering::Relaxed);
            retry("write", || w.segment.write(&data[req.at..]));
            spawn_snapshot(shared, w.segment.seq, req);
        }
        None => retry("write", || w.segment.write(&data)),
    }
    let must_sync = match shared.options.fsync {
        FsyncMode::Always => !data.is_empty(),
        FsyncMode::Interval(_) => {
            w.unsynced |= !data.is_empty();
            w.unsynced && shutdown
        }
        FsyncMode::Never => {
            w.unsynced |= !data.is_empty();
            shutdown
        }
    };
    if must_sync {
        sync_or_die(&w.segment, &shared.stats);
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
    if w.segment.len >= shared.options.segment_bytes {
        sync_or_die(&w.segment, &shared.stats);
        let next = w.segment.seq + 1;
        w.segment = retry("segment create", || Segment::create(&shared.dir, next));
        shared
            .current_segment
            .store(w.segment.seq, Ordering::Relaxed);
    }
}

/// Writes the snapshot on its own thread so appends keep flowing meanwhile.
fn spawn_snapshot(shared: &Arc<Shared>, seq: u64, req: SnapshotRequest) {
    let shared_for_thread = shared.clone();
    let spawned = std::thread::Builder::new()
        .name("jobyard-snapshot".into())
        .spawn(move || {
            let shared = shared_for_thread;
            match write_snapshot(&shared.dir, seq, req.feed, req.next_id) {
                Ok(jobs) => {
                    tracing::info!("snapshot {seq} written ({jobs} jobs); older log files removed")
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {
                    tracing::info!("snapshot {seq} abandoned; the log keeps all segments")
                }
                Err(e) => tracing::error!("snapshot {seq} failed: {e}; the log keeps all segments"),
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
fn write_snapshot(dir: &Path, seq: u64, feed: Receiver<FeedItem>, next_id: u64) -> io::Result<u64> {
    let final_path = snapshot_path(dir, seq);
    let tmp = final_path.with_extension("snap.tmp");
    let written = write_snapshot_file(&tmp, seq, feed, next_id);
    let jobs = match written {
        Ok(jobs) => jobs,
        Err(e) => {
            let _ = fs::remove_file(&tmp);
            return Err(e);
        }
    };
    fs::rename(&tmp, &final_path)?;
    sync_dir(dir)?;
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

fn write_snapshot_file(
    tmp: &Path,
    seq: u64,
    feed: Receiver<FeedItem>,
    next_id: u64,
) -> io::Result<u64> {
    let mut out = io::BufWriter::with_capacity(1 << 20, File::create(tmp)?);
    out.write_all(&header(SNAPSHOT_MAGIC, seq))?;
    out.write_all(&next_id.to_le_bytes())?;
    let mut buf = Vec::with_capacity(64 << 10);
    let mut jobs = 0u64;
    loop {
        match feed.recv() {
            Ok(FeedItem::Jobs(changes)) => {
                for change in &changes {
                    encode_change(change, &mut buf);
                    if buf.len() >= 60 << 10 {
                        out.write_all(&buf)?;
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
