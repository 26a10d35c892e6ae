//! Changes: the engine's account of what it did, in the order it did it.
//!
//! Storage appends them to the log; recovery feeds them back through [`crate::EngineCore::replay`].
//! Only what must survive a restart is a change: reservations and statistics are not,
//! because a restart hands reserved jobs out again anyway.

use bytes::Bytes;

use crate::{FailureHistory, JobEnd, JobId, Millis, QueuePolicy, Schedule};

/// The state a job is created in (by a put, or by a snapshot that re-creates it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PutState {
    Ready,
    /// Ready at this wall-clock time.
    Delayed(Millis),
    Buried,
}

/// One durable change.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Change {
    /// A job was created (or re-created by a snapshot).
    Put {
        id: JobId,
        queue: Bytes,
        pri: u32,
        ttr: u32,
        delay: u32,
        created: Millis,
        state: PutState,
        /// A client-chosen key, unique among the queue's live jobs (Gearman's unique id).
        unique: Option<Bytes>,
        /// Attributes a front end carries with the job (see [`crate::NewJob::attrs`]).
        attrs: Option<Bytes>,
        /// The attempt number, when it was fenced ([`crate::Engine::fence`]); 0 otherwise.
        attempt: u32,
        body: Bytes,
    },
    /// A job was removed without an outcome (beanstalkd `delete`).
    Delete { id: JobId },
    /// A job ended with an outcome: completed or failed for good.
    End { id: JobId, end: JobEnd },
    /// A leased job's attempt number, logged so that a hand-out's fencing token is never
    /// reused, also after a restart.
    Attempt { id: JobId, attempt: u32 },
    /// A job was given back, with a new priority, ready at `ready_at` (0 = now).
    Release {
        id: JobId,
        pri: u32,
        ready_at: Millis,
    },
    /// A job was buried with a new priority.
    Bury { id: JobId, pri: u32 },
    /// A buried or delayed job was made ready.
    Kick { id: JobId },
    /// A leased job moved to another queue, ready, with a new priority and (unless
    /// `None`) new attributes: one stage of a multi-stage job ended and the next began.
    Route {
        id: JobId,
        queue: Bytes,
        pri: u32,
        attrs: Option<Bytes>,
    },
    /// A flow transition or definition ([`crate::flows::FlowChange`], as bytes): every flow
    /// job one transition changed, whole, in one record.
    Flow(Bytes),
    /// A queue's whole policy, after one of its parts changed (the default policy: the
    /// queue no longer has one).
    Policy { queue: Bytes, policy: QueuePolicy },
    /// A job's failed attempts under a retry policy, whole (`None`: forgotten, as when
    /// an operator retries a dead letter).
    Failures {
        id: JobId,
        history: Option<Box<FailureHistory>>,
    },
    /// A schedule as it now stands, declaration and last tick (`None`: deleted).
    Schedule {
        name: Bytes,
        schedule: Option<Box<Schedule>>,
    },
}
