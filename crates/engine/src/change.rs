//! Changes: the engine's account of what it did, in the order it did it.
//!
//! Storage appends them to the log; recovery feeds them back through [`crate::Engine::replay`].
//! Only what must survive a restart is a change: reservations and statistics are not,
//! because a restart hands reserved jobs out again anyway.

use bytes::Bytes;

use crate::{JobId, Millis};

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
        body: Bytes,
    },
    /// A job ended: deleted, completed or failed for good.
    Delete { id: JobId },
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
}
