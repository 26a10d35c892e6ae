//! How a job ends (deleted, completed or failed), and who hears about it.
//!
//! Any session may watch a job. When the job ends, by whatever protocol, every watcher gets
//! [`NoticeKind::Ended`] with the outcome in the same call that ended it, so a Gearman
//! client, a jobd `run-manual`, a WMP submitter or an HTTP "wait for the result" learn of
//! it without polling and without the front ends knowing about each other.

use std::sync::Arc;

use crate::change::Change;
use crate::job::{Job, JobState};
use crate::lease_timing::LeaseOutcome;
use crate::notice::{EndStatus, JobEnd, JobUpdate, Notice, NoticeKind};
use crate::{ConnId, Engine, JobId};
use crate::{Failure, LeaseClose};

impl Engine {
    /// Removes a job for good, without an outcome. Allowed unless someone else holds its
    /// lease. Watchers hear [`EndStatus::Deleted`].
    pub fn delete(&mut self, conn: ConnId, id: JobId) -> bool {
        self.finish(conn, id, JobEnd::deleted())
    }

    /// Ends a job with an outcome. Allowed unless someone else holds its lease. The outcome
    /// is logged in the same record as the end (a plain delete record when there is none),
    /// and every watcher is told.
    pub fn finish(&mut self, conn: ConnId, id: JobId, end: JobEnd) -> bool {
        if self.is_flow_engine_job(id) {
            return false; // a flow job ends by a flow transition, never behind its record
        }
        match self.jobs.get(&id) {
            Some(j) if j.state != JobState::Reserved || j.owner == conn => {}
            _ => return false,
        }
        if end.status == EndStatus::Failed && self.retry_policy_of(id).is_some() {
            return self.failed_under_policy(conn, id, end);
        }
        let (job, stamp) = self.remove_job_with_lease(id);
        let how = match end.status {
            EndStatus::Failed => LeaseClose::Failed,
            EndStatus::Ok => LeaseClose::Ok,
            EndStatus::Deleted => LeaseClose::Deleted,
        };
        // A job that ends well with its first and only lease has no story beyond its
        // counts, and it is nearly every job: recording it cost the broker ~1,500
        // instructions per job (a map entry and an allocation in its attempt log).
        if how == LeaseClose::Failed || job.reserves > 1 {
            self.lease_closed(id, conn, stamp, how, end.error.as_ref());
        }
        let outcome = match end.status {
            EndStatus::Failed => LeaseOutcome::Failed,
            EndStatus::Ok | EndStatus::Deleted => LeaseOutcome::Ok,
        };
        self.lease_completed(job.queue, stamp, outcome);
        let queue = self.queue_mut(job.queue);
        match end.status {
            EndStatus::Deleted => queue.cmd_delete += 1,
            EndStatus::Ok => queue.total_ok += 1,
            EndStatus::Failed => queue.total_failed += 1,
        }
        if job.durable {
            self.changes.push(if end.has_outcome() {
                Change::End {
                    id,
                    end: end.clone(),
                }
            } else {
                Change::Delete { id }
            });
        }
        self.tell_watchers_of_end(id, end);
        self.drop_queue_if_unreferenced(job.queue);
        // A lease limit may have been reached: this end makes room.
        let now = self.last_now;
        self.serve_waiters(now);
        true
    }

    /// A failed end of a job whose queue retries: the attempt failed, the job stays (see
    /// [`crate::retry`]). Watchers hear nothing until the job really ends.
    fn failed_under_policy(&mut self, conn: ConnId, id: JobId, end: JobEnd) -> bool {
        let now = self.last_now;
        let q = self.jobs[&id].queue;
        let stamp = self.leave_state(id);
        self.lease_closed(id, conn, stamp, LeaseClose::Failed, end.error.as_ref());
        self.lease_completed(q, stamp, LeaseOutcome::Failed);
        self.queue_mut(q).total_failed += 1;
        let failure = Failure::new(now, conn, LeaseClose::Failed, end.error);
        self.attempt_failed(id, failure, now);
        self.serve_waiters(now);
        true
    }

    fn tell_watchers_of_end(&mut self, id: JobId, end: JobEnd) {
        // Most ends have no watcher: skip the lookup (it is on every job's path).
        if self.watchers.is_empty() {
            return;
        }
        let Some(watchers) = self.watchers.remove(&id) else {
            return;
        };
        let end = Arc::new(end);
        for conn in watchers {
            if let Some(s) = self.sessions.get_mut(&conn) {
                s.watching.remove(&id);
            }
            self.notices.push(Notice {
                conn,
                kind: NoticeKind::Ended(id, end.clone()),
            });
        }
    }

    /// Takes a job out of the engine with everything kept beside it. The caller drops its
    /// queue if that emptied it, and tells the watchers.
    pub(crate) fn remove_job(&mut self, id: JobId) -> Job {
        self.remove_job_with_lease(id).0
    }

    /// As [`Engine::remove_job`], also returning the stamp of its lease if it was leased.
    pub(crate) fn remove_job_with_lease(&mut self, id: JobId) -> (Job, Option<u64>) {
        let stamp = self.leave_state(id);
        let job = self.jobs.remove(&id).expect("removed job exists");
        if let Some(key) = self.unique_of.remove(&id) {
            self.by_unique.remove(&(job.queue, key));
        }
        // Side tables are empty unless a front end uses them: skip the lookups then.
        if !self.attrs.is_empty() {
            self.attrs.remove(&id);
        }
        if !self.fenced.is_empty() {
            self.fenced.remove(&id);
        }
        if !self.failures.is_empty() {
            self.failures.remove(&id);
        }
        if job.durable {
            self.live_bytes -= self.record_cost(job.queue, job.body.len());
        }
        (job, stamp)
    }

    /// Makes `conn` hear about the job's updates and end. Watching twice means hearing
    /// twice (a Gearman client that submits the same unique job twice gets every packet
    /// twice, as from gearmand). False if the job does not exist.
    pub fn watch(&mut self, conn: ConnId, id: JobId) -> bool {
        if !self.jobs.contains_key(&id) {
            return false;
        }
        self.watchers.entry(id).or_default().push(conn);
        *self
            .sessions
            .entry(conn)
            .or_default()
            .watching
            .entry(id)
            .or_default() += 1;
        true
    }

    /// Stops one of `conn`'s watches of a job. Returns how many watches the job has left.
    pub fn unwatch(&mut self, conn: ConnId, id: JobId) -> usize {
        if let Some(s) = self.sessions.get_mut(&conn) {
            if let Some(n) = s.watching.get_mut(&id) {
                *n -= 1;
                if *n == 0 {
                    s.watching.remove(&id);
                }
            }
        }
        self.forget_idle_session(conn);
        let Some(list) = self.watchers.get_mut(&id) else {
            return 0;
        };
        if let Some(pos) = list.iter().position(|&c| c == conn) {
            list.remove(pos);
        }
        let left = list.len();
        if left == 0 {
            self.watchers.remove(&id);
        }
        left
    }

    /// How many watches a job has (a session watching twice counts twice).
    pub fn watcher_count(&self, id: JobId) -> usize {
        self.watchers.get(&id).map_or(0, Vec::len)
    }

    /// The jobs `conn` watches, each once.
    pub fn watched_by(&self, conn: ConnId) -> Vec<JobId> {
        self.sessions
            .get(&conn)
            .map(|s| s.watching.keys().copied().collect())
            .unwrap_or_default()
    }

    /// Passes a report from a job's holder (progress, partial data) to its watchers.
    /// Changes nothing, so nothing is logged.
    pub fn publish(&mut self, id: JobId, update: JobUpdate) {
        let Some(watchers) = self.watchers.get(&id) else {
            return;
        };
        let update = Arc::new(update);
        for &conn in watchers {
            self.notices.push(Notice {
                conn,
                kind: NoticeKind::Update(id, update.clone()),
            });
        }
    }

    /// Ends every watch of a session and returns the jobs it watched, so a front end can
    /// decide about jobs nobody waits for any more (Gearman drops abandoned foreground jobs).
    pub fn stop_watching(&mut self, conn: ConnId) -> Vec<JobId> {
        let watched = self.drop_watches(conn);
        self.forget_idle_session(conn);
        watched
    }

    /// Ends every watch of a session (it went away); returns the jobs it watched.
    pub(crate) fn drop_watches(&mut self, conn: ConnId) -> Vec<JobId> {
        let Some(s) = self.sessions.get_mut(&conn) else {
            return Vec::new();
        };
        let watched: Vec<JobId> = s.watching.drain().map(|(id, _)| id).collect();
        for &id in &watched {
            if let Some(list) = self.watchers.get_mut(&id) {
                list.retain(|&c| c != conn);
                if list.is_empty() {
                    self.watchers.remove(&id);
                }
            }
        }
        watched
    }
}
