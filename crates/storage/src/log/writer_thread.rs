//! The writer thread: group commits in `always` mode, the periodic sync (or writeback) of
//! `interval` and `never` modes, probing for room while the disk is full, and the last
//! flush at shutdown.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::backend::LogBackend;
use super::fsync;
use super::group_commit::{write_batch, WRITEBACK_AFTER_BYTES};
use super::options::FsyncMode;
use super::space::SPACE_PROBE;
use super::state::Shared;

/// How often the writer thread writes out records nobody waited for in `never` mode and
/// starts the writeback of what connections wrote. Each sweep wakes a CPU and starts a
/// little I/O (about 100 µs of CPU here): twenty a second cost 2 µs per job at 1,000
/// jobs/s. Fast writing starts its writeback by size instead ([`WRITEBACK_AFTER_BYTES`]).
const NEVER_MODE_SWEEP: Duration = Duration::from_secs(1);

/// Sweeps in a row that found nothing to write or sync before the writer thread stops
/// waking on its timer (`interval`/`never` mode) until the next append: an idle server
/// should not wake a CPU twenty times a second for nothing.
const QUIET_SWEEPS_BEFORE_DOZING: u32 = 2;

/// The writer thread: writes whatever accumulates (every batch in `always` mode, where it
/// also syncs), performs the periodic sync of `interval` mode, retries making a segment
/// while the disk is full, and flushes at shutdown.
pub(crate) fn write_loop<B: LogBackend>(shared: Arc<Shared<B>>) {
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
        let (to_flush, unsynced) = {
            let mut w = shared.writer.lock().expect("log writer lock");
            if !write_batch(&shared, &mut w, shutdown) {
                // Closing, and the log could not be written for CLOSE_GIVE_UP: stop. What
                // is left was never acknowledged.
                shared.backend.close(&mut w.store);
                return;
            }
            let flush = match interval {
                Some(every)
                    if w.unsynced
                        && (w.last_sync.elapsed() >= every
                            || w.since_writeback >= WRITEBACK_AFTER_BYTES) =>
                {
                    w.unsynced = false;
                    w.since_writeback = 0;
                    w.last_sync = Instant::now();
                    shared.backend.flush_handle(&w.store)
                }
                _ => None,
            };
            (flush, w.unsynced)
        };
        let quiet = nothing_pending && to_flush.is_none() && !unsynced;
        quiet_sweeps = if quiet { quiet_sweeps + 1 } else { 0 };
        // The periodic flush runs outside the writer lock, so inline writers never wait on it.
        if let Some(flush) = to_flush {
            if shared.options.fsync == FsyncMode::Never {
                shared.backend.start_writeback(&flush);
            } else if let Err(e) = fsync::timed(|| shared.backend.sync_detached(&flush)) {
                fsync::fsync_failed(&e);
            }
        }
        if shutdown && shared.pending.lock().expect("log lock").buf.is_empty() {
            let mut w = shared.writer.lock().expect("log writer lock");
            fsync::sync_or_die(|| shared.backend.sync(&mut w.store));
            shared.backend.close(&mut w.store);
            return;
        }
    }
}
