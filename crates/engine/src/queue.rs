//! A queue: the ready, delayed and buried jobs of one name, plus its counters.

use std::collections::{BTreeSet, VecDeque};

use bytes::Bytes;

use crate::rate::RateBucket;
use crate::{ConnId, JobId, Millis};

/// Index of a queue in the engine's queue table. Stable while the queue exists.
pub type QueueId = u32;

/// One named queue. What a protocol calls a tube, a function or a target.
#[derive(Debug)]
pub struct Queue {
    pub name: Bytes,
    /// Ready jobs ordered by (priority, id): the next one to hand out is first.
    pub(crate) ready: BTreeSet<(u32, JobId)>,
    /// Delayed jobs ordered by (ready-at, id).
    pub(crate) delayed: BTreeSet<(Millis, JobId)>,
    /// Buried jobs in burial order (the job's `buried_seq`).
    pub(crate) buried: BTreeSet<(u64, JobId)>,
    /// Connections blocked in a reserve that includes this queue, oldest first.
    pub(crate) waiters: VecDeque<ConnId>,
    pub reserved: u32,
    pub urgent: u32,
    /// No job is handed out from this queue before this time.
    pub paused_until: Millis,
    /// The pause length last asked for, in seconds.
    pub pause_secs: u32,
    /// At most this many jobs leased at once (0: no limit).
    pub lease_limit: u32,
    /// The rate limit's token bucket, if the queue has one ([`crate::QueuePolicy`]).
    pub(crate) rate: Option<RateBucket>,
    /// The retry policy, if the queue has one ([`crate::RetryPolicy`]).
    pub(crate) retry: Option<Box<crate::RetryPolicy>>,
    /// Connections that put into this queue by default (beanstalkd `use`).
    pub producers: u32,
    /// Connections that take from this queue (beanstalkd `watch`, Gearman `CAN_DO`).
    pub consumers: u32,
    /// Holders that keep the queue alive even when it is empty.
    pub pins: u32,
    pub total_jobs: u64,
    pub cmd_delete: u64,
    pub cmd_pause: u64,
    /// Jobs that ended with [`crate::EndStatus::Ok`] since start.
    pub total_ok: u64,
    /// Jobs that ended with [`crate::EndStatus::Failed`] since start.
    pub total_failed: u64,
    /// Leases of this queue's jobs that ran out since start.
    pub total_timeouts: u64,
}

impl Queue {
    pub(crate) fn new(name: Bytes) -> Self {
        Queue {
            name,
            ready: BTreeSet::new(),
            delayed: BTreeSet::new(),
            buried: BTreeSet::new(),
            waiters: VecDeque::new(),
            reserved: 0,
            urgent: 0,
            paused_until: 0,
            pause_secs: 0,
            lease_limit: 0,
            rate: None,
            retry: None,
            producers: 0,
            consumers: 0,
            pins: 0,
            total_jobs: 0,
            cmd_delete: 0,
            cmd_pause: 0,
            total_ok: 0,
            total_failed: 0,
            total_timeouts: 0,
        }
    }

    pub fn ready_len(&self) -> usize {
        self.ready.len()
    }
    pub fn delayed_len(&self) -> usize {
        self.delayed.len()
    }
    pub fn buried_len(&self) -> usize {
        self.buried.len()
    }
    /// Jobs that ended well since start: ended ok by any protocol's complete (or moved on)
    /// or deleted (beanstalkd's way to finish one). The dashboard's "completed", in its
    /// queue table and its charts alike.
    pub fn completed(&self) -> u64 {
        self.total_ok + self.cmd_delete
    }
    /// Connections blocked waiting on this queue.
    pub fn waiting(&self) -> usize {
        self.waiters.len()
    }
    pub fn is_paused(&self, now: Millis) -> bool {
        self.paused_until > now
    }
    /// Whether another job may be leased now ([`Queue::lease_limit`]).
    pub fn has_lease_room(&self) -> bool {
        self.lease_limit == 0 || self.reserved < self.lease_limit
    }
    /// The highest-priority ready job, if any.
    pub fn head(&self) -> Option<(u32, JobId)> {
        self.ready.first().copied()
    }
    pub(crate) fn job_count(&self) -> usize {
        self.ready.len() + self.delayed.len() + self.buried.len() + self.reserved as usize
    }
    /// Nothing refers to this queue any more, so it can be forgotten.
    pub(crate) fn is_unreferenced(&self) -> bool {
        self.job_count() == 0
            && self.producers == 0
            && self.consumers == 0
            && self.pins == 0
            && self.waiters.is_empty()
            && self.paused_until != crate::PAUSED_FOREVER
            && self.lease_limit == 0
            && self.rate.is_none()
            && self.retry.is_none()
    }
}
