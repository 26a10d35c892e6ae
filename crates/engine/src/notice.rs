//! Notices: what the engine tells a session outside any command it sent.
//!
//! The engine owns notification (as mini-redis's `Db` owns publish/subscribe): a transition
//! that concerns a waiting or watching session emits a notice in the same call, and the
//! broker delivers it to that session's mailbox. Sessions only listen.

use std::sync::Arc;

use bytes::Bytes;

use crate::{ConnId, JobId};

/// A notice for one session.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Notice {
    pub conn: ConnId,
    pub kind: NoticeKind,
}

/// What a [`Notice`] says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NoticeKind {
    /// The session's blocked reserve was given this job.
    Reserved(JobId),
    /// The session's blocked reserve ran out of time.
    TimedOut,
    /// The session's blocked reserve ended because one of its leases is about to run out.
    DeadlineSoon,
    /// A job the sleeping session could take is ready (its wait has ended).
    Wake,
    /// The session lost this job because its lease ran out.
    LeaseExpired(JobId),
    /// A job this session watches ended, with this outcome.
    Ended(JobId, Arc<JobEnd>),
    /// The holder of a job this session watches reported something before the end.
    Update(JobId, Arc<JobUpdate>),
}

/// How a job ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EndStatus {
    /// Removed without a result (beanstalkd `delete`, an admin, a cancel).
    Deleted,
    /// Finished successfully.
    Ok,
    /// Failed for good (no more retries).
    Failed,
}

impl EndStatus {
    /// The word the admin views and the HTTP API use.
    pub fn as_str(self) -> &'static str {
        match self {
            EndStatus::Deleted => "deleted",
            EndStatus::Ok => "ok",
            EndStatus::Failed => "failed",
        }
    }
}

/// A job's outcome. Kept out of [`crate::Job`]: most jobs end without one, and a job's
/// size is a product target.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JobEnd {
    pub status: EndStatus,
    /// What the worker returned (Gearman WORK_COMPLETE data, a command's stdout, ...).
    pub result: Bytes,
    /// Why it failed, if the worker said (Gearman WORK_EXCEPTION data, stderr, ...).
    pub error: Option<Bytes>,
    /// A process's exit code, for workers that are processes (jobd, WMP command workers).
    pub exit_code: Option<i32>,
    /// The signal that ended the process, if one did.
    pub signal: Option<i32>,
}

impl JobEnd {
    /// An end with no outcome: the job was removed.
    pub fn deleted() -> JobEnd {
        JobEnd::with(EndStatus::Deleted, Bytes::new())
    }

    /// A successful end with a result.
    pub fn ok(result: Bytes) -> JobEnd {
        JobEnd::with(EndStatus::Ok, result)
    }

    /// A failure, with the worker's reason if it gave one.
    pub fn failed(error: Option<Bytes>) -> JobEnd {
        JobEnd {
            error,
            ..JobEnd::with(EndStatus::Failed, Bytes::new())
        }
    }

    fn with(status: EndStatus, result: Bytes) -> JobEnd {
        JobEnd {
            status,
            result,
            error: None,
            exit_code: None,
            signal: None,
        }
    }

    /// Whether the log needs more than a plain delete record to keep it.
    pub fn has_outcome(&self) -> bool {
        self.status != EndStatus::Deleted
            || !self.result.is_empty()
            || self.error.is_some()
            || self.exit_code.is_some()
            || self.signal.is_some()
    }
}

/// Something a job's holder reports to its watchers before the end (progress, partial
/// data, warnings), passed on as is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum JobUpdate {
    /// Work done so far, as numerator and denominator (Gearman WORK_STATUS).
    Progress { num: Bytes, den: Bytes },
    /// Partial result data (Gearman WORK_DATA).
    Data(Bytes),
    /// A warning (Gearman WORK_WARNING).
    Warning(Bytes),
}
