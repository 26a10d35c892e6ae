//! Paged views of a queue's jobs for operators (dashboards, admin commands, `jobyard ctl`).
//!
//! A page is taken under the engine lock, so it must cost what it returns, not what the
//! queue holds: each state's own ordered index is read from a cursor on. Callers that need
//! everything (Gearman's `show jobs`) take page after page, letting other work run between.

use std::collections::BTreeSet;
use std::ops::Bound;

use crate::job::JobState;
use crate::queue::QueueId;
use crate::{Engine, JobId};

/// Where a page ended, in the order of the state listed; pass it back for the next page.
/// Opaque: it is a position (priority or time, then id), not a job, so a job that moved
/// meanwhile does not break the walk.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct Cursor(pub u64, pub JobId);

/// One page of a listing.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Page {
    /// Jobs in the state's order: ready by (priority, id), delayed by ready time, buried in
    /// burial order, reserved by id.
    pub ids: Vec<JobId>,
    /// Where to continue, if there may be more.
    pub next: Option<Cursor>,
}

impl Engine {
    /// Up to `limit` jobs of a queue in `state`, after `after` (from the start if `None`).
    pub fn list(&self, q: QueueId, state: JobState, after: Option<Cursor>, limit: usize) -> Page {
        if limit == 0 {
            return Page::default();
        }
        let queue = self.queue(q);
        let keys: Vec<Cursor> = match state {
            JobState::Ready => {
                let from = after.map(|c| (c.0.min(u32::MAX as u64) as u32, c.1));
                range_after(&queue.ready, from, limit, |&(p, id)| Cursor(p as u64, id))
            }
            JobState::Delayed => range_after(
                &queue.delayed,
                after.map(|c| (c.0, c.1)),
                limit,
                |&(t, id)| Cursor(t, id),
            ),
            JobState::Buried => range_after(
                &queue.buried,
                after.map(|c| (c.0, c.1)),
                limit,
                |&(s, id)| Cursor(s, id),
            ),
            JobState::Reserved => {
                // Leases are indexed by holder, not by queue: gather this queue's (few).
                let mut held: Vec<Cursor> = self
                    .sessions
                    .values()
                    .flat_map(|s| s.reserved.keys())
                    .filter(|id| self.jobs.get(id).is_some_and(|j| j.queue == q))
                    .map(|&id| Cursor(0, id))
                    .collect();
                held.sort_unstable();
                page_of(held.into_iter(), after, limit)
            }
        };
        let next = (keys.len() == limit).then(|| *keys.last().expect("limit > 0"));
        Page {
            ids: keys.iter().map(|c| c.1).collect(),
            next,
        }
    }

    /// The ids of every job, unordered. Copies keys only (never touches the jobs), so an
    /// admin command can sort them outside the lock and read the jobs a chunk at a time.
    pub fn job_ids(&self) -> Vec<JobId> {
        self.jobs.keys().copied().collect()
    }
}

/// The first `limit` keys of an ordered set that come after `after`, found by a range
/// query so a page deep into a long queue costs no more than the first.
fn range_after<K: Ord + Copy>(
    set: &BTreeSet<K>,
    after: Option<K>,
    limit: usize,
    cursor: impl Fn(&K) -> Cursor,
) -> Vec<Cursor> {
    match after {
        None => set.iter().take(limit).map(cursor).collect(),
        Some(a) => set
            .range((Bound::Excluded(a), Bound::Unbounded))
            .take(limit)
            .map(cursor)
            .collect(),
    }
}

/// The first `limit` keys of an ordered iterator that come after `after`.
fn page_of(keys: impl Iterator<Item = Cursor>, after: Option<Cursor>, limit: usize) -> Vec<Cursor> {
    match after {
        None => keys.take(limit).collect(),
        Some(a) => keys.skip_while(|k| *k <= a).take(limit).collect(),
    }
}
