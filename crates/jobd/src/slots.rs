//! The scheduling core of a jobd worker: per target, a FIFO of accepted jobs, a
//! concurrency limit and a pause flag.
//!
//! Behind the [`Scheduler`] trait so that the engine-backed version (a target = an engine
//! queue, the concurrency = the queue's lease limit, pause = the engine's pause) replaces
//! [`LocalScheduler`] without touching the worker logic. Unlike jobd, a paused target
//! starts nothing: it takes no new rows and holds accepted ones until `continue`.

use std::collections::VecDeque;

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
    /// Queues an accepted job (FIFO per target).
    fn push(&mut self, target: &str, id: u64);
    /// Jobs that may start now, each counted as running from here on.
    fn take_startable(&mut self) -> Vec<Start>;
    /// A running job of `target` ended (or was dropped before starting).
    fn finished(&mut self, target: &str);
    /// Removes every queued (not started) job, for shutdown.
    fn drain_queued(&mut self) -> Vec<u64>;
    /// Jobs running now, all targets.
    fn running(&self) -> usize;
}

#[derive(Debug)]
struct Target {
    name: String,
    concurrency: u32,
    paused: bool,
    running: usize,
    queue: VecDeque<u64>,
}

/// The in-process scheduler used until jobd targets live in the engine.
#[derive(Debug, Default)]
pub struct LocalScheduler {
    targets: Vec<Target>,
}

impl LocalScheduler {
    fn get(&self, name: &str) -> Option<&Target> {
        self.targets.iter().find(|t| t.name == name)
    }
    fn get_mut(&mut self, name: &str) -> Option<&mut Target> {
        self.targets.iter_mut().find(|t| t.name == name)
    }
}

/// Whether JavaScript would treat `s` as an array index (those keys come first, ascending,
/// in a JS object; `status` keeps that order).
fn js_index(s: &str) -> Option<u32> {
    if s == "0" || (!s.starts_with('0') && !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit())) {
        s.parse::<u32>().ok().filter(|n| *n != u32::MAX)
    } else {
        None
    }
}

impl Scheduler for LocalScheduler {
    fn add(&mut self, target: &str, concurrency: u32) -> Result<(), String> {
        if self.get(target).is_some() {
            return Err(format!("target '{target}' already added"));
        }
        self.targets.push(Target {
            name: target.to_string(),
            concurrency,
            paused: false,
            running: 0,
            queue: VecDeque::new(),
        });
        Ok(())
    }

    fn remove(&mut self, target: &str) -> Result<(), String> {
        let t = self
            .get(target)
            .ok_or_else(|| format!("target '{target}' not found"))?;
        if t.running + t.queue.len() > 0 {
            return Err("queue is not empty".into());
        }
        self.targets.retain(|t| t.name != target);
        Ok(())
    }

    fn set_concurrency(&mut self, target: &str, concurrency: u32) -> Result<(), String> {
        let t = self
            .get_mut(target)
            .ok_or_else(|| format!("target '{target}' not found"))?;
        t.concurrency = concurrency;
        Ok(())
    }

    fn serves(&self, target: &str) -> bool {
        self.get(target).is_some()
    }

    fn targets(&self) -> Vec<TargetState> {
        let mut out: Vec<TargetState> = self
            .targets
            .iter()
            .map(|t| TargetState {
                name: t.name.clone(),
                paused: t.paused,
                concurrency: t.concurrency,
                length: t.running + t.queue.len(),
            })
            .collect();
        // Stable: index-like names first by value, the rest keep insertion order.
        out.sort_by_key(|t| js_index(&t.name).map_or((1, 0), |n| (0, n)));
        out
    }

    fn set_paused(&mut self, target: &str, paused: bool) {
        if let Some(t) = self.get_mut(target) {
            t.paused = paused;
        }
    }

    fn free(&self, target: &str) -> u64 {
        match self.get(target) {
            Some(t) if !t.paused => {
                (t.concurrency as usize).saturating_sub(t.running + t.queue.len()) as u64
            }
            _ => 0,
        }
    }

    fn push(&mut self, target: &str, id: u64) {
        if let Some(t) = self.get_mut(target) {
            t.queue.push_back(id);
        }
    }

    fn take_startable(&mut self) -> Vec<Start> {
        let mut out = Vec::new();
        for t in &mut self.targets {
            while !t.paused && t.running < t.concurrency as usize {
                let Some(id) = t.queue.pop_front() else { break };
                t.running += 1;
                out.push(Start {
                    id,
                    target: t.name.clone(),
                });
            }
        }
        out
    }

    fn finished(&mut self, target: &str) {
        if let Some(t) = self.get_mut(target) {
            t.running = t.running.saturating_sub(1);
        }
    }

    fn drain_queued(&mut self) -> Vec<u64> {
        self.targets
            .iter_mut()
            .flat_map(|t| t.queue.drain(..).collect::<Vec<_>>())
            .collect()
    }

    fn running(&self) -> usize {
        self.targets.iter().map(|t| t.running).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn concurrency_fifo_and_pause() {
        let mut s = LocalScheduler::default();
        s.add("a", 2).unwrap();
        assert_eq!(s.free("a"), 2);
        for id in [3, 1, 2] {
            s.push("a", id);
        }
        let started: Vec<u64> = s.take_startable().iter().map(|x| x.id).collect();
        assert_eq!(started, vec![3, 1]);
        assert_eq!(s.free("a"), 0);
        s.set_paused("a", true);
        s.finished("a");
        assert!(s.take_startable().is_empty());
        s.set_paused("a", false);
        assert_eq!(s.take_startable()[0].id, 2);
        assert_eq!(s.remove("a").unwrap_err(), "queue is not empty");
    }

    #[test]
    fn status_order_is_js_object_order() {
        let mut s = LocalScheduler::default();
        for n in ["b", "10", "a", "2", "01"] {
            s.add(n, 1).unwrap();
        }
        let names: Vec<String> = s.targets().into_iter().map(|t| t.name).collect();
        assert_eq!(names, vec!["2", "10", "b", "a", "01"]);
    }

    #[test]
    fn errors_are_jobds() {
        let mut s = LocalScheduler::default();
        s.add("a", 1).unwrap();
        assert_eq!(s.add("a", 1).unwrap_err(), "target 'a' already added");
        assert_eq!(s.remove("x").unwrap_err(), "target 'x' not found");
        assert_eq!(
            s.set_concurrency("x", 1).unwrap_err(),
            "target 'x' not found"
        );
    }
}
