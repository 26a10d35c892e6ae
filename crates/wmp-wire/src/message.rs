//! The WMP/1 commands as typed values (spec §3.4). Decoding checks every required header
//! and value here, so code that receives a [`Message`] never re-validates.

use bytes::Bytes;

use crate::headers::Headers;

/// Routing path: the frames before the delimiter. At a manager it identifies one worker
/// (ROUTER id of the neighbour first, the worker's own id last); at a worker it is the
/// stack of device aliases back to the manager (empty for a direct connection).
pub type Path = Vec<Bytes>;

/// The outcome a worker reports in DONE.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Status {
    /// The job ran and succeeded; the payload is the result.
    Ok,
    /// The job ran and failed; the payload is the error text. Counts as an attempt.
    Fail,
    /// The worker did not run the job; requeued at once, not counted as a failure.
    Reject,
}

impl Status {
    /// The wire spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Ok => "ok",
            Status::Fail => "fail",
            Status::Reject => "reject",
        }
    }

    /// Parses the exact lowercase spelling; anything else makes DONE malformed.
    pub fn parse(s: &str) -> Option<Status> {
        match s {
            "ok" => Some(Status::Ok),
            "fail" => Some(Status::Fail),
            "reject" => Some(Status::Reject),
            _ => None,
        }
    }
}

/// READY (W→M): "I have a free slot for one job".
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Ready {
    /// Queues the worker serves; `None` means any queue.
    pub roles: Option<Vec<String>>,
    /// A display name, for the manager's logs and listings only.
    pub worker: Option<String>,
}

/// WAKE (M→W): "there may be a job for you".
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Wake {
    /// The queue that has a ready job.
    pub queue: Option<String>,
    /// The manager's name.
    pub manager: Option<String>,
}

/// GIVE (W→M): "give me one job; I hold a slot locked for you under `lock`".
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Give {
    /// Opaque token, echoed in TAKE or NO.
    pub lock: String,
    /// The worker's roles again, so a manager that forgot the READY still filters by them.
    pub roles: Option<Vec<String>>,
    /// The queue from the WAKE this answers.
    pub queue: Option<String>,
}

/// TAKE (M→W): one job, leased to the worker until `timeout_ms` passes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Take {
    /// The lock from GIVE.
    pub lock: String,
    /// The origin manager's name; DONE echoes it.
    pub manager: String,
    /// The manager's job id.
    pub job: u64,
    /// Which hand-out of this job this is (1-based); DONE echoes it, a stale one is ignored.
    pub attempt: u64,
    /// The job's queue.
    pub queue: String,
    /// Lease length in milliseconds.
    pub timeout_ms: u64,
    /// The job body.
    pub body: Bytes,
}

/// NO (M→W): "nothing for you after all; release the lock".
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct No {
    /// The lock from GIVE.
    pub lock: String,
    /// The manager's name.
    pub manager: Option<String>,
}

/// DONE (W→M): the outcome of one hand-out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Done {
    /// Echoed from TAKE.
    pub manager: String,
    /// Echoed from TAKE.
    pub job: u64,
    /// Echoed from TAKE.
    pub attempt: u64,
    /// What happened.
    pub status: Status,
    /// A short machine-readable error code (`fail`, optional).
    pub error: Option<String>,
    /// The result (`ok`) or error text (`fail`); empty for `reject`.
    pub result: Bytes,
}

/// STATUS (W→M, optional extension): progress, which also extends the lease.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Progress {
    /// Echoed from TAKE.
    pub manager: String,
    /// Echoed from TAKE.
    pub job: u64,
    /// Echoed from TAKE.
    pub attempt: u64,
    /// Work done so far, in units of `den`.
    pub num: Option<u64>,
    /// Total work.
    pub den: Option<u64>,
}

/// CANCEL (M→W, optional extension): the result is no longer wanted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cancel {
    /// The manager's name.
    pub manager: String,
    /// The job id.
    pub job: u64,
    /// The hand-out to cancel.
    pub attempt: u64,
}

/// One WMP/1 command with its typed headers (and payload, for TAKE and DONE).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    /// See [`Ready`].
    Ready(Ready),
    /// See [`Wake`].
    Wake(Wake),
    /// See [`Give`].
    Give(Give),
    /// See [`Take`].
    Take(Take),
    /// See [`No`].
    No(No),
    /// See [`Done`].
    Done(Done),
    /// See [`Progress`] (wire name `STATUS`).
    Status(Progress),
    /// See [`Cancel`].
    Cancel(Cancel),
}

impl Command {
    /// The wire name.
    pub fn name(&self) -> &'static str {
        match self {
            Command::Ready(_) => "READY",
            Command::Wake(_) => "WAKE",
            Command::Give(_) => "GIVE",
            Command::Take(_) => "TAKE",
            Command::No(_) => "NO",
            Command::Done(_) => "DONE",
            Command::Status(_) => "STATUS",
            Command::Cancel(_) => "CANCEL",
        }
    }
}

/// A whole message: where it goes or came from, the command, and any headers the command
/// does not define (kept so extensions such as TAKE's `handle` or `priority` travel along).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    /// The routing path (frames before the delimiter).
    pub path: Path,
    /// The command with its typed headers.
    pub command: Command,
    /// Headers not defined for this command; encoded after the defined ones.
    pub extra: Headers,
}

impl Message {
    /// A message with no extra headers.
    pub fn new(path: Path, command: Command) -> Message {
        Message {
            path,
            command,
            extra: Headers::new(),
        }
    }
}
