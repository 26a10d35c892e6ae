//! Rebuilding the engine from the log, and describing it for a snapshot.

use std::collections::HashSet;

use bytes::Bytes;

use crate::change::{Change, PutState};
use crate::job::{Body, Job, JobState, LogRef};
use crate::policy::POLICIES_SLOT;
use crate::{Engine, JobId};

impl Engine {
    /// Applies one change read back from the log. Reservations are not logged, so a job
    /// comes back ready, delayed or buried; changes to unknown jobs are ignored.
    pub(crate) fn replay(&mut self, change: Change) {
        self.replay_placed(change, None);
    }

    /// [`Engine::replay`] for a caller that keeps bodies only in the log: a `Put` whose
    /// body's place is given keeps only the place (see [`Engine::body_written`]), without
    /// ever holding a copy of the body.
    pub(crate) fn replay_placed(&mut self, change: Change, place: Option<LogRef>) {
        // Replaying is never itself a change: what forgetting a queue would log is dropped.
        let logged = self.changes.len();
        match change {
            Change::Put {
                id,
                queue,
                pri,
                ttr,
                delay,
                created,
                state,
                unique,
                attrs,
                attempt,
                body,
            } => {
                if self.jobs.contains_key(&id) {
                    let old = self.remove_job(id);
                    self.drop_queue_if_unreferenced(old.queue);
                }
                let q = self.queue_id_or_create(&queue);
                self.insert_job(
                    id,
                    q,
                    pri,
                    ttr,
                    delay,
                    created,
                    state,
                    match place {
                        Some(at) if at.len() as usize == body.len() => Body::Log(at),
                        _ => Body::Mem(Box::from(&body[..])),
                    },
                    true,
                );
                if let Some(key) = unique {
                    self.set_unique(id, q, key);
                }
                if let Some(attrs) = attrs {
                    self.attrs.insert(id, attrs);
                }
                if attempt > 0 {
                    self.jobs.get_mut(&id).expect("just inserted").reserves = attempt;
                    self.fenced.insert(id);
                }
                self.next_id = self.next_id.max(id + 1);
            }
            Change::Attempt { id, attempt } => {
                if let Some(job) = self.jobs.get_mut(&id) {
                    job.reserves = job.reserves.max(attempt);
                    self.fenced.insert(id);
                }
            }
            Change::Delete { id } | Change::End { id, .. } => {
                if self.jobs.contains_key(&id) {
                    let old = self.remove_job(id);
                    self.drop_queue_if_unreferenced(old.queue);
                }
            }
            Change::Release { id, pri, ready_at } => {
                if self.jobs.contains_key(&id) {
                    self.leave_state(id);
                    let job = self.jobs.get_mut(&id).expect("checked");
                    job.pri = pri;
                    if ready_at > 0 {
                        self.enter_delayed(id, ready_at);
                    } else {
                        self.enter_ready(id);
                    }
                }
            }
            Change::Bury { id, pri } => {
                if self.jobs.contains_key(&id) {
                    self.leave_state(id);
                    self.jobs.get_mut(&id).expect("checked").pri = pri;
                    self.enter_buried(id);
                }
            }
            Change::Kick { id } => {
                if self.jobs.contains_key(&id) {
                    self.leave_state(id);
                    self.enter_ready(id);
                }
            }
            Change::Route {
                id,
                queue,
                pri,
                attrs,
            } => {
                if let Some(from) = self.jobs.get(&id).map(|j| j.queue) {
                    self.leave_state(id);
                    let to = self.queue_id_or_create(&queue);
                    self.move_to(id, to, pri, attrs);
                    self.drop_queue_if_unreferenced(from);
                }
            }
            Change::Flow(bytes) => self.replay_flow(&bytes),
            Change::Policy { queue, policy } => self.replay_policy(&queue, policy),
            Change::Failures { id, history } => self.replay_failures(id, history),
            Change::Schedule { name, schedule } => self.replay_schedule(name, schedule),
        }
        self.changes.truncate(logged);
        self.to_serve.clear();
    }

    /// Makes sure ids continue above `next` (recovery reads it from a snapshot header).
    pub(crate) fn raise_next_id(&mut self, next: JobId) {
        self.next_id = self.next_id.max(next);
    }

    /// Every durable job as a `Put` change, such that replaying them rebuilds the same
    /// queues: buried jobs come in burial order, leased jobs come back ready.
    pub(crate) fn snapshot(&self) -> Vec<Change> {
        self.snapshot_of(&self.snapshot_order())
    }

    /// The ids of every job, in the order a snapshot lists them: buried jobs first in
    /// burial order (replay rebuilds that order from it), then the rest. With
    /// [`Engine::snapshot_of`] a snapshot can be copied a chunk at a time, letting other
    /// work run between chunks; jobs gone by then are skipped.
    ///
    /// Reads only the queues' buried sets and the job table's keys, never the jobs
    /// themselves: the caller holds the engine lock meanwhile, and touching a million
    /// boxed jobs would stall every connection for a tenth of a second.
    pub(crate) fn snapshot_order(&self) -> Vec<JobId> {
        let mut ids = self.flow_snapshot_slots();
        ids.reserve(self.jobs.len());
        let flow_slots = ids.len();
        for queue in self.queues() {
            ids.extend(queue.buried.iter().map(|&(_, id)| id));
        }
        if ids.len() == flow_slots {
            ids.extend(self.jobs.keys().copied());
        } else {
            let listed: HashSet<JobId> = ids.iter().copied().collect();
            ids.extend(self.jobs.keys().filter(|id| !listed.contains(id)).copied());
        }
        ids
    }

    /// `Put` changes for those of `ids` that still exist and are durable, each in its
    /// current state (leased jobs as ready), flow records for the flow slots, and the
    /// queues' policies with the first slot.
    ///
    /// Panics if one of the jobs' bodies is only in the log: a caller that moves bodies to
    /// the log ([`Engine::body_written`]) uses [`Engine::snapshot_of_split`].
    pub(crate) fn snapshot_of(&self, ids: &[JobId]) -> Vec<Change> {
        let (out, in_log) = self.snapshot_of_split(ids);
        assert!(
            in_log.is_empty(),
            "bodies in the log need snapshot_of_split"
        );
        out
    }

    /// [`Engine::snapshot_of`] for jobs whose bodies may be only in the log: those `Put`s
    /// have an empty body, and their index in the list comes back with the body's place,
    /// for the caller to read after letting go of the engine (no I/O under its lock).
    pub(crate) fn snapshot_of_split(&self, ids: &[JobId]) -> (Vec<Change>, Vec<(usize, LogRef)>) {
        let mut out = Vec::with_capacity(ids.len());
        let mut in_log = Vec::new();
        for &id in ids {
            match self.jobs.get(&id) {
                Some(job) if job.durable => {
                    let state = match job.state {
                        JobState::Buried => PutState::Buried,
                        JobState::Delayed => PutState::Delayed(job.due),
                        JobState::Ready | JobState::Reserved => PutState::Ready,
                    };
                    if let Body::Log(at) = job.body {
                        in_log.push((out.len(), at));
                    }
                    out.push(self.put_change(job, state));
                    if !self.failures.is_empty() {
                        self.failures_snapshot_of(id, &mut out);
                    }
                }
                _ => {
                    if id == POLICIES_SLOT {
                        self.policy_snapshot(&mut out);
                        self.schedule_snapshot(&mut out);
                    }
                    self.flow_snapshot_of(id, &mut out)
                }
            }
        }
        (out, in_log)
    }

    pub(crate) fn put_change(&self, job: &Job, state: PutState) -> Change {
        Change::Put {
            id: job.id,
            queue: self.queue(job.queue).name.clone(),
            pri: job.pri,
            ttr: job.ttr,
            delay: job.delay,
            created: job.created,
            state,
            unique: self.unique_of.get(&job.id).cloned(),
            attrs: self.attrs.get(&job.id).cloned(),
            attempt: if self.fenced.contains(&job.id) {
                job.reserves
            } else {
                0
            },
            body: job
                .body
                .in_memory()
                .map_or_else(Bytes::new, Bytes::copy_from_slice),
        }
    }
}
