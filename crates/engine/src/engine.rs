//! The engine: the tables every operation works on, and what the caller takes out after one.
//!
//! The operations live beside it, one file per concept: `queues` (names, references,
//! pauses, lease limits), `jobs` (puts, unique keys, attributes, peeks), `waits` (reserving
//! and blocked reserves), `leases` (release, bury, touch, kick, fencing, disconnects),
//! `ends` (how a job ends, and who watches for it), `states` (moving a job between the
//! structures of its states), `clock` (timers), `listing` (paged admin views) and
//! `recovery` (replay and snapshots).

use std::collections::{HashMap, HashSet};

use bytes::Bytes;

use crate::change::Change;
use crate::id_hash::IdMap;
use crate::job_table::JobTable;
use crate::notice::Notice;
use crate::queue::{Queue, QueueId};
use crate::timers::Timers;
use crate::waits::Wait;
use crate::{ConnId, JobId, Millis};

/// What the engine knows about one session: the jobs it holds, its blocked reserve, and
/// the jobs it watches. A session is whatever the caller makes it: a TCP connection, or a
/// worker token of a front end whose peers are not connections (a ZeroMQ worker, an HTTP
/// client), as long as its id comes from the same counter.
#[derive(Debug, Default)]
pub(crate) struct Session {
    /// Held jobs, each with its lease's stamp (see [`crate::lease_timing`]): kept with the
    /// lease, so only leased jobs pay for it.
    pub(crate) reserved: IdMap<JobId, u64>,
    pub(crate) wait: Option<Wait>,
    /// Jobs this session watches, with how many times (a Gearman client may attach twice).
    pub(crate) watching: IdMap<JobId, u32>,
}

impl Session {
    pub(crate) fn is_empty(&self) -> bool {
        self.reserved.is_empty() && self.wait.is_none() && self.watching.is_empty()
    }
}

/// Per-state job counts across all queues.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    pub urgent: u64,
    pub ready: u64,
    pub reserved: u64,
    pub delayed: u64,
    pub buried: u64,
}

/// All jobs and queues, and every operation the protocols need: puts, reserves, releases,
/// ends, watches, pauses, lease limits, fencing, flows, listings, counts and lookups.
///
/// This is what a front end sees (through the broker's transaction). It has no way to take
/// out what its operations produce: the changes for the log, the notices for sessions, the
/// clock, lease timing, body places, replay and snapshots belong to the
/// [`EngineCore`](crate::EngineCore) that owns it, so every change a front end makes
/// reaches the log through the broker's commit. An `Engine` exists only inside an
/// `EngineCore`.
#[derive(Debug)]
pub struct Engine {
    /// Boxed so the table's buckets stay small: a hash table is up to half empty after it
    /// grows, and empty buckets of a 120-byte value cost more than the job's body.
    pub(crate) jobs: JobTable,
    pub(crate) queues: Vec<Option<Queue>>,
    pub(crate) free_queue_slots: Vec<QueueId>,
    pub(crate) by_name: HashMap<Bytes, QueueId>,
    /// Listing order of queues: creation order, a removed queue's slot taken by the last.
    pub(crate) order: Vec<QueueId>,
    pub(crate) sessions: IdMap<ConnId, Session>,
    pub(crate) timers: Timers,
    pub(crate) next_id: JobId,
    pub(crate) bury_seq: u64,
    pub(crate) changes: Vec<Change>,
    pub(crate) notices: Vec<Notice>,
    /// Queues that gained ready jobs (or lease room) since waiters were last served.
    pub(crate) to_serve: Vec<QueueId>,
    /// Jobs created since start (recovered ones not included); read through
    /// [`Engine::total_jobs`], so only the engine counts.
    pub(crate) total_jobs: u64,
    /// Leases that ran out since start; read through [`Engine::job_timeouts`].
    pub(crate) job_timeouts: u64,
    pub(crate) live_bytes: u64,
    /// Unique keys of the jobs that have one, both ways.
    pub(crate) unique_of: HashMap<JobId, Bytes>,
    pub(crate) by_unique: HashMap<(QueueId, Bytes), JobId>,
    /// Attributes of the jobs that have them (kept out of [`Job`], which most jobs fill
    /// without: memory per job is a product target).
    pub(crate) attrs: HashMap<JobId, Bytes>,
    /// Sessions watching each watched job, in the order they started (duplicates kept).
    pub(crate) watchers: HashMap<JobId, Vec<ConnId>>,
    /// Jobs whose attempt number was logged by [`Engine::fence`], so snapshots keep it.
    pub(crate) fenced: HashSet<JobId>,
    /// Failed attempts of jobs under a retry policy (see [`crate::retry`]).
    pub(crate) failures: HashMap<JobId, crate::FailureHistory>,
    /// The latest time an operation passed in: operations that take no time of their own
    /// (a delete) serve waiters as of then.
    pub(crate) last_now: Millis,
    /// Flow definitions and flow jobs (see [`crate::flows`]).
    pub(crate) flows: crate::flows::Flows,
    /// Periodic jobs' schedules (see [`crate::schedules`]).
    pub(crate) schedules: crate::schedules::Schedules,
    /// Lease stamps waiting for the caller's clock, and completed leases (see
    /// [`crate::lease_timing`]).
    pub(crate) timing: crate::lease_timing::LeaseTiming,
    /// Written bodies still kept in memory (see [`crate::hot_bodies`]).
    pub(crate) hot: crate::hot_bodies::HotBodies,
    /// Bodies replaced by their places in the log, not yet freed: the caller frees them
    /// after it lets go of the engine's lock ([`crate::EngineCore::move_dropped_bodies`]).
    pub(crate) dropped: Vec<Box<[u8]>>,
    /// Queue lists of ended waits, emptied, for the next waits to fill: a consumer waits
    /// once per job, and a new list each time was an allocation and a free per job.
    pub(crate) spare_wait_lists: Vec<Vec<QueueId>>,
    /// Whether jobs may be handed out: off while a leader cannot be sure its lease holds
    /// ([`crate::EngineCore::set_handing_out`]).
    pub(crate) handing_out: bool,
}

impl Engine {
    /// An empty engine; built only by [`crate::EngineCore::new`].
    pub(crate) fn new() -> Self {
        Engine {
            jobs: JobTable::default(),
            queues: Vec::new(),
            free_queue_slots: Vec::new(),
            by_name: HashMap::new(),
            order: Vec::new(),
            sessions: IdMap::default(),
            timers: Timers::default(),
            next_id: 1,
            bury_seq: 0,
            changes: Vec::new(),
            notices: Vec::new(),
            to_serve: Vec::new(),
            spare_wait_lists: Vec::new(),
            total_jobs: 0,
            job_timeouts: 0,
            live_bytes: 0,
            unique_of: HashMap::new(),
            by_unique: HashMap::new(),
            attrs: HashMap::new(),
            watchers: HashMap::new(),
            fenced: HashSet::new(),
            failures: HashMap::new(),
            last_now: 0,
            flows: crate::flows::Flows::default(),
            schedules: Default::default(),
            timing: crate::lease_timing::LeaseTiming::default(),
            hot: Default::default(),
            dropped: Vec::new(),
            handing_out: true,
        }
    }

    /// Takes the changes made since the last call, in order, for the log.
    pub(crate) fn take_changes(&mut self) -> std::vec::Drain<'_, Change> {
        self.changes.drain(..)
    }

    /// Whether there are changes waiting for the log.
    pub(crate) fn has_changes(&self) -> bool {
        !self.changes.is_empty()
    }

    /// Takes the notices for connections produced since the last call.
    pub(crate) fn take_notices(&mut self) -> std::vec::Drain<'_, Notice> {
        self.notices.drain(..)
    }

    /// Job counts by state across all queues.
    pub fn counts(&self) -> Counts {
        let mut c = Counts::default();
        for queue in self.queues() {
            c.urgent += queue.urgent as u64;
            c.ready += queue.ready.len() as u64;
            c.reserved += queue.reserved as u64;
            c.delayed += queue.delayed.len() as u64;
            c.buried += queue.buried.len() as u64;
        }
        c
    }

    /// Jobs created since start, over every queue (recovered ones not included): beanstalkd's
    /// `total-jobs`, the dashboard's jobs created.
    pub fn total_jobs(&self) -> u64 {
        self.total_jobs
    }

    /// Leases that ran out since start: beanstalkd's `job-timeouts`.
    pub fn job_timeouts(&self) -> u64 {
        self.job_timeouts
    }

    /// Remembers the time an operation was given (see `last_now`).
    pub(crate) fn saw(&mut self, now: Millis) {
        if now > self.last_now {
            self.last_now = now;
        }
    }

    /// Drops a session's entry once it holds, waits for and watches nothing, so sessions
    /// that come and go (HTTP requests, worker tokens) leave nothing behind.
    pub(crate) fn forget_idle_session(&mut self, conn: ConnId) {
        if self.sessions.get(&conn).is_some_and(Session::is_empty) {
            self.sessions.remove(&conn);
        }
    }
}
