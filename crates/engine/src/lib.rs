//! The jobyard engine: every protocol's jobs live here.
//!
//! The engine is pure logic. It never reads a clock, a socket or a file: callers pass the
//! current time in, and take out what the engine produced — [`Change`]s for the durable log
//! and [`Notice`]s for sessions that are waiting or watching. That keeps it deterministic,
//! which is what lets the property tests compare it against a model and lets recovery
//! rebuild it by replaying the very changes it emitted.
//!
//! One namespace of queues serves every protocol: a beanstalkd tube, a Gearman function
//! and a jobd target of the same name are the same [`Queue`].
//!
//! Two types split who may do what. [`Engine`] is every operation a protocol front end
//! performs; [`EngineCore`] owns it and adds the plumbing only its owner — the broker,
//! recovery, snapshots, tests — may call: taking the changes and notices out, the clock,
//! lease timing, body places, replay and snapshots. Front ends get an `&mut Engine` and no
//! way back to the `EngineCore`, so none can drain changes past the log.

mod attempts;
mod change;
mod clock;
mod ends;
mod engine;
mod engine_core;
pub mod flows;
mod hot_bodies;
mod id_hash;
mod job;
mod job_handle;
mod job_table;
mod jobs;
mod lease_timing;
mod leases;
mod listing;
mod notice;
mod policy;
mod queue;
mod queues;
mod rate;
mod recovery;
mod retry;
mod routing;
mod schedules;
mod states;
mod timers;
mod waits;

pub use attempts::{LeaseClose, LeaseClosed};
pub use change::{Change, PutState};
pub use engine::{Counts, Engine};
pub use engine_core::EngineCore;
pub use job::{Body, Job, JobState, LogRef};
pub use job_handle::push_job_handle;
pub use jobs::{NewJob, PutOutcome, KEEP_DROPPED_LIST};
pub use lease_timing::{LeaseEnd, LeaseOutcome};
pub use listing::{Cursor, Page};
pub use notice::{EndStatus, JobEnd, JobUpdate, Notice, NoticeKind};
pub use policy::{Pause, QueuePolicy};
pub use queue::{Queue, QueueId};
pub use rate::{BadRateLimit, RateLimit};
pub use retry::{Backoff, Failure, FailureHistory, RetryPolicy, HISTORY_KEPT};
pub use schedules::{Fired, MissedTicks, Overlap, Schedule, Timing};
pub use waits::{Lease, ReserveOutcome, WaitMode};

/// Identifies a job for its whole life; never reused, and continued across restarts.
pub type JobId = u64;

/// Identifies a session to the engine (a connection, or a worker token of a front end
/// whose peers are not connections), so leases, waits and watches have an owner.
pub type ConnId = u64;

/// Wall-clock milliseconds since the Unix epoch. Wall clock (not monotonic) because delayed
/// jobs are persisted with absolute ready times that must mean the same after a restart.
pub type Millis = u64;

/// Priorities below this count as "urgent" in statistics (beanstalkd's threshold).
pub const URGENT_PRIORITY: u32 = 1024;

/// Priority of a job put without one where the protocol has no default of its own (the
/// HTTP API, periodic jobs' schedules): Gearman's normal priority, so these jobs and
/// Gearman's of the same queue are served in arrival order.
pub const DEFAULT_PRIORITY: u32 = 1024;

/// Seconds a lease lasts when neither the job nor the lease request says (the HTTP API,
/// periodic jobs' schedules).
pub const DEFAULT_TTR: u32 = 60;

/// How long before a lease ends its holder is warned instead of being given more work.
pub const SAFETY_MARGIN_MS: Millis = 1000;

/// A paused queue with this `paused_until` stays paused until resumed.
pub const PAUSED_FOREVER: Millis = Millis::MAX;
