//! READY and WAKE (docs/wmp.md "Manager behaviour", decision 1).
//!
//! How the manager learns that a job became ready: while no watched queue has a ready job,
//! its session holds a wake-only engine wait on the queues its remembered workers serve (the
//! wait Gearman's PRE_SLEEP uses), so a put, a delay ending, a release or an expired lease in
//! any of them ends the wait with a `Wake` notice. While ready jobs wait for workers, the
//! engine cannot say when more arrive, so the manager runs a wake pass every [`POLL`]
//! instead; the pass also settles owed wakes (every matching worker woken too recently).

use std::collections::HashSet;
use std::time::{Duration, Instant};

use jobyard_broker::{Broker, Txn};
use jobyard_engine::{Lease, QueueId, ReserveOutcome, WaitMode};
use jobyard_wmp_wire::headers::Headers;
use jobyard_wmp_wire::message::{Command, Path, Ready, Wake};

use crate::counters::{self, Counter};
use crate::manager::{Armed, Manager, OutKind};
use crate::registry::ReadyOutcome;

/// How often the manager looks for ready jobs while some wait for a worker.
pub(crate) const POLL: Duration = Duration::from_millis(50);

/// Most queues one wait covers; READYs may name more (their own READY retries then find
/// those queues' jobs, decision 1).
pub(crate) const MAX_WATCHED_QUEUES: usize = 1024;

/// A queue name that can travel in a header (any-queue workers see every queue).
fn header_name(name: &[u8]) -> Option<&str> {
    std::str::from_utf8(name)
        .ok()
        .filter(|n| !n.is_empty() && !n.contains(',') && Headers::is_valid_value(n))
}

/// The first of `roles` (any queue when `None`) with a job ready to hand out now.
fn first_ready(txn: &Txn<'_>, roles: Option<&[String]>, now: u64) -> Option<String> {
    let ready = |q: QueueId| txn.has_ready(&[q], now);
    match roles {
        Some(roles) => roles
            .iter()
            .find(|r| txn.queue_id(r.as_bytes()).is_some_and(ready))
            .cloned(),
        None => txn
            .queues()
            .filter_map(|q| header_name(&q.name))
            .find(|n| txn.queue_id(n.as_bytes()).is_some_and(ready))
            .map(str::to_owned),
    }
}

impl Manager {
    /// READY: remember (or refresh) the path and WAKE it at once if one of its queues has
    /// a ready job and it was not woken within the interval.
    pub(crate) fn on_ready(&mut self, path: Path, ready: Ready) {
        self.publish_ready(&path, &ready);
        let now = Instant::now();
        let offer = match self.registry.on_ready(&path, &ready, now) {
            ReadyOutcome::Full => {
                counters::count(&self.metrics, Counter::RegistryFull);
                return;
            }
            ReadyOutcome::New { offer } | ReadyOutcome::Refreshed { offer } => offer,
        };
        if !self.watches(ready.roles.as_deref()) {
            self.pass_at = Some(now);
        }
        if offer {
            let queue = first_ready(&self.broker.lock(), ready.roles.as_deref(), Broker::now());
            if let Some(queue) = queue {
                self.registry.mark_woken(&path, now);
                self.wake(path, queue);
            }
        }
    }

    /// Whether the current wait (or polling) already covers these roles.
    fn watches(&self, roles: Option<&[String]>) -> bool {
        match (&self.armed, roles) {
            (None, _) => true,
            (Some(a), _) if a.any => true,
            (Some(_), None) => false,
            (Some(a), Some(roles)) => roles.iter().all(|r| a.names.contains(r)),
        }
    }

    fn wake(&mut self, path: Path, queue: String) {
        let wake = Wake {
            queue: Some(queue),
            manager: Some(self.name.clone()),
        };
        self.send(path.clone(), Command::Wake(wake), OutKind::Wake(path));
        counters::count(&self.metrics, Counter::Wake);
    }

    /// Wakes workers of every watched queue that has ready jobs (at most two per job, least
    /// recently woken first), forgets expired READYs, then either waits in the engine for
    /// the next ready job or, if jobs are still waiting for workers, polls again soon.
    pub(crate) fn pass(&mut self) {
        let now_i = Instant::now();
        let now = Broker::now();
        self.pass_at = None;
        self.registry.due_wakes(now_i);
        self.registry.expire(now_i);
        let mut wakes = Vec::new();
        let mut backlog = false;
        let mut txn = self.broker.lock();
        let mut names: Vec<String> = self
            .registry
            .queues()
            .take(MAX_WATCHED_QUEUES)
            .map(str::to_owned)
            .collect();
        let any = self.registry.serves_any();
        if any {
            let known: HashSet<String> = names.iter().cloned().collect();
            let more: Vec<String> = txn
                .queues()
                .filter_map(|q| header_name(&q.name))
                .filter(|n| !known.contains(*n))
                .map(str::to_owned)
                .collect();
            names.extend(more);
            names.truncate(MAX_WATCHED_QUEUES);
        }
        let mut queues = Vec::with_capacity(names.len());
        for name in &names {
            let q = txn.queue_id_or_create(name.as_bytes());
            txn.add_consumer(q);
            queues.push(q);
            if txn.has_ready(&[q], now) {
                backlog = true;
                let ready = txn.queue(q).ready_len();
                for path in self.registry.wake_candidates(name, ready, now_i) {
                    wakes.push((path, name.clone()));
                }
            }
        }
        // The old wait ends first, so a queue it alone kept is dropped when its pin goes;
        // the new set is pinned before the old one is let go, so no queue in both is dropped.
        txn.cancel_wait(self.conn);
        for q in std::mem::replace(&mut self.pinned, queues.clone()) {
            txn.remove_consumer(q);
        }
        self.armed = None;
        if backlog {
            self.pass_at = Some(now_i + POLL);
        } else if !queues.is_empty() {
            let outcome = txn.reserve(
                self.conn,
                &queues,
                WaitMode::WakeOnly,
                Lease::Unlimited,
                None,
                false,
                now,
            );
            if outcome == ReserveOutcome::Available {
                self.pass_at = Some(now_i + POLL);
            } else {
                self.armed = Some(Armed {
                    names: names.into_iter().collect(),
                    any,
                });
            }
        } else {
            // Nobody to wake: nothing to watch until a READY arrives.
            self.armed = Some(Armed::default());
        }
        txn.commit();
        for (path, queue) in wakes {
            self.wake(path, queue);
        }
    }
}
