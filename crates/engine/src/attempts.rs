//! How each lease ended, for the operator's view of a job's attempts (the dashboard's job
//! page): a release, a bury, an expiry, a disconnect or the job's end, with who held it and
//! the error a failure carried.
//!
//! Recorded only where a lease already ends, and only while the caller times leases (the
//! broker does; see [`crate::lease_timing`]): the caller takes the records with the lease
//! ends when it commits, and decides what to keep. Nothing is kept in the engine or in
//! the [`crate::Job`].

use bytes::Bytes;

use crate::{ConnId, Engine, JobId};

/// How a lease ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LeaseClose {
    /// The holder finished the job ok (or moved it on to another queue).
    Ok,
    /// The holder finished the job failed.
    Failed,
    /// The holder deleted the job.
    Deleted,
    /// The holder gave the job back.
    Released,
    /// The holder buried the job.
    Buried,
    /// The lease ran out.
    Expired,
    /// The holder's session ended.
    Disconnected,
}

impl LeaseClose {
    /// Its name in the admin API.
    pub fn as_str(self) -> &'static str {
        match self {
            LeaseClose::Ok => "ok",
            LeaseClose::Failed => "failed",
            LeaseClose::Deleted => "deleted",
            LeaseClose::Released => "released",
            LeaseClose::Buried => "buried",
            LeaseClose::Expired => "lease expired",
            LeaseClose::Disconnected => "disconnected",
        }
    }
}

/// One lease that ended, as the caller takes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaseClosed {
    pub job: JobId,
    /// The session that held it.
    pub holder: ConnId,
    pub how: LeaseClose,
    /// The lease's stamp (the caller's clock); `None` when it began and ended between two
    /// stamps.
    pub started: Option<u64>,
    /// The error text of a failure, when the holder gave one.
    pub error: Option<Bytes>,
}

impl Engine {
    /// Records that `holder`'s lease on `job`, stamped `stamp` (`None`: the job was not
    /// leased, nothing is recorded), ended as `how`.
    pub(crate) fn lease_closed(
        &mut self,
        job: JobId,
        holder: ConnId,
        stamp: Option<u64>,
        how: LeaseClose,
        error: Option<&Bytes>,
    ) {
        let Some(stamp) = stamp else {
            return;
        };
        if !self.timing.on {
            return;
        }
        self.timing.closed.push(LeaseClosed {
            job,
            holder,
            how,
            started: (stamp != crate::lease_timing::UNSTAMPED).then_some(stamp),
            error: error.cloned(),
        });
    }

    /// Takes the leases that ended since the last call, in order.
    pub(crate) fn take_lease_closes(&mut self) -> std::vec::Drain<'_, LeaseClosed> {
        self.timing.closed.drain(..)
    }
}
