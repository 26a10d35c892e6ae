//! One ordered set of everything the engine must do at a point in time.
//!
//! Keeping a single set means the server needs one sleep, until [`Timers::next`], and a
//! lease expires on time whether or not its holder ever speaks again.

use std::collections::BTreeSet;

use crate::{ConnId, JobId, Millis, QueueId};

/// What happens when a timer fires.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Timer {
    /// A delayed job becomes ready.
    Delay(JobId),
    /// A reserved job's lease ends.
    Lease(JobId),
    /// A paused queue resumes.
    Unpause(QueueId),
    /// A rate-limited queue has a token again for its waiters.
    RateToken(QueueId),
    /// A blocked reserve gives up.
    WaitTimeout(ConnId),
    /// A blocked reserve's holder has a lease about to end.
    DeadlineSoon(ConnId),
}

#[derive(Default, Debug)]
pub(crate) struct Timers {
    set: BTreeSet<(Millis, Timer)>,
}

impl Timers {
    pub fn add(&mut self, at: Millis, t: Timer) {
        self.set.insert((at, t));
    }
    pub fn remove(&mut self, at: Millis, t: Timer) {
        self.set.remove(&(at, t));
    }
    pub fn next(&self) -> Option<Millis> {
        self.set.first().map(|(at, _)| *at)
    }
    /// Takes the earliest timer due at or before `now`.
    pub fn pop_due(&mut self, now: Millis) -> Option<(Millis, Timer)> {
        match self.set.first() {
            Some(&(at, _)) if at <= now => self.set.pop_first(),
            _ => None,
        }
    }
}
