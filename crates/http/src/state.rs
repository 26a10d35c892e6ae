//! What every handler shares.

use std::sync::Arc;

use jobyard_broker::{Broker, ProtocolMetrics};
use jobyard_engine::ConnId;
use jobyard_net::Gate;

use crate::workers::Workers;
use crate::Config;

/// The front end's shared state, cloned into every request (it is a few `Arc`s).
#[derive(Clone)]
pub struct Api {
    pub(crate) inner: Arc<Inner>,
    /// Cached from the config: extractors read it on every request.
    pub(crate) request_limit: usize,
}

/// See [`Api`].
pub struct Inner {
    /// The engine every request works on.
    pub broker: Arc<Broker>,
    /// The front end's settings.
    pub config: Config,
    /// Places under the connection limit, and the shutdown signal.
    pub gate: Gate,
    /// The `http` protocol's counters.
    pub metrics: Arc<ProtocolMetrics>,
    /// The live worker sessions.
    pub workers: Workers,
    /// The session requests that hold no lease act as (a delete of a job nobody holds).
    /// It never leases, waits or watches, so nothing is ever sent to it.
    pub anonymous: ConnId,
}

impl std::ops::Deref for Api {
    type Target = Inner;
    fn deref(&self) -> &Inner {
        &self.inner
    }
}

/// Names of the counted commands, in [`Command`] order (the `http` protocol's metrics).
pub const COMMAND_NAMES: [&str; 42] = [
    "put",
    "get-job",
    "delete-job",
    "job-result",
    "lease",
    "heartbeat",
    "complete",
    "fail",
    "release",
    "create-worker",
    "delete-worker",
    "list-queues",
    "queue-counts",
    "list-jobs",
    "health",
    "route",
    "declare-flow",
    "list-flows",
    "flow-counts",
    "create-flow-job",
    "get-flow-job",
    "flow-jobs-by-key",
    "delete-flow-job",
    "flow-job-position",
    "stage-jobs",
    "lease-stage",
    "flow-heartbeat",
    "flow-complete",
    "flow-fail",
    "flow-delay",
    "lookup-flow-jobs",
    "queue-policy",
    "set-queue-policy",
    "dead-letters",
    "retry-dead-letters",
    "discard-dead-letters",
    "list-schedules",
    "get-schedule",
    "declare-schedule",
    "delete-schedule",
    "pause-schedule",
    "resume-schedule",
];

/// A counted command: its index in [`COMMAND_NAMES`].
#[derive(Clone, Copy)]
pub enum Command {
    Put,
    GetJob,
    DeleteJob,
    JobResult,
    Lease,
    Heartbeat,
    Complete,
    Fail,
    Release,
    CreateWorker,
    DeleteWorker,
    ListQueues,
    QueueCounts,
    ListJobs,
    Health,
    Route,
    DeclareFlow,
    ListFlows,
    FlowCounts,
    CreateFlowJob,
    GetFlowJob,
    FlowJobsByKey,
    DeleteFlowJob,
    FlowJobPosition,
    StageJobs,
    LeaseStage,
    FlowHeartbeat,
    FlowComplete,
    FlowFail,
    FlowDelay,
    LookupFlowJobs,
    QueuePolicy,
    SetQueuePolicy,
    DeadLetters,
    RetryDeadLetters,
    DiscardDeadLetters,
    ListSchedules,
    GetSchedule,
    DeclareSchedule,
    DeleteSchedule,
    PauseSchedule,
    ResumeSchedule,
}

impl Api {
    /// Counts a command in the `http` protocol's metrics.
    pub(crate) fn count(&self, c: Command) {
        self.metrics.count(c as usize);
    }
}
