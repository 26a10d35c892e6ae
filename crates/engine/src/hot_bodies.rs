//! The newest bodies, kept in memory for a while after their records are written.
//!
//! Once a durable job's record is written, its body could be dropped and read back from
//! the log when the job is handed out ([`crate::Body::Log`]). A queue that keeps up with
//! its producers hands a job out right after its put, and reading those back would cost a
//! read per job for nothing. So the bodies the engine learns were written in one turn stay
//! in memory until a later turn learns of newer ones (up to a budget of bytes), and only
//! then are dropped: a job handed out meanwhile is never read back.
//!
//! How long "until a later turn" is: at least the newest turn's bodies stay, and with them
//! earlier ones up to [`KEEP_AT_LEAST`] bodies in all. Dropping a body costs a lookup of
//! its job and a `free`, and both touch memory; a body of the previous turn is still in
//! the cache, one a megabyte of puts ago is not. Keeping the newest 1 MiB cost +26 to +38 %
//! server CPU per put (cache misses in the job lookup and in `free`, docs/performance.md),
//! while a busy turn's many bodies fill the floor by themselves, so pipelined puts keep
//! just their last turn as before. At moderate load a turn is one put: keeping only that
//! one read a quarter of the bodies back (another producer's put turned over the hot set
//! before the consumer of the first was served); the floor keeps them all.

use std::collections::VecDeque;

use crate::job::LogRef;
use crate::JobId;

/// However small the turns, the newest this many written bodies stay (within the budget).
pub(crate) const KEEP_AT_LEAST: usize = 64;

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

    /// The oldest body of an earlier turn, if more than the newest turn's `newest` bodies
    /// and more than [`KEEP_AT_LEAST`] are kept.
    pub fn pop_earlier(&mut self, newest: usize) -> Option<(JobId, LogRef)> {
        if self.written.len() <= newest.max(KEEP_AT_LEAST) {
            return None;
        }
        let (id, at) = self.written.pop_front()?;
        self.bytes -= cost(at);
        Some((id, at))
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
    fn a_new_turn_leaves_the_newest_bodies_of_earlier_turns_up_to_the_floor() {
        let mut hot = HotBodies::default();
        hot.set_budget(1 << 20);
        let place = |id: u64| LogRef::new(id * 1000, 100).expect("fits");
        // Small turns: earlier bodies stay until the floor is passed, then the oldest go.
        for id in 1..=KEEP_AT_LEAST as u64 + 5 {
            hot.push(id, place(id));
            let mut gone = Vec::new();
            while let Some((id, _)) = hot.pop_earlier(1) {
                gone.push(id);
            }
            let expected: Vec<u64> = (id > KEEP_AT_LEAST as u64)
                .then(|| id - KEEP_AT_LEAST as u64)
                .into_iter()
                .collect();
            assert_eq!(gone, expected, "after body {id}");
        }
        assert_eq!(hot.len(), KEEP_AT_LEAST);
        // A turn larger than the floor keeps itself and nothing earlier.
        let big = KEEP_AT_LEAST as u64 * 2;
        for id in 1000..1000 + big {
            hot.push(id, place(id));
        }
        let mut gone = 0;
        while let Some((id, _)) = hot.pop_earlier(big as usize) {
            assert!(id < 1000, "only earlier turns' bodies go");
            gone += 1;
        }
        assert_eq!(gone, KEEP_AT_LEAST);
        assert_eq!(hot.len(), big as usize);
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
