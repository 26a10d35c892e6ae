//! Syncing a lone transaction on the caller's thread while the writer thread is idle.
//!
//! A durable hop through the writer thread costs two thread wake-ups besides its fsync
//! (the caller wakes the writer; the writer wakes the caller back). On a quiet server
//! each of them finds a halted vCPU, which on this project's guest costs more than the
//! fsync itself (docs/benchmarks.md, "Flows"). A caller that may block its thread (one
//! that can hand its runtime's other work to another thread) claims the records when
//! nothing else is pending or being written, and writes and syncs them itself.
//!
//! Only a lone transaction is ever synced this way: anyone who appends while a claim is
//! open hands the whole buffer to the writer thread, so concurrent transactions still
//! share one fsync, and the group commit of a busy server is unchanged.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use jobyard_engine::Change;

use super::{write_batch, FsyncMode, Log};
use crate::Lsn;

/// A log that wrote this many batches within [`BUSY_WINDOW`] is busy: its transactions
/// go to the writer thread, which batches them. On a busy log a claim finds the writer
/// idle only between two batches, and syncing there costs a lone fsync and a thread
/// hand-off per transaction: measured, saturated flows lost about half their throughput
/// (docs/benchmarks.md, "Flows"). A quiet flow makes 4-5 syncs in a few ms.
const BUSY_BATCHES: usize = 8;
const BUSY_WINDOW: Duration = Duration::from_millis(10);

/// When the last [`BUSY_BATCHES`] batches were written (a ring, oldest next).
#[derive(Default)]
pub(super) struct RecentBatches {
    ends: [Option<Instant>; BUSY_BATCHES],
    next: usize,
}

impl RecentBatches {
    /// Notes a batch written at `now`.
    pub(super) fn note(&mut self, now: Instant) {
        self.ends[self.next] = Some(now);
        self.next = (self.next + 1) % BUSY_BATCHES;
    }

    /// Whether fewer than [`BUSY_BATCHES`] batches were written in the last [`BUSY_WINDOW`].
    fn quiet(&self, now: Instant) -> bool {
        self.ends[self.next].is_none_or(|oldest| now.duration_since(oldest) >= BUSY_WINDOW)
    }
}

/// Records appended by [`Log::append_claiming`]. When `claimed`, nobody else will write
/// them: [`Claim::sync`] does, and dropping an unsynced claim hands them to the writer
/// thread, so a caller that panics or is cancelled leaves nothing stranded.
#[must_use = "a claim's records are written by `sync` or, when dropped, by the writer thread"]
pub struct Claim<'a> {
    log: &'a Log,
    lsn: Lsn,
    claimed: bool,
}

impl Log {
    /// Like [`Log::append`], but in `always` mode, when nothing else is pending, no batch
    /// is being written and the log is quiet ([`BUSY_BATCHES`]), the writer thread is not
    /// woken: the returned claim's
    /// [`Claim::sync`] writes and syncs the records on the caller's thread instead.
    /// Otherwise (or in the other modes) the records go the usual way and the claim holds
    /// nothing to do.
    pub fn append_claiming(&self, changes: impl Iterator<Item = Change>) -> Claim<'_> {
        let shared = &self.shared;
        let mut p = shared.pending.lock().expect("log lock");
        let was_empty = p.buf.is_empty();
        let lsn = self.encode(&mut p, changes);
        let lone = was_empty && !p.buf.is_empty();
        let claimed = lone
            && shared.options.fsync == FsyncMode::Always
            && p.snapshot.is_none()
            && !p.shutdown
            && !shared.failing.load(Ordering::Acquire)
            // Free now, so it is free until the claim is resolved: only a woken writer
            // thread takes it, and nobody wakes it for claimed records.
            && shared
                .writer
                .try_lock()
                .is_ok_and(|w| w.recent.quiet(Instant::now()));
        if claimed {
            p.claimed = true;
        } else if (lone || std::mem::take(&mut p.claimed))
            && shared.options.fsync == FsyncMode::Always
        {
            // Anyone else's claim ends here: the writer thread takes both.
            shared.wake.notify_one();
        }
        Claim {
            log: self,
            lsn,
            claimed,
        }
    }
}

impl Claim<'_> {
    /// The LSN that covers the claimed records: wait for it as for [`Log::append`]'s.
    pub fn lsn(&self) -> Lsn {
        self.lsn
    }

    /// Whether [`Claim::sync`] will write and sync on this thread (if nobody appends
    /// first). False means there is nothing to block for: the caller can skip whatever it
    /// does to block safely.
    pub fn is_claimed(&self) -> bool {
        self.claimed
    }

    /// Writes and fdatasyncs the claimed records (and anything appended after them) on
    /// this thread, unless someone appended meanwhile and the writer thread took them
    /// over. Returns whether it synced; either way the caller then waits for
    /// [`Claim::lsn`] as usual, which it finds durable when this returned true.
    pub fn sync(mut self) -> bool {
        if !std::mem::take(&mut self.claimed) {
            return false;
        }
        let shared = &self.log.shared;
        let still_mine = std::mem::take(&mut shared.pending.lock().expect("log lock").claimed);
        if !still_mine {
            return false;
        }
        let mut w = shared.writer.lock().expect("log writer lock");
        write_batch(shared, &mut w, false);
        true
    }
}

impl Drop for Claim<'_> {
    fn drop(&mut self) {
        if !self.claimed {
            return;
        }
        let shared = &self.log.shared;
        let mut p = shared.pending.lock().expect("log lock");
        if std::mem::take(&mut p.claimed) {
            shared.wake.notify_one();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_log_is_quiet_until_it_wrote_the_busy_count_within_the_window() {
        let start = Instant::now();
        let mut recent = RecentBatches::default();
        for i in 0..BUSY_BATCHES - 1 {
            recent.note(start + Duration::from_millis(i as u64));
            assert!(recent.quiet(start + Duration::from_millis(i as u64)));
        }
        recent.note(start + Duration::from_millis(BUSY_BATCHES as u64));
        assert!(!recent.quiet(start + Duration::from_millis(BUSY_BATCHES as u64)));
        // The oldest of them (at `start`) leaves the window.
        assert!(recent.quiet(start + BUSY_WINDOW));
    }
}
