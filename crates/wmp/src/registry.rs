//! Remembered READYs and wake throttling (docs/wmp.md "Manager behaviour", decision 1):
//! one entry per worker path, consumed by TAKE, forgotten after `ready_ttl`; at most one
//! WAKE per path per `wake_interval`, and a queue whose workers were all woken too recently
//! *owes* a wake that [`ReadyRegistry::due_wakes`] hands back when the interval ends.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use jobyard_wmp_wire::message::{Path, Ready};

/// Timers and bounds of the registry.
#[derive(Debug, Clone, Copy)]
pub struct RegistryConfig {
    /// Forget a READY not refreshed for this long (90 s).
    pub ready_ttl: Duration,
    /// At most one WAKE per path per interval (1 s).
    pub wake_interval: Duration,
    /// Most remembered paths; READYs from new paths beyond it are refused (100 000).
    pub max_entries: usize,
}

impl Default for RegistryConfig {
    fn default() -> Self {
        RegistryConfig {
            ready_ttl: Duration::from_secs(90),
            wake_interval: Duration::from_secs(1),
            max_entries: 100_000,
        }
    }
}

/// What a READY did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadyOutcome {
    /// A new path is remembered. `offer`: look for a ready job in its roles and WAKE now.
    New {
        /// Always true for a new path; kept for symmetry with `Refreshed`.
        offer: bool,
    },
    /// A known path was refreshed. `offer`: its last WAKE is older than `wake_interval`, so
    /// WAKE it if one of its queues has a ready job (the READY retry doubles as a poll).
    Refreshed {
        /// See above.
        offer: bool,
    },
    /// The registry is full: dropped and counted.
    Full,
}

#[derive(Debug)]
struct Entry {
    roles: Option<Vec<String>>,
    last_seen: Instant,
    last_wake: Option<Instant>,
}

/// The manager's remembered READYs.
#[derive(Debug, Default)]
pub struct ReadyRegistry {
    config: RegistryConfig,
    entries: HashMap<Path, Entry>,
    by_queue: HashMap<String, HashSet<Path>>,
    any_queue: HashSet<Path>,
    owed: HashMap<String, Instant>,
}

impl ReadyRegistry {
    /// An empty registry.
    pub fn new(config: RegistryConfig) -> Self {
        ReadyRegistry {
            config,
            ..Default::default()
        }
    }

    /// Number of remembered paths.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True when nothing is remembered.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The roles remembered for `path`: `None` if not remembered, `Some(None)` for "any".
    pub fn roles(&self, path: &Path) -> Option<Option<&[String]>> {
        self.entries.get(path).map(|e| e.roles.as_deref())
    }

    /// The queues named by remembered READYs, each once (what the manager watches for
    /// ready jobs).
    pub fn queues(&self) -> impl Iterator<Item = &str> + '_ {
        self.by_queue.keys().map(String::as_str)
    }

    /// True when a remembered READY has no `roles` (it serves any queue).
    pub fn serves_any(&self) -> bool {
        !self.any_queue.is_empty()
    }

    /// Records a READY from `path`.
    pub fn on_ready(&mut self, path: &Path, ready: &Ready, now: Instant) -> ReadyOutcome {
        if let Some(entry) = self.entries.get(path) {
            let old_roles = entry.roles.clone();
            let last_wake = entry.last_wake;
            if old_roles != ready.roles {
                self.unindex(path, &old_roles);
                self.index(path, &ready.roles);
            }
            let entry = self.entries.get_mut(path).expect("present");
            entry.roles = ready.roles.clone();
            entry.last_seen = now;
            let offer =
                !matches!(last_wake, Some(t) if now.duration_since(t) < self.config.wake_interval);
            return ReadyOutcome::Refreshed { offer };
        }
        if self.entries.len() >= self.config.max_entries {
            return ReadyOutcome::Full;
        }
        self.index(path, &ready.roles);
        self.entries.insert(
            path.clone(),
            Entry {
                roles: ready.roles.clone(),
                last_seen: now,
                last_wake: None,
            },
        );
        ReadyOutcome::New { offer: true }
    }

    /// Records that `path` was sent a WAKE now (after an `offer`).
    pub fn mark_woken(&mut self, path: &Path, now: Instant) {
        if let Some(e) = self.entries.get_mut(path) {
            e.last_wake = Some(now);
        }
    }

    /// `path` answered a WAKE with a GIVE that got NO: its wake throttle restarts, so it
    /// may be woken again at once (decision 14). The interval keeps WAKEs from piling up
    /// on a worker that does not answer; one that answered is waiting for work.
    pub fn answered(&mut self, path: &Path) {
        if let Some(e) = self.entries.get_mut(path) {
            e.last_wake = None;
        }
    }

    /// Paths to WAKE because queue `queue` has `ready_jobs` ready jobs: remembered workers
    /// serving it and not woken within `wake_interval`, least recently woken first, at most
    /// `2 × ready_jobs`. Marks them woken. If matching workers exist but all were woken too
    /// recently, the queue owes a wake (see [`ReadyRegistry::due_wakes`]).
    pub fn wake_candidates(&mut self, queue: &str, ready_jobs: usize, now: Instant) -> Vec<Path> {
        if ready_jobs == 0 {
            self.owed.remove(queue);
            return Vec::new();
        }
        let interval = self.config.wake_interval;
        let matching = self
            .by_queue
            .get(queue)
            .into_iter()
            .flatten()
            .chain(self.any_queue.iter());
        let mut eligible: Vec<(Option<Instant>, &Path)> = Vec::new();
        let mut earliest_again: Option<Instant> = None;
        for path in matching {
            let last = self.entries[path].last_wake;
            match last {
                Some(t) if now.duration_since(t) < interval => {
                    let again = t + interval;
                    earliest_again = Some(earliest_again.map_or(again, |e: Instant| e.min(again)));
                }
                _ => eligible.push((last, path)),
            }
        }
        eligible.sort_by_key(|(last, _)| *last);
        let chosen: Vec<Path> = eligible
            .into_iter()
            .take(ready_jobs.saturating_mul(2))
            .map(|(_, p)| p.clone())
            .collect();
        for path in &chosen {
            self.entries.get_mut(path).expect("indexed").last_wake = Some(now);
        }
        match (chosen.is_empty(), earliest_again) {
            (true, Some(at)) => {
                let slot = self.owed.entry(queue.to_owned()).or_insert(at);
                *slot = (*slot).min(at);
            }
            _ => {
                self.owed.remove(queue);
            }
        }
        chosen
    }

    /// Queues whose owed wake is due: call [`ReadyRegistry::wake_candidates`] for each
    /// that still has ready jobs.
    pub fn due_wakes(&mut self, now: Instant) -> Vec<String> {
        let due: Vec<String> = self
            .owed
            .iter()
            .filter(|(_, at)| **at <= now)
            .map(|(q, _)| q.clone())
            .collect();
        for q in &due {
            self.owed.remove(q);
        }
        due
    }

    /// A TAKE was sent to `path`: its READY is consumed (the worker sends a new one if it
    /// has room).
    pub fn consume(&mut self, path: &Path) {
        self.forget(path);
    }

    /// Forgets `path` (consumed, or its first hop is gone).
    pub fn forget(&mut self, path: &Path) {
        if let Some(e) = self.entries.remove(path) {
            self.unindex(path, &e.roles);
        }
    }

    /// Forgets READYs not refreshed within `ready_ttl`; returns how many.
    pub fn expire(&mut self, now: Instant) -> usize {
        let ttl = self.config.ready_ttl;
        let stale: Vec<Path> = self
            .entries
            .iter()
            .filter(|(_, e)| now.duration_since(e.last_seen) >= ttl)
            .map(|(p, _)| p.clone())
            .collect();
        for p in &stale {
            self.forget(p);
        }
        stale.len()
    }

    /// The next instant something is due: an owed wake or a READY expiry.
    pub fn next_deadline(&self) -> Option<Instant> {
        let owed = self.owed.values().min().copied();
        let expiry = self
            .entries
            .values()
            .map(|e| e.last_seen + self.config.ready_ttl)
            .min();
        match (owed, expiry) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    fn index(&mut self, path: &Path, roles: &Option<Vec<String>>) {
        match roles {
            None => {
                self.any_queue.insert(path.clone());
            }
            Some(roles) => {
                for r in roles {
                    self.by_queue
                        .entry(r.clone())
                        .or_default()
                        .insert(path.clone());
                }
            }
        }
    }

    fn unindex(&mut self, path: &Path, roles: &Option<Vec<String>>) {
        match roles {
            None => {
                self.any_queue.remove(path);
            }
            Some(roles) => {
                for r in roles {
                    if let Some(set) = self.by_queue.get_mut(r) {
                        set.remove(path);
                        if set.is_empty() {
                            self.by_queue.remove(r);
                        }
                    }
                }
            }
        }
    }
}
