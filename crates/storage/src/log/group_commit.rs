//! One group commit: everything appended since the last one goes to the backend as one
//! batch with one sync, and then every record in it is durable.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use jobyard_engine::LogRef;

use super::backend::{BatchStart, ConsumedRows, LogBackend};
use super::options::FsyncMode;
use super::snapshot::{abandon_snapshot, spawn_snapshot, SnapshotRequest};
use super::space::{is_no_space, note_space, SPACE_PROBE};
use super::state::{PendingBody, Shared, WriterState};
use super::{fsync, CLOSE_GIVE_UP};
use crate::bodies::KEEP_PLACES;

/// In `never` mode, written bytes that make the writer thread start their writeback at
/// once rather than at its next sweep: the dirty backlog that a segment's closing fsync
/// must write stays about this small however fast the log is written.
pub(crate) const WRITEBACK_AFTER_BYTES: u64 = 4 << 20;

/// Writes everything pending with one write, syncs if the mode asks for it, and
/// advances the durable position. Called with the writer lock held. Returns false only
/// when closing and the write kept failing for [`CLOSE_GIVE_UP`] (nothing was advanced).
pub(crate) fn write_batch<B: LogBackend>(
    shared: &Arc<Shared<B>>,
    w: &mut WriterState<B::Writer>,
    shutdown: bool,
) -> bool {
    let (upto, snapshot, records, consumed) = {
        let mut p = shared.pending.lock().expect("log lock");
        std::mem::swap(&mut p.buf, &mut w.spare);
        std::mem::swap(&mut p.bodies, &mut w.spare_bodies);
        let durable = shared.durable.load(Ordering::Relaxed);
        let consumed = std::mem::take(&mut p.consumed);
        (
            p.appended,
            p.snapshot.take(),
            p.appended - durable,
            consumed,
        )
    };
    let data = std::mem::take(&mut w.spare);
    shared.stats.wrote(data.len());
    let mut snapshot = snapshot;
    let written = write_around_cut(shared, w, &data, &mut snapshot, &consumed);
    if let Some(req) = snapshot.take() {
        abandon_snapshot(shared, req);
    }
    if written.is_err() {
        return false;
    }
    if must_sync(shared, w, data.len(), shutdown) {
        fsync::sync_or_die(|| shared.backend.sync(&mut w.store));
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
    rotate_or_probe(shared, w);
    true
}

/// Writes a batch, starting the next section at a requested snapshot's cut (and the
/// snapshot's thread), and publishes where the batch's bodies went. A snapshot left in
/// `snapshot` could not be started.
fn write_around_cut<B: LogBackend>(
    shared: &Arc<Shared<B>>,
    w: &mut WriterState<B::Writer>,
    data: &[u8],
    snapshot: &mut Option<SnapshotRequest>,
    consumed: &[ConsumedRows],
) -> Result<(), GaveUp> {
    let at = snapshot.as_ref().map_or(data.len(), |req| req.at);
    let mut bodies = std::mem::take(&mut w.spare_bodies);
    let mut found = std::mem::take(&mut w.spare_found);
    // Enqueue rows go with the part that holds their puts (a consumer's records never
    // straddle the cut: both are placed under the pending lock).
    let (before, after) = split_consumed(consumed, at);
    let mut written = write_data(shared, w, &data[..at], snapshot, &before);
    if let Ok(start) = written {
        locate(shared, &bodies, 0..at, start, 0, &mut found);
    }
    if written.is_ok() {
        if let Some(req) = snapshot.take() {
            match rotate(shared, w) {
                Ok(seq) => spawn_snapshot(shared, seq, req),
                Err(e) => {
                    note_space(shared, w, Some(&e));
                    abandon_snapshot(shared, req);
                }
            }
        }
        written = write_data(shared, w, &data[at..], &mut None, &after);
        if let Ok(start) = written {
            locate(shared, &bodies, at..data.len(), start, at, &mut found);
        }
    }
    if let Some(b) = shared.backend.bodies() {
        b.publish(&mut found);
    }
    found.clear();
    if found.capacity() <= KEEP_PLACES {
        w.spare_found = found;
    }
    bodies.clear();
    w.spare_bodies = bodies;
    written.map(|_| ())
}

/// The ids of enqueue rows whose puts end at or before `at`, and of the others.
fn split_consumed(consumed: &[ConsumedRows], at: usize) -> (Vec<i64>, Vec<i64>) {
    let (mut before, mut after) = (Vec::new(), Vec::new());
    for rows in consumed {
        let side = if rows.ends_at <= at {
            &mut before
        } else {
            &mut after
        };
        side.extend_from_slice(&rows.ids);
    }
    (before, after)
}

/// Whether the batch of `written` bytes just written must be synced before it is
/// acknowledged; notes what the periodic sync (or writeback) has to do otherwise.
fn must_sync<B: LogBackend>(
    shared: &Shared<B>,
    w: &mut WriterState<B::Writer>,
    written: usize,
    shutdown: bool,
) -> bool {
    match shared.options.fsync {
        FsyncMode::Always => written > 0,
        FsyncMode::Interval(_) => {
            w.unsynced |= written > 0;
            w.unsynced && shutdown
        }
        FsyncMode::Never => {
            w.unsynced |= written > 0;
            let before = w.since_writeback;
            w.since_writeback += written as u64;
            if before < WRITEBACK_AFTER_BYTES && w.since_writeback >= WRITEBACK_AFTER_BYTES {
                // Under the pending lock, so the writer thread cannot miss it between its
                // check and its wait.
                shared.pending.lock().expect("log lock").writeback_due = true;
                shared.wake.notify_one();
            }
            shutdown
        }
    }
}

/// Starts the next segment when this one is full, and while the disk is full finds out
/// whether there is room again.
fn rotate_or_probe<B: LogBackend>(shared: &Shared<B>, w: &mut WriterState<B::Writer>) {
    let due = shared.backend.rotation_due(&w.store);
    if due && !w.full {
        let made = rotate(shared, w).map(|_| ());
        note_space(shared, w, made.as_ref().err());
    } else if w.full && w.last_probe.elapsed() >= SPACE_PROBE {
        // Is there room again? A new segment if this one is done, else more reserved
        // space in this one.
        w.last_probe = Instant::now();
        let found = if due {
            rotate(shared, w).map(|_| ())
        } else {
            shared.backend.make_room(&mut w.store, 0)
        };
        note_space(shared, w, found.as_ref().err());
    }
}

/// Starts the next section and tells the log's readers its number, which it returns.
fn rotate<B: LogBackend>(
    shared: &Shared<B>,
    w: &mut WriterState<B::Writer>,
) -> std::io::Result<u64> {
    let seq = shared.backend.rotate(&mut w.store)?;
    shared.current_segment.store(seq, Ordering::Relaxed);
    Ok(seq)
}

/// The places of the pending bodies within `range` of a batch, written from `start`;
/// `base` is where that part begins in the batch.
fn locate<B: LogBackend>(
    shared: &Shared<B>,
    bodies: &[PendingBody],
    range: std::ops::Range<usize>,
    start: Option<BatchStart>,
    base: usize,
    found: &mut Vec<(u64, LogRef)>,
) {
    let (Some(files), Some(start)) = (shared.backend.bodies(), start) else {
        return;
    };
    for &(id, at, len) in bodies.iter().filter(|b| range.contains(&b.1)) {
        files.located_at(
            found,
            id,
            start.file,
            start.offset + (at - base) as u64,
            len,
        );
    }
}

/// The log is closing and a write failed for [`CLOSE_GIVE_UP`]: it was given up, and
/// nothing in it was acknowledged.
struct GaveUp;

/// Hands `data` to the backend, making room first. A failing write is retried with
/// back-off (nothing after it is acknowledged meanwhile, and new jobs are refused), logged
/// when it starts failing and when it works again; a `snapshot` waiting for this write is
/// abandoned. Returns where the data went (`None` when bodies cannot be read back from
/// there, or there was nothing to write).
fn write_data<B: LogBackend>(
    shared: &Shared<B>,
    w: &mut WriterState<B::Writer>,
    data: &[u8],
    snapshot: &mut Option<SnapshotRequest>,
    consumed: &[i64],
) -> Result<Option<BatchStart>, GaveUp> {
    if data.is_empty() {
        return Ok(None);
    }
    if !w.full {
        // Keeps the reserve free behind this batch. If that fails, new jobs are refused
        // from now on and this batch goes into the reserve.
        if let Err(e) = shared.backend.make_room(&mut w.store, data.len() as u64) {
            note_space(shared, w, Some(&e));
        }
    }
    let mut delay = Duration::from_millis(10);
    let mut give_up_at: Option<Instant> = None;
    loop {
        let result = if consumed.is_empty() {
            shared.backend.write(&mut w.store, data)
        } else {
            shared.backend.write_consuming(&mut w.store, data, consumed)
        };
        match result {
            Ok(start) => {
                if shared.failing.swap(false, Ordering::AcqRel) {
                    tracing::info!("log writes work again");
                    let full = w.full;
                    shared.accepting.store(!full, Ordering::Relaxed);
                }
                return Ok(start);
            }
            Err(e) => {
                // No snapshot on a log that cannot be written (nor one requested since):
                // a shutdown waits for a running snapshot, and must not wait for this.
                let requested = shared.pending.lock().expect("log lock").snapshot.take();
                for req in [snapshot.take(), requested].into_iter().flatten() {
                    abandon_snapshot(shared, req);
                }
                if is_no_space(&e) && !w.full {
                    // Out of room (PostgreSQL's disk): refused new jobs stay refused until
                    // the backend finds room again, not merely until this write goes in.
                    note_space(shared, w, Some(&e));
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
                        return Err(GaveUp);
                    }
                }
                std::thread::sleep(delay);
                delay = (delay * 2).min(Duration::from_millis(500));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn enqueue_rows_go_with_the_part_of_the_batch_holding_their_puts() {
        let consumed = [
            ConsumedRows {
                ends_at: 40,
                ids: vec![1, 2],
            },
            ConsumedRows {
                ends_at: 100,
                ids: vec![3],
            },
            ConsumedRows {
                ends_at: 101,
                ids: vec![4],
            },
        ];
        assert_eq!(
            split_consumed(&consumed, 100),
            (vec![1, 2, 3], vec![4]),
            "records ending at the cut are before it"
        );
        assert_eq!(split_consumed(&consumed, 0), (vec![], vec![1, 2, 3, 4]));
        assert_eq!(split_consumed(&[], 10), (vec![], vec![]));
    }
}
