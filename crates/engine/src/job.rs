//! The job record shared by every protocol.

use crate::{ConnId, JobId, Millis, QueueId};

/// Where a job is in its life cycle. Every protocol maps its own words onto these four.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum JobState {
    /// Waiting to be handed out, ordered by (priority, id).
    Ready,
    /// Held back until a point in time.
    Delayed,
    /// Leased to one connection until it finishes, gives it back, or the lease ends.
    Reserved,
    /// Set aside by a worker; only an explicit kick brings it back.
    Buried,
}

impl JobState {
    /// The lower-case word beanstalkd and the admin views use.
    pub fn as_str(self) -> &'static str {
        match self {
            JobState::Ready => "ready",
            JobState::Delayed => "delayed",
            JobState::Reserved => "reserved",
            JobState::Buried => "buried",
        }
    }
}

/// One job. Fields are public for reading; only the engine changes them.
#[derive(Clone, Debug)]
pub struct Job {
    pub id: JobId,
    pub queue: QueueId,
    /// Lower is more urgent.
    pub pri: u32,
    /// Lease length in seconds used when a reserve asks for the job's own TTR.
    pub ttr: u32,
    /// Seconds of the last put/release delay (reported by stats).
    pub delay: u32,
    pub state: JobState,
    /// Depends on the state: ready-at while delayed, lease end while reserved (0 = no end),
    /// burial order while buried (see [`Job::buried_seq`]), 0 while ready. One field for
    /// the three keeps a queued job small (memory per job is a product target).
    pub due: Millis,
    /// The connection holding the lease while reserved.
    pub owner: ConnId,
    pub created: Millis,
    /// Whether changes to this job are logged. Foreground Gearman jobs live only as long
    /// as their client waits, so they are not.
    pub durable: bool,
    pub reserves: u32,
    pub timeouts: u32,
    pub releases: u32,
    pub buries: u32,
    pub kicks: u32,
    /// The body, or where the log holds it (see [`Body`]).
    pub body: Body,
}

/// Where a job's body is. A durable job's body is already in the log, so once its record
/// is written the engine may keep only its place there (memory per queued job is a product
/// target, and the body is most of it); the broker reads it back when the job is handed out.
/// The engine itself does no I/O: it only holds one or the other.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Body {
    /// Exactly as long as the body: a `Box<[u8]>` is half the size of a `Bytes` and never
    /// shares (and so never pins) a larger buffer.
    Mem(Box<[u8]>),
    /// Only in the log.
    Log(LogRef),
}

impl Body {
    /// The body's length, known without reading it.
    pub fn len(&self) -> usize {
        match self {
            Body::Mem(b) => b.len(),
            Body::Log(r) => r.len() as usize,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The bytes when they are in memory.
    pub fn in_memory(&self) -> Option<&[u8]> {
        match self {
            Body::Mem(b) => Some(b),
            Body::Log(_) => None,
        }
    }
}

impl From<Box<[u8]>> for Body {
    fn from(b: Box<[u8]>) -> Body {
        Body::Mem(b)
    }
}

/// A body's place in the log's files, packed in 8 bytes so that [`Body`] stays as small as
/// the `Box<[u8]>` it replaces: a 48-bit position (its meaning belongs to the storage layer
/// that made it) and a 16-bit length. Bodies that do not fit stay in memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct LogRef(u64);

impl LogRef {
    /// Largest position a reference can hold.
    pub const MAX_POS: u64 = (1 << 48) - 1;

    /// A reference, or `None` when the position or the length does not fit.
    pub fn new(pos: u64, len: usize) -> Option<LogRef> {
        (pos <= Self::MAX_POS && len <= u16::MAX as usize).then_some(LogRef(pos << 16 | len as u64))
    }

    pub fn pos(self) -> u64 {
        self.0 >> 16
    }

    pub fn len(self) -> u32 {
        (self.0 & 0xffff) as u32
    }

    pub fn is_empty(self) -> bool {
        self.len() == 0
    }
}

impl Job {
    /// Burial order while buried (FIFO), so kicks and peeks take the oldest first.
    pub fn buried_seq(&self) -> u64 {
        if self.state == JobState::Buried {
            self.due
        } else {
            0
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Memory per queued job is a product target (docs/performance.md): a boxed job of at
    /// most 88 bytes fits glibc's 96-byte allocation class. A new field that breaks this
    /// costs 16 bytes on every job.
    #[test]
    fn a_job_fits_a_96_byte_allocation() {
        assert!(
            std::mem::size_of::<Job>() <= 88,
            "{}",
            std::mem::size_of::<Job>()
        );
    }

    /// A body kept in the log must cost no more than one kept in memory.
    #[test]
    fn a_body_reference_is_as_small_as_a_boxed_body() {
        assert_eq!(std::mem::size_of::<Body>(), 16);
    }

    #[test]
    fn a_log_reference_keeps_its_position_and_length() {
        let r = LogRef::new(LogRef::MAX_POS, 65535).expect("fits");
        assert_eq!((r.pos(), r.len()), (LogRef::MAX_POS, 65535));
        assert!(LogRef::new(LogRef::MAX_POS + 1, 1).is_none());
        assert!(LogRef::new(0, 65536).is_none());
    }
}
