//! How long each lease lasts until its job completes, for the operator's lease-to-complete
//! histogram (`jobyard_lease_to_complete_seconds` on `/metrics`).
//!
//! The engine reads no clock, and its own time (`now`, milliseconds) is too coarse for jobs
//! that take a hundred microseconds. So the caller stamps leases: a lease made by an
//! operation is unstamped until the caller's next [`Engine::stamp_leases`], which the broker
//! calls with its monotonic microsecond clock when it commits a transaction that made or
//! ended a lease (a transaction that only puts never reads the clock). When a lease ends with
//! its job completed, the engine records a [`LeaseEnd`] with the lease's stamp; the caller
//! takes it ([`Engine::take_lease_ends`]) and subtracts.
//!
//! The stamp lives with the lease, in the holder session's table of held jobs, never in the
//! [`crate::Job`]: a ready job pays nothing for it (memory per queued job is a product target).
//!
//! What counts as completed: the holder finishes the job ok, deletes it, or moves it on (a
//! route, a flow stage's completion): outcome `ok`; the holder finishes it failed, buries
//! it, or fails a flow stage: outcome `failed`. A release, an expiry or a disconnect is not
//! a completion: the job is handed out again and its next lease is timed from that lease's
//! own start. A touch (or a flow heartbeat) extends the same lease, so the start stays.
//! Leases are not logged, so a restart ends them all; a job's first lease after a restart
//! is timed from that lease.

use bytes::Bytes;

use crate::queue::QueueId;
use crate::{ConnId, Engine, JobId};

/// The stamp of a lease made since the caller last stamped.
pub(crate) const UNSTAMPED: u64 = u64::MAX;

/// How a completed lease ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LeaseOutcome {
    /// Finished ok, deleted by its holder, or moved on to its next stage.
    Ok,
    /// Finished failed, buried by its holder, or a failed flow stage.
    Failed,
}

impl LeaseOutcome {
    /// The label value on `/metrics`.
    pub fn as_str(self) -> &'static str {
        match self {
            LeaseOutcome::Ok => "ok",
            LeaseOutcome::Failed => "failed",
        }
    }
}

/// A lease that ended with its job completed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaseEnd {
    /// The queue the job was leased from (its id may be reused once the queue is gone, so
    /// the name is what identifies it).
    pub queue_id: QueueId,
    pub queue: Bytes,
    pub outcome: LeaseOutcome,
    /// The lease's stamp; `None` when it began and ended between two stamps (in one
    /// transaction): it lasted no measurable time.
    pub started: Option<u64>,
}

/// The engine's side of lease timing: off unless the caller asks for it, so an engine
/// nobody stamps keeps nothing.
#[derive(Debug, Default)]
pub(crate) struct LeaseTiming {
    pub(crate) on: bool,
    /// Leases made since the last stamp.
    pub(crate) unstamped: Vec<(ConnId, JobId)>,
    /// Completed leases not taken yet.
    pub(crate) ends: Vec<LeaseEnd>,
    /// Every ended lease not taken yet, with how it ended ([`crate::attempts`]); the caller
    /// takes them after each operation, whatever [`Engine::has_lease_timing_work`] says.
    pub(crate) closed: Vec<crate::LeaseClosed>,
}

impl Engine {
    /// Starts (or stops) timing leases. The caller then calls [`Engine::stamp_leases`] after
    /// operations while [`Engine::has_lease_timing_work`] says so, and takes the ends.
    pub(crate) fn time_leases(&mut self, on: bool) {
        self.timing.on = on;
        if !on {
            self.timing.unstamped.clear();
            self.timing.ends.clear();
            self.timing.closed.clear();
        }
    }

    /// Whether leases wait for a stamp or completed leases wait to be taken: only then does
    /// the caller need to read its clock.
    pub(crate) fn has_lease_timing_work(&self) -> bool {
        !self.timing.unstamped.is_empty() || !self.timing.ends.is_empty()
    }

    /// Stamps the leases made since the last call with `now` (the caller's monotonic clock,
    /// any unit; the broker uses microseconds).
    pub(crate) fn stamp_leases(&mut self, now: u64) {
        let now = now.min(UNSTAMPED - 1);
        for (conn, id) in self.timing.unstamped.drain(..) {
            let stamp = self
                .sessions
                .get_mut(&conn)
                .and_then(|s| s.reserved.get_mut(&id));
            if let Some(stamp) = stamp {
                if *stamp == UNSTAMPED {
                    *stamp = now;
                }
            }
        }
    }

    /// Takes the leases that ended with their job completed since the last call, in order.
    pub(crate) fn take_lease_ends(&mut self) -> std::vec::Drain<'_, LeaseEnd> {
        self.timing.ends.drain(..)
    }

    /// The stamp of the lease on job `id`: `None` unless the job is leased and its lease
    /// has been stamped.
    pub fn lease_started(&self, id: JobId) -> Option<u64> {
        let job = self.jobs.get(&id)?;
        if job.state != crate::JobState::Reserved {
            return None;
        }
        let stamp = *self.sessions.get(&job.owner)?.reserved.get(&id)?;
        (stamp != UNSTAMPED).then_some(stamp)
    }

    /// The stamp a new lease starts with (and notes it for the next stamping).
    pub(crate) fn new_lease_stamp(&mut self, conn: ConnId, id: JobId) -> u64 {
        if self.timing.on {
            self.timing.unstamped.push((conn, id));
        }
        UNSTAMPED
    }

    /// Records that a lease stamped `stamp` (`None`: the job was not leased) ended with its
    /// job completed. Call while queue `q` still exists.
    pub(crate) fn lease_completed(
        &mut self,
        q: QueueId,
        stamp: Option<u64>,
        outcome: LeaseOutcome,
    ) {
        let Some(stamp) = stamp else {
            return;
        };
        if !self.timing.on {
            return;
        }
        let queue = self.queue(q).name.clone();
        self.timing.ends.push(LeaseEnd {
            queue_id: q,
            queue,
            outcome,
            started: (stamp != UNSTAMPED).then_some(stamp),
        });
    }

    /// As [`Engine::lease_completed`] for a job still held (a flow transition reads the
    /// stamp before it takes the job out).
    pub(crate) fn held_lease_completed(&mut self, id: JobId, outcome: LeaseOutcome) {
        if !self.timing.on {
            return;
        }
        let Some(job) = self.jobs.get(&id) else {
            return;
        };
        if job.state != crate::JobState::Reserved {
            return;
        }
        let q = job.queue;
        let stamp = self
            .sessions
            .get(&job.owner)
            .and_then(|s| s.reserved.get(&id))
            .copied();
        self.lease_completed(q, stamp, outcome);
    }
}
