//! The scheduling core of a jobd worker: per target, a FIFO of accepted jobs, a
//! concurrency limit and a pause flag.
//!
//! Behind the [`Scheduler`] trait so that the worker logic (poll loop, table writes,
//! run-manual, launcher) does not depend on where targets live; the implementation is
//! `engine_slots::EngineScheduler` (a target = an engine queue, the concurrency = the
//! queue's lease limit, pause = the engine's pause). Unlike jobd, a paused target starts
//! nothing: it takes no new rows and holds accepted ones until `continue`.

use std::sync::Arc;

use jobyard_broker::{Broker, Mailbox};

use crate::launcher::Outcome;

/// One target as `status` reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TargetState {
    /// Name.
    pub name: String,
    /// Whether starting jobs is paused.
    pub paused: bool,
    /// Most jobs running at once.
    pub concurrency: u32,
    /// Jobs running plus jobs accepted but not started.
    pub length: usize,
}

/// A job the scheduler allows to start now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Start {
    /// Row id.
    pub id: u64,
    /// Its target.
    pub target: String,
    /// The engine job that stands for the row while it is accepted or running (its lease
    /// is the running slot).
    pub job: u64,
}

/// Targets, their queues and limits. Errors are jobd's client-visible strings.
pub trait Scheduler: Send + 'static {
    /// Adds a target; `target '<t>' already added` if it exists.
    fn add(&mut self, target: &str, concurrency: u32) -> Result<(), String>;
    /// Removes an idle target; `target '<t>' not found`, `queue is not empty`.
    fn remove(&mut self, target: &str) -> Result<(), String>;
    /// Changes a target's limit; takes effect for the next start.
    fn set_concurrency(&mut self, target: &str, concurrency: u32) -> Result<(), String>;
    /// Whether this worker serves `target`.
    fn serves(&self, target: &str) -> bool;
    /// Every target, in the order `status` lists them.
    fn targets(&self) -> Vec<TargetState>;
    /// Stops or resumes starting jobs of `target`.
    fn set_paused(&mut self, target: &str, paused: bool);
    /// How many more rows the target can take now (0 when paused or full).
    fn free(&self, target: &str) -> u64;
    /// The target's limit of jobs at once (0 if it is not served): with [`Scheduler::free`],
    /// how full it is, which decides whether a fetch waits for more free slots.
    fn concurrency(&self, target: &str) -> u64;
    /// Queues an accepted job (FIFO per target).
    fn push(&mut self, target: &str, id: u64);
    /// Jobs that may start now, each counted as running from here on.
    fn take_startable(&mut self) -> Vec<Start>;
    /// A started job ended: with the launcher's outcome, or `None` when it was dropped
    /// before its launcher ran. Frees its slot and tells the engine's watchers.
    fn finished(&mut self, start: &Start, outcome: Option<&Outcome>);
    /// A started job's launcher is running as process `pid` with `command` (for the
    /// operator's view of running processes; the end is [`Scheduler::finished`]).
    fn launched(&mut self, _start: &Start, _pid: i32, _command: Vec<String>) {}
    /// Removes every queued (not started) job, for shutdown.
    fn drain_queued(&mut self) -> Vec<u64>;
    /// Jobs running now, all targets.
    fn running(&self) -> usize;
    /// Where the scheduler says that jobs it held back may start now (a slot was freed by
    /// someone else, a pause ended): the worker calls `take_startable` on each notice.
    /// Taken once, by the worker.
    fn take_wakeups(&mut self) -> Option<Mailbox> {
        None
    }
    /// The broker whose metrics registry the worker reports to (`/metrics` of `jobyard
    /// serve`); `None` keeps the figures in a registry of the worker's own.
    fn registry(&self) -> Option<Arc<Broker>> {
        None
    }
}

/// Whether JavaScript would treat `s` as an array index (those keys come first, ascending,
/// in a JS object; `status` keeps that order).
pub(crate) fn js_index(s: &str) -> Option<u32> {
    if s == "0" || (!s.starts_with('0') && !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit())) {
        s.parse::<u32>().ok().filter(|n| *n != u32::MAX)
    } else {
        None
    }
}

/// Sorts targets as `status` lists them: index-like names first by value, the rest keep
/// insertion order (stable sort).
pub(crate) fn in_status_order(targets: &mut [TargetState]) {
    targets.sort_by_key(|t| js_index(&t.name).map_or((1, 0), |n| (0, n)));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_order_is_js_object_order() {
        let mut targets: Vec<TargetState> = ["b", "10", "a", "2", "01"]
            .into_iter()
            .map(|n| TargetState {
                name: n.into(),
                paused: false,
                concurrency: 1,
                length: 0,
            })
            .collect();
        in_status_order(&mut targets);
        let names: Vec<String> = targets.into_iter().map(|t| t.name).collect();
        assert_eq!(names, vec!["2", "10", "b", "a", "01"]);
    }
}
