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
    /// Exactly as long as the body: a `Box<[u8]>` is half the size of a `Bytes` and never
    /// shares (and so never pins) a larger buffer.
    pub body: Box<[u8]>,
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
}
