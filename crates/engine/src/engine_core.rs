//! The engine together with its plumbing: what only its owner (the broker, recovery,
//! snapshots and tests) may call.
//!
//! Split from [`Engine`] so the compiler keeps the boundary: a protocol front end gets a
//! `&mut Engine` from the broker's transaction and can run every operation on it, but it
//! cannot take the changes meant for the log, the notices meant for mailboxes, tick the
//! clock or rebuild the engine behind the broker's back. There is no way from an
//! `&mut Engine` to the [`EngineCore`] around it.

use std::ops::{Deref, DerefMut};

use crate::change::Change;
use crate::job::LogRef;
use crate::lease_timing::LeaseEnd;
use crate::notice::Notice;
use crate::{Engine, JobId, Millis};

/// Owns the one [`Engine`] and adds the plumbing of whoever keeps it live: draining
/// changes into the log and notices into mailboxes, running the clock, timing leases,
/// placing bodies in the log, replaying the log and snapshotting.
///
/// It dereferences to [`Engine`], so its owner runs the operations directly. The broker
/// hands front ends only the `Engine` inside: every change a front end makes must reach
/// the log through the broker's commit, in the engine's order, and only this type can
/// take it out.
#[derive(Debug)]
pub struct EngineCore {
    engine: Engine,
}

impl Default for EngineCore {
    fn default() -> Self {
        Self::new()
    }
}

// The forwards are `#[inline]` so the broker's every turn pays nothing for the split: a
// call across crates is not inlined otherwise unless link-time optimisation does it.
impl EngineCore {
    /// An empty engine: no queues, no jobs, ids starting at 1.
    pub fn new() -> Self {
        EngineCore {
            engine: Engine::new(),
        }
    }

    /// Takes the changes made since the last call, in order, for the log.
    #[inline]
    pub fn take_changes(&mut self) -> std::vec::Drain<'_, Change> {
        self.engine.take_changes()
    }

    /// Whether there are changes waiting for the log.
    #[inline]
    pub fn has_changes(&self) -> bool {
        self.engine.has_changes()
    }

    /// Takes the notices for sessions produced since the last call.
    #[inline]
    pub fn take_notices(&mut self) -> std::vec::Drain<'_, Notice> {
        self.engine.take_notices()
    }

    /// When [`EngineCore::tick`] next has work to do.
    #[inline]
    pub fn next_deadline(&self) -> Option<Millis> {
        self.engine.next_deadline()
    }

    /// Does everything that was due at or before `now`: delayed jobs become ready, leases
    /// end, pauses end, waits time out, ended flow jobs are purged.
    #[inline]
    pub fn tick(&mut self, now: Millis) {
        self.engine.tick(now);
    }

    /// Starts (or stops) timing leases. The owner then calls [`EngineCore::stamp_leases`]
    /// after operations while [`EngineCore::has_lease_timing_work`] says so, and takes the
    /// ends ([`EngineCore::take_lease_ends`]).
    #[inline]
    pub fn time_leases(&mut self, on: bool) {
        self.engine.time_leases(on);
    }

    /// Lets jobs be handed out, or not (a leader that cannot be sure its lease holds):
    /// while off, reserves find nothing and wait, and no waiter is served. Waiters are
    /// served again when their queues next gain a job. Turning it back on empties the
    /// rate limits' buckets (another node may have handed out jobs meanwhile).
    #[inline]
    pub fn set_handing_out(&mut self, on: bool) {
        self.engine.set_handing_out(on);
    }

    /// Whether leases wait for a stamp or completed leases wait to be taken: only then does
    /// the owner need to read its clock.
    #[inline]
    pub fn has_lease_timing_work(&self) -> bool {
        self.engine.has_lease_timing_work()
    }

    /// Stamps the leases made since the last call with `now` (the owner's monotonic clock,
    /// any unit; the broker uses microseconds).
    #[inline]
    pub fn stamp_leases(&mut self, now: u64) {
        self.engine.stamp_leases(now);
    }

    /// Takes the leases that ended with their job completed since the last call, in order.
    #[inline]
    pub fn take_lease_ends(&mut self) -> std::vec::Drain<'_, LeaseEnd> {
        self.engine.take_lease_ends()
    }

    /// Takes every lease that ended since the last call, with how it ended, in order.
    #[inline]
    pub fn take_lease_closes(&mut self) -> std::vec::Drain<'_, crate::LeaseClosed> {
        self.engine.take_lease_closes()
    }

    /// Keeps the bodies learned written in one turn in memory until later turns bring
    /// newer ones, up to `bytes`; 0, the default, drops each as soon as it is written.
    #[inline]
    pub fn set_hot_body_budget(&mut self, bytes: usize) {
        self.engine.set_hot_body_budget(bytes);
    }

    /// Tells the engine that durable jobs' bodies are now readable at these places in the
    /// log (one turn's worth, in the order written), so their copies in memory may go, but
    /// for the newest few under the hot budget. Ignored for a job that has ended by then,
    /// is not durable, or whose body is not that long.
    #[inline]
    pub fn bodies_written(&mut self, places: impl IntoIterator<Item = (JobId, LogRef)>) {
        self.engine.bodies_written(places);
    }

    /// [`EngineCore::bodies_written`] for one body.
    #[inline]
    pub fn body_written(&mut self, id: JobId, at: LogRef) {
        self.engine.body_written(id, at);
    }

    /// Tells the engine that compaction copied a durable job's body to `at`: the job keeps
    /// that place from now on, also when its body is still in memory.
    #[inline]
    pub fn body_moved(&mut self, id: JobId, at: LogRef) {
        self.engine.body_moved(id, at);
    }

    /// Bodies written and still kept in memory under the hot budget, for stats and tests.
    #[inline]
    pub fn hot_bodies(&self) -> usize {
        self.engine.hot_bodies()
    }

    /// Moves the bodies whose jobs now name their places in the log instead into `into`,
    /// for the owner to free after it lets go of its lock.
    #[inline]
    pub fn move_dropped_bodies(&mut self, into: &mut Vec<Box<[u8]>>) {
        self.engine.move_dropped_bodies(into);
    }

    /// Applies one change read back from the log. Reservations are not logged, so a job
    /// comes back ready, delayed or buried; changes to unknown jobs are ignored.
    #[inline]
    pub fn replay(&mut self, change: Change) {
        self.engine.replay(change);
    }

    /// [`EngineCore::replay`] for an owner that keeps bodies only in the log: a `Put` whose
    /// body's place is given keeps only the place, never a copy of the body.
    #[inline]
    pub fn replay_placed(&mut self, change: Change, place: Option<LogRef>) {
        self.engine.replay_placed(change, place);
    }

    /// Makes sure ids continue above `next` (recovery reads it from a snapshot header).
    #[inline]
    pub fn raise_next_id(&mut self, next: JobId) {
        self.engine.raise_next_id(next);
    }

    /// The id the next job will get.
    #[inline]
    pub fn next_id(&self) -> JobId {
        self.engine.next_id()
    }

    /// Estimated bytes the durable jobs would take in a fresh log.
    #[inline]
    pub fn live_bytes(&self) -> u64 {
        self.engine.live_bytes()
    }

    /// Every durable job as a `Put` change (and every flow as its records), such that
    /// replaying them rebuilds the same queues.
    #[inline]
    pub fn snapshot(&self) -> Vec<Change> {
        self.engine.snapshot()
    }

    /// The ids of every job in the order a snapshot lists them, for copying a snapshot a
    /// chunk at a time with [`EngineCore::snapshot_of_split`].
    #[inline]
    pub fn snapshot_order(&self) -> Vec<JobId> {
        self.engine.snapshot_order()
    }

    /// The snapshot records of those of `ids` that still exist. Panics if a body is only
    /// in the log: such an owner uses [`EngineCore::snapshot_of_split`].
    #[inline]
    pub fn snapshot_of(&self, ids: &[JobId]) -> Vec<Change> {
        self.engine.snapshot_of(ids)
    }

    /// [`EngineCore::snapshot_of`] for jobs whose bodies may be only in the log: those
    /// `Put`s have an empty body, and their index comes back with the body's place, for the
    /// owner to read after letting go of its lock.
    #[inline]
    pub fn snapshot_of_split(&self, ids: &[JobId]) -> (Vec<Change>, Vec<(usize, LogRef)>) {
        self.engine.snapshot_of_split(ids)
    }
}

impl Deref for EngineCore {
    type Target = Engine;
    #[inline]
    fn deref(&self) -> &Engine {
        &self.engine
    }
}

impl DerefMut for EngineCore {
    #[inline]
    fn deref_mut(&mut self) -> &mut Engine {
        &mut self.engine
    }
}
