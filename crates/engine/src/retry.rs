//! Retry policies: what a queue does with a job whose attempt failed.
//!
//! Every way the engine learns of a failed attempt ends here, whatever the protocol: a
//! holder that finishes its job failed ([`Engine::finish`]), a lease that runs out, a
//! holder that goes away. Under a queue's [`RetryPolicy`] the job goes back to delayed for
//! the backoff until it has failed `max_attempts` times; then it is buried, or moved to the
//! dead-letter queue and buried there, where an operator retries or discards it. A queue
//! without a retry policy pays one `Option` check and behaves as before (a failed end
//! ends the job, an expired or abandoned lease makes the job ready again).
//!
//! The failures are the job's [`FailureHistory`]: each one's time, holder, how the lease
//! ended and error text, logged whole as one [`Change::Failures`] record whenever it grows,
//! so the count of attempts and the history survive a restart and travel with a dead
//! letter. The count of attempts is the number of failures recorded: a beanstalkd
//! `release` is not a failure, and a retried dead letter starts again at none.

use bytes::Bytes;

use crate::change::Change;
use crate::job::JobState;
use crate::jobs::NewJob;
use crate::queue::QueueId;
use crate::{ConnId, Engine, JobId, LeaseClose, Millis};

/// At most this many failures are kept in a job's history (the newest); the count goes on.
pub const HISTORY_KEPT: usize = 32;

/// How the delay before a retry grows.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Backoff {
    /// The same delay before every retry.
    #[default]
    Fixed,
    /// The first delay, doubled for each further failure up to the cap, less a jitter.
    Exponential,
}

impl Backoff {
    /// Its name in the TOML file and the HTTP API.
    pub fn as_str(self) -> &'static str {
        match self {
            Backoff::Fixed => "fixed",
            Backoff::Exponential => "exponential",
        }
    }

    /// Reads a name of [`Backoff::as_str`].
    pub fn parse(name: &str) -> Option<Backoff> {
        match name {
            "fixed" => Some(Backoff::Fixed),
            "exponential" => Some(Backoff::Exponential),
            _ => None,
        }
    }
}

/// A queue's retry policy.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Attempts a job gets in all (at least 1): after this many failures it gives up.
    pub max_attempts: u32,
    pub backoff: Backoff,
    /// The delay before the first retry, in milliseconds.
    pub backoff_ms: u64,
    /// The longest delay an exponential backoff grows to (0: no cap).
    pub backoff_max_ms: u64,
    /// Where a job goes after its last failed attempt (`None`: it is buried in its queue).
    pub dead_letter: Option<Bytes>,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            max_attempts: 1,
            backoff: Backoff::Fixed,
            backoff_ms: 0,
            backoff_max_ms: 0,
            dead_letter: None,
        }
    }
}

impl RetryPolicy {
    /// The delay before the retry that follows failure number `failures` (1 for the
    /// first) of job `job`.
    ///
    /// The engine has no randomness source (it must replay the same way), so the jitter
    /// of an exponential backoff is derived from the job id and the failure number: up to a
    /// fifth of the delay is taken off, spreading jobs that failed together, and the result
    /// never exceeds the cap nor falls below four fifths of the undisturbed delay.
    pub fn delay_ms(&self, job: JobId, failures: u32) -> u64 {
        match self.backoff {
            Backoff::Fixed => self.backoff_ms,
            Backoff::Exponential => {
                let doublings = failures.saturating_sub(1).min(63);
                let grown = self.backoff_ms.saturating_mul(1u64 << doublings.min(40));
                let capped = match self.backoff_max_ms {
                    0 => grown,
                    cap => grown.min(cap),
                };
                let fraction = spread(job, failures) % 1000;
                capped - capped / 5 * fraction / 1000
            }
        }
    }
}

/// A well-mixed number from a job id and a failure number (splitmix64's finaliser).
fn spread(job: JobId, failures: u32) -> u64 {
    let mut x = job ^ (u64::from(failures) << 48) ^ 0x9e37_79b9_7f4a_7c15;
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// One failed attempt.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Failure {
    /// When the engine learnt of it.
    pub at: Millis,
    /// The session that held the lease.
    pub holder: ConnId,
    /// How the lease ended: failed, expired or disconnected.
    pub how: LeaseClose,
    /// The error text the holder gave, if any.
    pub error: Option<Bytes>,
}

impl Failure {
    /// A failure at `at` of `holder`'s lease, ended as `how`.
    pub fn new(at: Millis, holder: ConnId, how: LeaseClose, error: Option<Bytes>) -> Failure {
        Failure {
            at,
            holder,
            how,
            error,
        }
    }
}

/// A job's failed attempts under a retry policy.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FailureHistory {
    /// The queue the job failed in (a dead letter's retry sends it back there).
    pub origin: Bytes,
    /// Failures since the job was put or last retried by an operator.
    pub count: u32,
    /// The newest failures, at most [`HISTORY_KEPT`], oldest first.
    pub failures: Vec<Failure>,
}

impl Engine {
    /// The retry policy of a job's queue, when the job is durable and has one: the one
    /// check every failure path makes.
    #[inline]
    pub(crate) fn retry_policy_of(&self, id: JobId) -> Option<&RetryPolicy> {
        let job = self.jobs.get(&id)?;
        if !job.durable || self.is_flow_engine_job(id) {
            return None;
        }
        self.queue(job.queue).retry.as_deref()
    }

    /// A held job's attempt failed (its lease already left): records the failure, then
    /// delays the job for the backoff, or gives up on it after the last attempt.
    pub(crate) fn attempt_failed(&mut self, id: JobId, failure: Failure, now: Millis) {
        let policy = self.retry_policy_of(id).cloned().expect("caller checked");
        let origin = self.queue(self.jobs[&id].queue).name.clone();
        let history = self.failures.entry(id).or_insert_with(|| FailureHistory {
            origin,
            ..FailureHistory::default()
        });
        history.count += 1;
        history.failures.push(failure);
        if history.failures.len() > HISTORY_KEPT {
            history.failures.remove(0);
        }
        let count = history.count;
        self.changes.push(Change::Failures {
            id,
            history: Some(Box::new(history.clone())),
        });
        if count < policy.max_attempts {
            self.retry_later(id, now + policy.delay_ms(id, count));
        } else {
            self.give_up(id, policy.dead_letter.as_deref());
        }
    }

    fn retry_later(&mut self, id: JobId, ready_at: Millis) {
        let pri = self.jobs[&id].pri;
        self.enter_delayed(id, ready_at);
        self.changes.push(Change::Release { id, pri, ready_at });
    }

    /// Buries the job, in the dead-letter queue if there is one.
    fn give_up(&mut self, id: JobId, dead_letter: Option<&[u8]>) {
        let pri = self.jobs[&id].pri;
        if let Some(name) = dead_letter {
            let from = self.jobs[&id].queue;
            let to = self.queue_id_or_create(name);
            self.move_to(id, to, pri, None);
            self.leave_state(id);
            self.changes.push(Change::Route {
                id,
                queue: Bytes::copy_from_slice(name),
                pri,
                attrs: None,
            });
            self.drop_queue_if_unreferenced(from);
        }
        self.jobs.get_mut(&id).expect("job exists").buries += 1;
        self.enter_buried(id);
        self.changes.push(Change::Bury { id, pri });
    }

    /// Whether a job's queue has a retry policy that this job is under (durable, not a
    /// flow job): a front end with retries of its own leaves the decision to the engine
    /// then, reporting the failure with [`Engine::finish`] or [`Engine::abandon`].
    pub fn is_under_retry_policy(&self, id: JobId) -> bool {
        self.retry_policy_of(id).is_some()
    }

    /// Under a retry policy, a holder gives its job up without an outcome because its peer
    /// went away (a front end that gives held jobs back itself when a session ends, as
    /// Gearman's does): the attempt counts as failed, as an engine disconnect does. False,
    /// changing nothing, without a policy or unless `conn` holds the job.
    pub fn abandon(&mut self, conn: ConnId, id: JobId, now: Millis) -> bool {
        self.saw(now);
        if !self.holds(conn, id) || self.retry_policy_of(id).is_none() {
            return false;
        }
        let stamp = self.leave_state(id);
        self.lease_closed(id, conn, stamp, LeaseClose::Disconnected, None);
        let failure = Failure::new(now, conn, LeaseClose::Disconnected, None);
        self.attempt_failed(id, failure, now);
        self.serve_waiters(now);
        true
    }

    /// Puts a durable job straight into queue `job.queue` as a dead letter: buried there,
    /// with the failures that sent it there. For a front end whose attempts ran outside
    /// the engine's leases and that retried them itself under the origin queue's policy (a
    /// jobd launch: the user's row, not an engine job, is the truth about it). It is then
    /// a dead letter like any other: listed, retried to `history.origin`, or discarded.
    pub fn put_dead_letter(&mut self, job: NewJob, history: FailureHistory, now: Millis) -> JobId {
        // Put delayed to the end of time, so no waiter on the queue can take it, then
        // buried at once: the log holds the put, the bury and the history, in that order.
        let pri = job.pri;
        let id = self
            .put_job(
                NewJob {
                    ready_at: Millis::MAX,
                    durable: true,
                    ..job
                },
                now,
            )
            .id;
        self.leave_state(id);
        self.jobs.get_mut(&id).expect("job exists").buries += 1;
        self.enter_buried(id);
        self.changes.push(Change::Bury { id, pri });
        self.changes.push(Change::Failures {
            id,
            history: Some(Box::new(history.clone())),
        });
        self.failures.insert(id, history);
        id
    }

    /// A job's failure history, if it failed under a retry policy.
    pub fn failure_history(&self, id: JobId) -> Option<&FailureHistory> {
        self.failures.get(&id)
    }

    /// Sends buried jobs of a dead-letter queue (all, or those of `ids` that are there)
    /// back to the queues they failed in, ready, with no failures counted. Returns the
    /// jobs moved.
    pub fn retry_dead_letters(
        &mut self,
        q: QueueId,
        ids: Option<&[JobId]>,
        now: Millis,
    ) -> Vec<JobId> {
        self.saw(now);
        let chosen = self.dead_letters(q, ids);
        for &id in &chosen {
            let history = self
                .failures
                .remove(&id)
                .expect("a dead letter has a history");
            self.changes.push(Change::Failures { id, history: None });
            self.leave_state(id);
            let pri = self.jobs[&id].pri;
            let to = self.queue_id_or_create(&history.origin);
            self.jobs.get_mut(&id).expect("job exists").kicks += 1;
            self.move_to(id, to, pri, None);
            self.changes.push(Change::Route {
                id,
                queue: history.origin,
                pri,
                attrs: None,
            });
        }
        self.drop_queue_if_unreferenced(q);
        self.serve_waiters(now);
        chosen
    }

    /// Deletes buried jobs of a dead-letter queue (all, or those of `ids` that are there).
    /// Returns the jobs deleted.
    pub fn discard_dead_letters(&mut self, q: QueueId, ids: Option<&[JobId]>) -> Vec<JobId> {
        let chosen = self.dead_letters(q, ids);
        for &id in &chosen {
            self.finish(0, id, crate::JobEnd::deleted());
        }
        chosen
    }

    /// Up to `limit` dead letters of queue `q` (its buried jobs that carry a failure
    /// history), oldest burial first.
    pub fn list_dead_letters(&self, q: QueueId, limit: usize) -> Vec<JobId> {
        let mut ids = self.dead_letters(q, None);
        ids.truncate(limit);
        ids
    }

    /// The buried jobs of queue `q` that carry a failure history, limited to `ids`.
    fn dead_letters(&self, q: QueueId, ids: Option<&[JobId]>) -> Vec<JobId> {
        let Some(Some(queue)) = self.queues.get(q as usize) else {
            return Vec::new();
        };
        let is_dead_letter = |id: &JobId| {
            self.failures.contains_key(id)
                && self
                    .jobs
                    .get(id)
                    .is_some_and(|j| j.queue == q && j.state == JobState::Buried)
        };
        match ids {
            Some(ids) => ids.iter().copied().filter(is_dead_letter).collect(),
            None => queue
                .buried
                .iter()
                .map(|&(_, id)| id)
                .filter(is_dead_letter)
                .collect(),
        }
    }

    /// Applies a failure-history record read back from the log.
    pub(crate) fn replay_failures(&mut self, id: JobId, history: Option<Box<FailureHistory>>) {
        match history {
            Some(h) if self.jobs.contains_key(&id) => {
                self.failures.insert(id, *h);
            }
            _ => {
                self.failures.remove(&id);
            }
        }
    }

    /// A failure-history record for every job that has one, for a snapshot.
    pub(crate) fn failures_snapshot_of(&self, id: JobId, out: &mut Vec<Change>) {
        if let Some(h) = self.failures.get(&id) {
            out.push(Change::Failures {
                id,
                history: Some(Box::new(h.clone())),
            });
        }
    }
}
