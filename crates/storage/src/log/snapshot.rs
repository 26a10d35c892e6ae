//! Snapshots: cut the log at a section boundary, fill the snapshot a chunk at a time on
//! its own thread while appends go on, then drop what it covers.

use std::io;
use std::sync::atomic::Ordering;
use std::sync::mpsc::{self, Receiver, SyncSender};
use std::sync::Arc;

use jobyard_engine::Change;

use super::backend::LogBackend;
use super::state::Shared;
use super::{with_shared, Log};

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

/// A snapshot asked for and not yet started: the writer cuts the log where it says.
pub(crate) struct SnapshotRequest {
    /// Offset in the pending buffer where the new segment must start.
    pub at: usize,
    feed: Receiver<FeedItem>,
    next_id: u64,
}

impl Log {
    /// Whether a snapshot is being written.
    pub fn snapshot_running(&self) -> bool {
        with_shared!(self, shared => {
            shared.snapshot_running.load(Ordering::Acquire)

        })
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
        with_shared!(self, shared => {
            // A snapshot starts a new segment, which a full disk has no room for.
            if !shared.accepting.load(Ordering::Relaxed) {
                return None;
            }
            if shared.snapshot_running.swap(true, Ordering::AcqRel) {
                return None;
            }
            let (tx, rx) = mpsc::sync_channel(FEED_DEPTH);
            let mut p = shared.pending.lock().expect("log lock");
            let at = p.buf.len();
            p.snapshot = Some(SnapshotRequest {
                at,
                feed: rx,
                next_id,
            });
            shared.wake.notify_one();
            Some(SnapshotFeed { tx })

        })
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
}

/// A snapshot that was requested is not made after all: dropping its request stops its
/// feeder, and the log keeps every segment. Nobody waits for it any longer (a shutdown
/// waits for a running snapshot).
pub(crate) fn abandon_snapshot<B: LogBackend>(shared: &Shared<B>, req: SnapshotRequest) {
    drop(req);
    shared.snapshot_running.store(false, Ordering::Release);
}

/// Writes the snapshot of section `seq` on its own thread so appends keep flowing meanwhile.
pub(crate) fn spawn_snapshot<B: LogBackend>(
    shared: &Arc<Shared<B>>,
    seq: u64,
    req: SnapshotRequest,
) {
    let shared_for_thread = shared.clone();
    let spawned = std::thread::Builder::new()
        .name("jobyard-snapshot".into())
        .spawn(move || {
            let shared = shared_for_thread;
            match write_snapshot(&shared.backend, seq, req.feed, req.next_id) {
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

/// Writes what the feed sends as snapshot `seq`, completes it, and drops what it covers;
/// returns the number of jobs. A feed dropped before it is done abandons the snapshot
/// (an `Interrupted` error), leaving nothing recovery would trust.
fn write_snapshot<B: LogBackend>(
    backend: &B,
    seq: u64,
    feed: Receiver<FeedItem>,
    next_id: u64,
) -> io::Result<u64> {
    let mut snapshot = backend.begin_snapshot(seq, next_id)?;
    loop {
        match feed.recv() {
            Ok(FeedItem::Jobs(changes)) => backend.add_to_snapshot(&mut snapshot, &changes)?,
            Ok(FeedItem::Done) => break,
            Err(_) => {
                return Err(io::Error::new(
                    io::ErrorKind::Interrupted,
                    "abandoned before it was complete",
                ))
            }
        }
    }
    let jobs = backend.complete_snapshot(snapshot)?;
    backend.drop_covered(seq)?;
    Ok(jobs)
}
