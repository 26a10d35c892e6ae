//! The newest bodies, kept in memory for a while after their records are written.
//!
//! Once a durable job's record is written, its body could be dropped and read back from
//! the log when the job is handed out ([`crate::Body::Log`]). A queue that keeps up with
//! its producers hands a job out right after its put, and reading those back would cost a
//! read per job for nothing. So the bodies the engine learns were written in one turn stay
//! in memory until the next turn that learns of newer ones (up to a budget of bytes), and
//! only then are dropped: a job handed out meanwhile is never read back.
//!
//! Why one turn and not "the newest N bytes": dropping a body costs a lookup of its job and
//! a `free`, and both touch memory; a body of the previous turn is still in the cache, one
//! a megabyte of puts ago is not. Keeping the newest 1 MiB cost +26 to +38 % server CPU per
//! put (cache misses in the job lookup and in `free`, docs/performance.md); one turn costs
//! next to nothing and covers a consumer that keeps up (it reserves within the next write).

use std::collections::VecDeque;

use crate::job::LogRef;
use crate::JobId;

/// Memory an entry costs besides its body: the queue's 16 bytes, and malloc's rounding and
/// header for the body.
const ENTRY_COST: usize = 32;

/// Written bodies still kept in memory, oldest first.
#[derive(Debug, Default)]
pub(crate) struct HotBodies {
    written: VecDeque<(JobId, LogRef)>,
    bytes: usize,
    budget: usize,
}

impl HotBodies {
    pub fn set_budget(&mut self, bytes: usize) {
        self.budget = bytes;
    }

    /// Whether bodies are kept at all (a budget of 0 drops each as soon as it is written).
    pub fn keeps(&self) -> bool {
        self.budget > 0
    }

    /// Notes a written body (the job may end before it is dropped: its entry then counts
    /// until it leaves, so memory stays under the budget rather than at it).
    pub fn push(&mut self, id: JobId, at: LogRef) {
        self.bytes += cost(at);
        self.written.push_back((id, at));
    }

    /// The bodies of earlier turns, all of them, to drop when a new turn's arrive.
    pub fn take_all(&mut self) -> VecDeque<(JobId, LogRef)> {
        self.bytes = 0;
        std::mem::take(&mut self.written)
    }

    /// Gives back the (emptied) queue taken by [`HotBodies::take_all`], keeping its memory.
    pub fn reuse(&mut self, mut spare: VecDeque<(JobId, LogRef)>) {
        if self.written.is_empty() {
            spare.clear();
            self.written = spare;
        }
    }

    /// The oldest written body, if the queue is over its budget.
    pub fn pop_over_budget(&mut self) -> Option<(JobId, LogRef)> {
        if self.bytes <= self.budget {
            return None;
        }
        let (id, at) = self.written.pop_front()?;
        self.bytes -= cost(at);
        Some((id, at))
    }

    /// Bodies in the queue (live or ended), for stats and tests.
    pub fn len(&self) -> usize {
        self.written.len()
    }
}

fn cost(at: LogRef) -> usize {
    at.len() as usize + ENTRY_COST
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_oldest_leave_once_the_budget_is_passed() {
        let mut hot = HotBodies::default();
        hot.set_budget(10 * (100 + ENTRY_COST));
        for id in 1..=10 {
            hot.push(id, LogRef::new(id * 1000, 100).expect("fits"));
            assert_eq!(hot.pop_over_budget(), None, "within the budget");
        }
        hot.push(11, LogRef::new(11_000, 100).expect("fits"));
        let (id, at) = hot.pop_over_budget().expect("over the budget");
        assert_eq!((id, at.pos()), (1, 1000), "the oldest first");
        assert_eq!(hot.pop_over_budget(), None);
        assert_eq!(hot.len(), 10);
    }

    #[test]
    fn a_new_turn_takes_every_body_of_the_earlier_ones() {
        let mut hot = HotBodies::default();
        hot.set_budget(1 << 20);
        hot.push(1, LogRef::new(1000, 100).expect("fits"));
        hot.push(2, LogRef::new(2000, 100).expect("fits"));
        let old = hot.take_all();
        assert_eq!(old.iter().map(|e| e.0).collect::<Vec<_>>(), vec![1, 2]);
        assert_eq!(hot.len(), 0);
        hot.reuse(old);
        hot.push(3, LogRef::new(3000, 100).expect("fits"));
        assert_eq!(hot.pop_over_budget(), None);
        assert_eq!(hot.len(), 1);
    }

    #[test]
    fn empty_bodies_still_count() {
        let mut hot = HotBodies::default();
        hot.set_budget(ENTRY_COST * 2);
        for id in 1..=3 {
            hot.push(id, LogRef::new(id, 0).expect("fits"));
        }
        assert_eq!(hot.pop_over_budget().map(|(id, _)| id), Some(1));
        assert_eq!(hot.pop_over_budget(), None);
    }
}
