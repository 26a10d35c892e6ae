//! GIVE, DONE, STATUS and lease expiry: the manager's leases live in the engine, held by
//! its one session, fenced with the job's durable attempt number (docs/wmp.md "Manager
//! behaviour", "What a DONE does to the job", decisions 2, 3 and 5).
//!
//! The engine already knows everything a DONE is checked against: the job is reserved by
//! the manager's session and its attempt counter equals the DONE's `attempt`. So no lease
//! table is kept here, and a DONE of a hand-out from before a restart is stale because the
//! engine's attempt counter has moved on (it is logged by `fence` before every TAKE).

use std::collections::HashMap;

use bytes::Bytes;
use jobyard_broker::{Broker, Txn};
use jobyard_engine::{
    push_job_handle, Job, JobEnd, JobId, JobState, JobUpdate, Lease, QueueId, ReserveOutcome,
    WaitMode,
};
use jobyard_wmp_wire::headers::Headers;
use jobyard_wmp_wire::message::{Command, Done, Give, No, Path, Progress, Status, Take};

use crate::counters::{self, Counter};
use crate::manager::{Manager, OutKind};
use crate::roles::{effective_roles, Choice};

/// Longest backoff after a `fail` (decision 5).
const MAX_BACKOFF_SECS: u32 = 300;
/// Rejects in a row after which a job is held back for a second (decision 2).
const REJECTS_BEFORE_PAUSE: u32 = 10;
/// Above this many entries, entries of jobs that no longer exist are swept.
const SWEEP_ABOVE: usize = 4096;

/// Per-job counts the engine does not keep: `fail`s (lease expiries are the engine's
/// `timeouts`) and rejects in a row. Kept in memory: after a restart a job starts again
/// with the failures of its expired leases only (docs/wmp.md, decision 5).
#[derive(Debug, Default)]
pub(crate) struct Retries {
    by_job: HashMap<JobId, (u32, u32)>,
    sweep_at: usize,
}

impl Retries {
    fn fails(&self, id: JobId) -> u32 {
        self.by_job.get(&id).map_or(0, |e| e.0)
    }

    fn add_fail(&mut self, id: JobId) -> u32 {
        let e = self.by_job.entry(id).or_default();
        e.0 += 1;
        e.1 = 0;
        e.0
    }

    /// Counts a reject; true when the job should be held back a little.
    fn add_reject(&mut self, id: JobId) -> bool {
        let e = self.by_job.entry(id).or_default();
        e.1 += 1;
        if e.1 >= REJECTS_BEFORE_PAUSE {
            e.1 = 0;
            return true;
        }
        false
    }

    fn forget(&mut self, id: JobId) {
        self.by_job.remove(&id);
    }

    /// Drops entries of jobs that ended elsewhere (deleted by a beanstalkd client...), so
    /// the table stays as large as the jobs in flight.
    fn sweep(&mut self, txn: &Txn<'_>) {
        if self.by_job.len() <= SWEEP_ABOVE.max(self.sweep_at) {
            return;
        }
        self.by_job.retain(|id, _| txn.job(*id).is_some());
        self.sweep_at = self.by_job.len() * 2;
    }
}

/// The backoff after the `n`th failure: 1 s doubling, at most 5 minutes.
pub(crate) fn backoff_secs(failures: u32) -> u32 {
    1u32.checked_shl(failures.saturating_sub(1))
        .unwrap_or(u32::MAX)
        .min(MAX_BACKOFF_SECS)
}

impl Manager {
    /// GIVE: reserve the best ready job of the effective roles (GIVE's `queue` first), fence
    /// it and queue TAKE; else NO.
    pub(crate) fn on_give(&mut self, path: Path, give: Give) {
        let choice = effective_roles(&give, self.registry.roles(&path));
        let now = Broker::now();
        let mut txn = self.broker.lock();
        let (preferred, all): (Option<QueueId>, Vec<QueueId>) = match &choice {
            Choice::Nothing => (None, Vec::new()),
            Choice::Only(names) => {
                let ids = names
                    .iter()
                    .filter_map(|n| txn.queue_id(n.as_bytes()))
                    .collect();
                let preferred = give
                    .queue
                    .as_ref()
                    .filter(|q| names.first() == Some(q))
                    .and_then(|q| txn.queue_id(q.as_bytes()));
                (preferred, ids)
            }
            Choice::Any { prefer } => {
                let names: Vec<Bytes> = txn
                    .queues()
                    .filter(|q| std::str::from_utf8(&q.name).is_ok_and(Headers::is_valid_value))
                    .map(|q| q.name.clone())
                    .collect();
                let ids = names.iter().filter_map(|n| txn.queue_id(n)).collect();
                let preferred = prefer.as_ref().and_then(|q| txn.queue_id(q.as_bytes()));
                (preferred, ids)
            }
        };
        let mut reserved = None;
        let preferred = preferred.as_slice();
        for queues in [preferred, &all] {
            // `has_ready` first: a reserve that finds nothing looks at every lease the
            // session holds (its soonest deadline), and the manager may hold thousands.
            if queues.is_empty() || !txn.has_ready(queues, now) {
                continue;
            }
            let outcome = txn.reserve(
                self.conn,
                queues,
                WaitMode::Best,
                Lease::JobTtr,
                Some(0),
                false,
                now,
            );
            if let ReserveOutcome::Reserved(id) = outcome {
                reserved = Some(id);
                break;
            }
        }
        let Some(id) = reserved else {
            drop(txn);
            self.answer_no(path, give.lock);
            return;
        };
        // Decision 15: tells the worker a hot GIVE would find work, so it never sends one
        // that is sure to get NO.
        let more = txn.has_ready(&all, now);
        let attempt = txn.fence(self.conn, id).expect("the job was just reserved");
        let job = txn.job(id).expect("a reserved job exists");
        // A body the log cannot give back (a file cut or damaged from outside) is never
        // sent as something else: the worker gets NO, and the job stays leased to the
        // manager until its lease ends, as a beanstalkd reserve that fails does.
        let body = match txn.body(job) {
            Ok(body) => Bytes::copy_from_slice(&body),
            Err(e) => {
                tracing::error!(
                    "cannot read job {id}'s body back from the log: {e}; not handed out, \
                     it is ready again when its lease ends"
                );
                let lsn = txn.commit();
                self.lsn = self.lsn.max(lsn);
                self.answer_no(path, give.lock);
                return;
            }
        };
        let queue = String::from_utf8_lossy(&txn.queue(job.queue).name).into_owned();
        let take = Take {
            lock: give.lock,
            manager: self.name.clone(),
            job: id,
            attempt: attempt as u64,
            queue,
            timeout_ms: job.ttr.max(1) as u64 * 1000,
            body,
        };
        let pri = job.pri;
        let lsn = txn.commit();
        self.lsn = self.lsn.max(lsn);
        self.registry.consume(&path);
        self.publish_take(&path, id);
        let mut msg = jobyard_wmp_wire::message::Message::new(path, Command::Take(take));
        // priority, more, handle: sized once.
        msg.extra = Headers::with_capacity(3, 64);
        msg.extra.push_number("priority", pri.into());
        if more {
            msg.extra.push("more", "1");
        }
        if let Some(prefix) = &self.handle_prefix {
            // The handle Gearman clients know this job by (the same function writes it).
            let handle = &mut self.handle_scratch;
            handle.clear();
            push_job_handle(prefix, id, handle);
            if Headers::is_valid_value(handle) {
                msg.extra.push("handle", &*handle);
            }
        }
        let frames = jobyard_wmp_wire::codec::encode(&msg);
        self.out.push(crate::manager::Outgoing {
            frames,
            kind: OutKind::Take {
                path: msg.path,
                job: id,
                attempt,
            },
        });
        counters::count(&self.metrics, Counter::Take);
    }

    /// NO: nothing for this GIVE.
    fn answer_no(&mut self, path: Path, lock: String) {
        let no = No {
            lock,
            manager: Some(self.name.clone()),
        };
        self.registry.answered(&path);
        self.send(path, Command::No(no), OutKind::No);
        counters::count(&self.metrics, Counter::No);
    }

    /// True when `job` is held by this manager under hand-out `attempt`.
    fn holds(&self, txn: &Txn<'_>, manager: &str, job: JobId, attempt: u64) -> bool {
        self.held(txn, manager, job, attempt).is_some()
    }

    /// The job when this manager holds it under hand-out `attempt` (see
    /// [`Manager::holds`]): one lookup in the job table for the check and what follows.
    fn held<'t>(
        &self,
        txn: &'t Txn<'_>,
        manager: &str,
        job: JobId,
        attempt: u64,
    ) -> Option<&'t Job> {
        if manager != self.name {
            return None;
        }
        txn.job(job).filter(|j| {
            j.state == JobState::Reserved && j.owner == self.conn && j.reserves as u64 == attempt
        })
    }

    /// DONE: end, retry, bury or release the job; a DONE for anything but the current
    /// hand-out is stale, counted and ignored.
    pub(crate) fn on_done(&mut self, done: Done) {
        let now = Broker::now();
        let mut txn = self.broker.lock();
        let Some((pri, timeouts)) = self
            .held(&txn, &done.manager, done.job, done.attempt)
            .map(|j| (j.pri, j.timeouts))
        else {
            drop(txn);
            tracing::debug!(
                job = done.job,
                attempt = done.attempt,
                "wmp: stale DONE ignored"
            );
            counters::count(&self.metrics, Counter::DoneStale);
            return;
        };
        let id = done.job;
        self.publish_end(id);
        match done.status {
            Status::Ok => {
                txn.finish(self.conn, id, JobEnd::ok(done.result));
                self.retries.forget(id);
                jobyard_broker::ProtocolMetrics::inc(&self.metrics.jobs_completed);
            }
            Status::Fail => {
                let text = if done.result.is_empty() {
                    done.error.map(Bytes::from)
                } else {
                    Some(done.result)
                };
                let failures = self.retries.add_fail(id) + timeouts;
                if txn.watcher_count(id) > 0 || txn.is_under_retry_policy(id) {
                    // A client waits for this job (Gearman foreground): it decides about
                    // retrying, as with gearmand. Under the queue's retry policy the
                    // engine decides (it keeps the job until its last attempt).
                    txn.finish(self.conn, id, JobEnd::failed(text));
                    self.retries.forget(id);
                    jobyard_broker::ProtocolMetrics::inc(&self.metrics.jobs_failed);
                } else if failures >= self.failure_limit {
                    txn.bury(self.conn, id, pri);
                    self.retries.forget(id);
                    jobyard_broker::ProtocolMetrics::inc(&self.metrics.jobs_failed);
                } else {
                    txn.release(self.conn, id, pri, backoff_secs(failures), now);
                }
            }
            Status::Reject => {
                let delay = if self.retries.add_reject(id) { 1 } else { 0 };
                txn.release(self.conn, id, pri, delay, now);
            }
        }
        self.retries.sweep(&txn);
        txn.commit();
    }

    /// STATUS: extends the lease by the job's TTR (like beanstalkd `touch`), and passes
    /// `num`/`den` on to the job's watchers (a Gearman client gets WORK_STATUS).
    pub(crate) fn on_status(&mut self, progress: Progress) {
        let mut txn = self.broker.lock();
        if !self.holds(&txn, &progress.manager, progress.job, progress.attempt) {
            counters::count(&self.metrics, Counter::StatusStale);
            return;
        }
        txn.touch(self.conn, progress.job, Broker::now());
        if let (Some(num), Some(den)) = (progress.num, progress.den) {
            let update = JobUpdate::Progress {
                num: Bytes::from(num.to_string()),
                den: Bytes::from(den.to_string()),
            };
            txn.publish(progress.job, update);
        }
        txn.commit();
    }

    /// The engine requeued a job whose lease ran out (its attempt is counted). Past the
    /// failure limit it is buried, or failed for a client that waits for it.
    pub(crate) fn on_lease_expired(&mut self, id: JobId) {
        counters::count(&self.metrics, Counter::LeaseExpired);
        self.publish_end(id);
        let mut txn = self.broker.lock();
        let Some(job) = txn.job(id) else { return };
        if job.state != JobState::Ready
            || job.timeouts + self.retries.fails(id) < self.failure_limit
        {
            return;
        }
        if txn.watcher_count(id) > 0 {
            let end = JobEnd::failed(Some(Bytes::from_static(b"lease expired")));
            txn.finish(self.conn, id, end);
        } else {
            txn.bury_job(id);
        }
        self.retries.forget(id);
        jobyard_broker::ProtocolMetrics::inc(&self.metrics.jobs_failed);
        txn.commit();
    }

    /// A TAKE whose first hop was gone never reached a worker: the job is ready again at
    /// once (the attempt stays used).
    pub(crate) fn undo_take(&mut self, job: JobId, attempt: u32) {
        self.publish_end(job);
        let mut txn = self.broker.lock();
        let held = txn.job(job).is_some_and(|j| {
            j.state == JobState::Reserved && j.owner == self.conn && j.reserves == attempt
        });
        if held {
            let pri = txn.job(job).map_or(0, |j| j.pri);
            txn.release(self.conn, job, pri, 0, Broker::now());
            txn.commit();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_from_one_second_up_to_five_minutes() {
        let got: Vec<u32> = [1, 2, 3, 4, 9, 10, 40, u32::MAX]
            .into_iter()
            .map(backoff_secs)
            .collect();
        assert_eq!(got, [1, 2, 4, 8, 256, 300, 300, 300]);
        assert_eq!(backoff_secs(0), 1);
    }

    #[test]
    fn ten_rejects_in_a_row_hold_a_job_back_and_a_fail_resets_the_run() {
        let mut r = Retries::default();
        let held: Vec<bool> = (0..10).map(|_| r.add_reject(7)).collect();
        assert_eq!(held.iter().filter(|h| **h).count(), 1);
        assert!(held[9]);
        for _ in 0..5 {
            r.add_reject(7);
        }
        assert_eq!(r.add_fail(7), 1);
        assert!(!(0..9).any(|_| r.add_reject(7)));
        assert_eq!(r.fails(7), 1);
    }
}
