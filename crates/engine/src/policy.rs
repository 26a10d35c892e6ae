//! A queue's policy: what an operator declares about a queue rather than about its jobs.
//!
//! Lease limit, pause and rate limit are decided here, for every protocol at once, and
//! logged as one [`Change::Policy`] record whenever one of them changes, so recovery and
//! snapshots bring back what an operator set (a pause, unlike beanstalkd's, survives a
//! restart). A queue nobody configured has the default policy, which is never logged.
//!
//! The retry policy (attempts, backoff, dead letter) is part of it too; [`crate::retry`]
//! acts on it. A field the engine does not act on is kept out of the struct and out of
//! the record.

use bytes::Bytes;

use crate::change::Change;
use crate::queue::{Queue, QueueId};
use crate::rate::{RateBucket, RateLimit};
use crate::retry::RetryPolicy;
use crate::timers::Timer;
use crate::{Engine, JobId, Millis, PAUSED_FOREVER};

/// The id a snapshot's order uses for "the queues' policies", beside the flow
/// definitions' (job ids start at 1, so 0 is never a job).
pub(crate) const POLICIES_SLOT: JobId = 0;

/// Whether a queue hands out jobs, and until when it does not.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Pause {
    /// Not paused.
    #[default]
    Off,
    /// Paused until this wall-clock time; `secs` is the length asked for (beanstalkd's
    /// `stats-tube` shows it).
    Until { at: Millis, secs: u32 },
    /// Paused until resumed.
    Forever,
}

/// Everything declared about one queue. [`Default`] is a queue nobody configured.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct QueuePolicy {
    /// At most this many jobs leased at once (0: no limit).
    pub lease_limit: u32,
    pub pause: Pause,
    /// At most this many jobs handed out per interval (`None`: no limit).
    pub rate_limit: Option<RateLimit>,
    /// What a failed attempt leads to (`None`: a failure ends the job, an expired or
    /// abandoned lease makes it ready again, as the protocols always did).
    pub retry: Option<RetryPolicy>,
}

impl QueuePolicy {
    /// Whether this is what a queue nobody configured has.
    pub fn is_default(&self) -> bool {
        *self == QueuePolicy::default()
    }
}

impl Queue {
    /// The queue's policy as it stands.
    pub fn policy(&self) -> QueuePolicy {
        QueuePolicy {
            lease_limit: self.lease_limit,
            pause: match self.paused_until {
                0 => Pause::Off,
                PAUSED_FOREVER => Pause::Forever,
                at => Pause::Until {
                    at,
                    secs: self.pause_secs,
                },
            },
            rate_limit: self.rate.as_ref().map(|b| b.limit),
            retry: self.retry.as_deref().cloned(),
        }
    }

    /// The queue's rate limit, if it has one.
    pub fn rate_limit(&self) -> Option<RateLimit> {
        self.rate.as_ref().map(|b| b.limit)
    }

    /// Whether the rate limit lets a job out now (always, without one).
    #[inline]
    pub fn has_rate_token(&self, now: Millis) -> bool {
        self.rate.as_ref().is_none_or(|b| b.has_token(now))
    }

    /// Whole tokens the rate limit has now (`None` without a limit).
    pub fn rate_tokens(&self, now: Millis) -> Option<u64> {
        self.rate.as_ref().map(|b| b.tokens(now))
    }
}

impl Engine {
    /// Sets every part of a queue's policy at once (the TOML config, the HTTP API), logs it
    /// if it changed, and hands out what waiters may now take.
    pub fn set_policy(&mut self, q: QueueId, policy: QueuePolicy, now: Millis) {
        let before = self.queue(q).policy();
        self.apply_policy(q, policy);
        self.policy_changed(q, before);
        self.to_serve.push(q);
        self.serve_waiters(now);
        self.drop_queue_if_unreferenced(q);
    }

    /// Limits how many jobs of a queue are handed out per interval (`None`: no limit).
    /// A reserve past the limit waits, and the engine's timers serve it when a token is due.
    pub fn set_rate_limit(&mut self, q: QueueId, limit: Option<RateLimit>, now: Millis) {
        let policy = QueuePolicy {
            rate_limit: limit,
            ..self.queue(q).policy()
        };
        self.set_policy(q, policy, now);
    }

    /// Logs the queue's policy if it differs from `before`: every operation that changes a
    /// policy calls this once, so one record holds the whole policy.
    pub(crate) fn policy_changed(&mut self, q: QueueId, before: QueuePolicy) {
        let queue = self.queue(q);
        let policy = queue.policy();
        if policy != before {
            self.changes.push(Change::Policy {
                queue: queue.name.clone(),
                policy,
            });
        }
    }

    /// Makes a queue's state match `policy`, without logging or serving waiters.
    fn apply_policy(&mut self, q: QueueId, policy: QueuePolicy) {
        self.cancel_unpause(q);
        self.replace_rate(q, policy.rate_limit);
        let queue = self.queue_mut(q);
        queue.lease_limit = policy.lease_limit;
        queue.retry = policy.retry.map(Box::new);
        // A record holds any end time: the two that mean something else here are read
        // as what they mean (no timer is ever set for the end of time).
        (queue.paused_until, queue.pause_secs) = match policy.pause {
            Pause::Off | Pause::Until { at: 0, .. } => (0, 0),
            Pause::Forever
            | Pause::Until {
                at: PAUSED_FOREVER, ..
            } => (PAUSED_FOREVER, u32::MAX),
            Pause::Until { at, secs } => (at, secs),
        };
        let until = queue.paused_until;
        if until > 0 && until != PAUSED_FOREVER {
            self.timers.add(until, Timer::Unpause(q));
        }
    }

    /// Installs a new bucket unless the limit is unchanged (a bucket keeps its tokens
    /// across settings that leave the rate alone).
    fn replace_rate(&mut self, q: QueueId, limit: Option<RateLimit>) {
        if self.queue(q).rate_limit() == limit {
            return;
        }
        if let Some(at) = self.queue(q).rate.as_ref().and_then(|b| b.armed) {
            self.timers.remove(at, Timer::RateToken(q));
        }
        self.queue_mut(q).rate = limit.map(RateBucket::new);
    }

    /// Sets a timer for the queue's next token, when waiters wait for one that is not
    /// there yet: the timer serves them as soon as the rate lets a job out.
    pub(crate) fn arm_rate_timer(&mut self, q: QueueId, now: Millis) {
        let queue = self.queue_mut(q);
        let Some(bucket) = queue.rate.as_mut() else {
            return;
        };
        if bucket.armed.is_some() || bucket.has_token(now) || queue.ready.is_empty() {
            return;
        }
        let at = bucket.next_token_at(now);
        bucket.armed = Some(at);
        self.timers.add(at, Timer::RateToken(q));
    }

    /// A queue's token timer fired: serve its waiters (and start a restarted bucket's
    /// refill, [`crate::rate`]).
    pub(crate) fn rate_token_due(&mut self, q: QueueId, now: Millis) {
        if let Some(Some(queue)) = self.queues.get_mut(q as usize) {
            if let Some(bucket) = queue.rate.as_mut() {
                bucket.armed = None;
                bucket.start(now);
                self.to_serve.push(q);
            }
        }
    }

    /// Applies a policy record read back from the log.
    pub(crate) fn replay_policy(&mut self, queue: &[u8], policy: QueuePolicy) {
        let q = self.queue_id_or_create(queue);
        let is_default = policy.is_default();
        self.apply_policy(q, policy);
        // How many tokens were spent before the restart is not logged: start empty.
        self.restart_rate(q);
        // The default policy is logged when a queue is forgotten or its limits removed: a
        // queue nothing else refers to goes, as it went then. (A timed pause alone never
        // keeps a queue, but must stay here until the queue's jobs are replayed.)
        if is_default {
            self.drop_queue_if_unreferenced(q);
        }
    }

    /// A policy record for every queue that has more than the default, for a snapshot.
    pub(crate) fn policy_snapshot(&self, out: &mut Vec<Change>) {
        for queue in self.queues() {
            let policy = queue.policy();
            if !policy.is_default() {
                out.push(Change::Policy {
                    queue: queue.name.clone(),
                    policy,
                });
            }
        }
    }

    /// Logs that a queue being forgotten had a policy (only a timed pause lets a queue be
    /// forgotten), so a replay forgets it too rather than bringing the pause back.
    pub(crate) fn log_forgotten_policy(&mut self, queue: &Queue) {
        if !queue.policy().is_default() {
            self.changes.push(Change::Policy {
                queue: Bytes::clone(&queue.name),
                policy: QueuePolicy::default(),
            });
        }
    }
}
