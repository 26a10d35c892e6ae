//! Flows: multi-stage jobs whose stages are queues and which share one JSON job state
//! (the model of Guild Queues, see docs/http-api.md), kept in the engine so that every
//! transition is one engine operation and one log record.
//!
//! A flow job waiting in a stage is an engine job (not logged itself) in the stage's
//! queue, named [`stage_queue_name`]: leases, long-polls, lease expiry and delays use the
//! engine's own machinery. Everything that must survive a restart is in the flow job's
//! record ([`FlowJob`]), logged whole by each transition ([`FlowChange`]).
//!
//! Files: `definition` (declared flows), `record` (the job record, the log record),
//! `create` (new jobs, reads, lookups), `work` (lease, heartbeat, complete, fail, delay),
//! `moves` (routing, retries, ends, lease expiry), `limiter` (rate limits), `fanout`
//! (children and fan-in), `removal` (delete, retention) and `replay` (recovery and
//! snapshots).

mod create;
mod definition;
mod fanout;
mod limiter;
mod moves;
mod record;
mod removal;
mod replay;
mod work;

use std::collections::{BTreeMap, BTreeSet, HashMap};

use bytes::Bytes;

use crate::change::Change;
use crate::{Engine, JobId, Millis, PutState};

pub use create::{FlowPosition, NewFlowJob, StageCounts, StageJobEntry};
pub use definition::{
    is_valid_name, DefinitionError, FlowDefinition, Limiter, StageDefinition, MAX_DEFINITION_BYTES,
};
pub use limiter::RATE_LIMITED;
pub use record::{uuid_v7, FlowChange, FlowJob, FlowStatus};
pub use work::{FlowLease, FlowOutcome};

/// Prefix of the engine queues that hold flow stages, so a beanstalkd tube or plain HTTP
/// queue of the same name is not a flow stage.
pub const STAGE_QUEUE_PREFIX: &str = "flows/";

/// The engine queue of a stage.
pub fn stage_queue_name(stage: &str) -> String {
    format!("{STAGE_QUEUE_PREFIX}{stage}")
}

/// Largest job state, as JSON bytes: a result that would make it larger fails the job
/// instead, and a child's final state that would is kept in its parent as a summary.
pub const MAX_STATE_BYTES: u64 = 16 << 20;

/// Why a flow operation was refused. Nothing was changed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FlowError {
    UnknownFlow(String),
    UnknownStage(String),
    /// The priority is outside 1..=the stage's priorities.
    BadPriority {
        priority: u32,
        max: u32,
    },
    NotFound(String),
    /// The job is not leased by this session (its lease ended, or another holds it).
    NotLeased(String),
    /// The token is not the job's latest lease.
    StaleToken {
        id: String,
        current: u32,
    },
    /// The request is malformed (a field that is not an object, a `nextQueue` that is not
    /// text, a delay on a stage that is not delayable, ...).
    Invalid(String),
}

impl std::fmt::Display for FlowError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FlowError::UnknownFlow(n) => write!(f, "no flow {n:?} is declared"),
            FlowError::UnknownStage(n) => write!(f, "no declared flow has a stage {n:?}"),
            FlowError::BadPriority { priority, max } => {
                write!(f, "priority {priority} is out of range 1 to {max}")
            }
            FlowError::NotFound(id) => write!(f, "no flow job {id:?}"),
            FlowError::NotLeased(id) => write!(
                f,
                "flow job {id:?} is not leased by this worker (its lease may have ended)"
            ),
            FlowError::StaleToken { id, current } => {
                write!(
                    f,
                    "stale token for flow job {id:?}: the latest lease is {current}"
                )
            }
            FlowError::Invalid(m) => f.write_str(m),
        }
    }
}

/// The flow tables kept beside the engine's jobs.
#[derive(Debug, Default)]
pub(crate) struct Flows {
    pub(crate) defs: BTreeMap<String, FlowDefinition>,
    pub(crate) jobs: HashMap<String, FlowJob>,
    /// Flow job of each engine job that stands for one.
    pub(crate) by_engine: HashMap<JobId, String>,
    /// `(flow, attribute, value)` → jobs, in creation order.
    pub(crate) by_lookup: HashMap<(String, String, String), BTreeSet<(JobId, String)>>,
    /// `(flow, idempotency key)` → job.
    pub(crate) by_key: HashMap<(String, String), String>,
    /// Ended top-level jobs by the time they are purged.
    pub(crate) retention: BTreeSet<(Millis, String)>,
    /// Rate limit counts per stage and group.
    pub(crate) limits: limiter::Limits,
    /// Bytes of each job's latest record, and their sum: what the jobs would take in a
    /// fresh log (compaction compares the log's size with it).
    pub(crate) sizes: HashMap<String, u64>,
    pub(crate) bytes: u64,
    /// The snapshot record of each ended job, by engine id, kept from the transition that
    /// ended it. An ended job no longer changes, yet every compaction copies it until it
    /// is purged: encoding it afresh each time made the server's CPU per flow grow with
    /// the finished flows it retains (docs/benchmarks.md, "Flows"). Shared, not copied.
    pub(crate) ended_records: HashMap<JobId, Bytes>,
    /// Engine jobs fenced when the engine handed them to a waiting session (see
    /// `Engine::flow_fence_served`): that session and the job's reserve count then, so the
    /// hand-out of exactly that lease does not fence again. In memory only: no lease
    /// outlives a restart.
    pub(crate) fenced_on_serve: HashMap<JobId, (crate::ConnId, u32)>,
}

/// A [`FlowChange::Jobs`] record that puts one job, given as its JSON: the same bytes as
/// encoding the enum, without copying the job to build one.
pub(crate) fn jobs_record(job_json: &[u8]) -> Vec<u8> {
    const HEAD: &[u8] = b"{\"jobs\":{\"put\":[";
    const TAIL: &[u8] = b"],\"gone\":[]}}";
    let mut out = Vec::with_capacity(HEAD.len() + job_json.len() + TAIL.len());
    out.extend_from_slice(HEAD);
    out.extend_from_slice(job_json);
    out.extend_from_slice(TAIL);
    out
}

/// The jobs one transition changed, logged together when it ends.
#[derive(Default)]
pub(crate) struct Touched {
    put: BTreeSet<String>,
    gone: Vec<String>,
}

impl Touched {
    pub(crate) fn put(&mut self, id: &str) {
        self.put.insert(id.to_string());
    }
    pub(crate) fn gone(&mut self, id: &str) {
        self.put.remove(id);
        self.gone.push(id.to_string());
    }
}

impl Flows {
    /// Records the size of a job's latest record.
    pub(crate) fn set_size(&mut self, id: &str, size: u64) {
        let old = self.sizes.insert(id.to_string(), size).unwrap_or(0);
        self.bytes = self.bytes - old + size;
    }

    /// Whether `more` fields fit in the job's state under [`MAX_STATE_BYTES`] (counted as
    /// if none replaced an old one: a bound, not an exact size).
    pub(crate) fn state_has_room(
        &self,
        id: &str,
        more: &serde_json::Map<String, serde_json::Value>,
    ) -> bool {
        let now = self.sizes.get(id).copied().unwrap_or(0);
        let added = serde_json::to_vec(more).map_or(u64::MAX, |v| v.len() as u64);
        now.saturating_add(added) <= MAX_STATE_BYTES
    }

    /// Forgets the size and the kept record of a job that is gone.
    pub(crate) fn drop_size(&mut self, id: &str, engine_id: JobId) {
        self.bytes -= self.sizes.remove(id).unwrap_or(0);
        self.forget_ended_record(engine_id);
    }

    /// Keeps the snapshot record of an ended job (`json` is the job alone), or forgets a
    /// stale one of a job that is not ended.
    pub(crate) fn keep_ended_record(&mut self, engine_id: JobId, ended: bool, json: &[u8]) {
        if ended {
            self.ended_records
                .insert(engine_id, Bytes::from(jobs_record(json)));
        } else {
            self.forget_ended_record(engine_id);
        }
    }

    pub(crate) fn forget_ended_record(&mut self, engine_id: JobId) {
        // Skip the lookup while nothing has ended (it is on every transition's path).
        if !self.ended_records.is_empty() {
            self.ended_records.remove(&engine_id);
        }
    }

    /// Adds a job's index entries (the record is already in `jobs`).
    pub(crate) fn index(&mut self, id: &str) {
        let job = &self.jobs[id];
        self.by_engine.insert(job.engine_id, id.to_string());
        for (attr, value) in &job.lookups {
            self.by_lookup
                .entry((job.flow.clone(), attr.clone(), value.clone()))
                .or_default()
                .insert((job.engine_id, id.to_string()));
        }
        if let Some(key) = &job.idempotency_key {
            self.by_key
                .insert((job.flow.clone(), key.clone()), id.to_string());
        }
        if let (Some(at), None) = (job.purge_at(), &job.parent) {
            self.retention.insert((at, id.to_string()));
        }
    }

    /// Takes a job's index entries away (the record stays in `jobs`).
    pub(crate) fn unindex(&mut self, id: &str) {
        let Some(job) = self.jobs.get(id) else {
            return;
        };
        self.by_engine.remove(&job.engine_id);
        for (attr, value) in &job.lookups {
            let key = (job.flow.clone(), attr.clone(), value.clone());
            if let Some(set) = self.by_lookup.get_mut(&key) {
                set.remove(&(job.engine_id, id.to_string()));
                if set.is_empty() {
                    self.by_lookup.remove(&key);
                }
            }
        }
        if let Some(key) = &job.idempotency_key {
            self.by_key.remove(&(job.flow.clone(), key.clone()));
        }
        if let Some(at) = job.purge_at() {
            self.retention.remove(&(at, id.to_string()));
        }
    }
}

impl FlowJob {
    /// When an ended job is purged.
    pub(crate) fn purge_at(&self) -> Option<Millis> {
        self.ended
            .map(|end| end.saturating_add(self.retention_sec.saturating_mul(1000)))
    }
}

impl Engine {
    /// Puts the engine job of a flow job into its stage's queue, ready or delayed.
    pub(crate) fn flow_enqueue(&mut self, id: &str, now: Millis) {
        let job = &self.flows.jobs[id];
        let (engine_id, pri, created) = (job.engine_id, job.priority, job.created);
        let ready_at = if job.status == FlowStatus::Delayed {
            job.ready_at
        } else {
            0
        };
        let lease_secs = self
            .flows
            .defs
            .get(&job.flow)
            .and_then(|d| d.stage(&job.stage))
            .map_or(definition::DEFAULT_LEASE_MS, |s| s.lease_ms)
            .div_ceil(1000);
        let q = self.queue_id_or_create(stage_queue_name(&job.stage).as_bytes());
        let state = if ready_at > now {
            PutState::Delayed(ready_at)
        } else {
            PutState::Ready
        };
        self.insert_job(
            engine_id,
            q,
            pri,
            lease_secs.min(u32::MAX as u64) as u32,
            0,
            created,
            state,
            crate::job::Body::Mem(Box::from(&[][..])),
            false,
        );
        self.next_id = self.next_id.max(engine_id.saturating_add(1));
    }

    /// Takes the engine job of a flow job out of its queue, if it is in one (a lease on it
    /// ends with it).
    pub(crate) fn flow_dequeue(&mut self, engine_id: JobId) {
        self.flows.fenced_on_serve.remove(&engine_id);
        if self.jobs.contains_key(&engine_id) {
            let old = self.remove_job(engine_id);
            self.drop_queue_if_unreferenced(old.queue);
        }
    }

    /// Logs the jobs a transition changed, as one record: a [`FlowChange::Jobs`], written
    /// a job at a time so each job's size is known without serializing it twice.
    pub(crate) fn log_flow_jobs(&mut self, touched: Touched) {
        if touched.put.is_empty() && touched.gone.is_empty() {
            return;
        }
        let mut out = b"{\"jobs\":{\"put\":[".to_vec();
        let mut first = true;
        for id in &touched.put {
            let Some(job) = self.flows.jobs.get(id) else {
                continue;
            };
            if !first {
                out.push(b',');
            }
            first = false;
            let start = out.len();
            serde_json::to_writer(&mut out, job).expect("flow jobs serialize");
            let size = (out.len() - start) as u64;
            let (engine_id, ended) = (job.engine_id, job.status.is_end());
            self.flows
                .keep_ended_record(engine_id, ended, &out[start..]);
            self.flows.set_size(id, size);
        }
        out.extend_from_slice(b"],\"gone\":");
        serde_json::to_writer(&mut out, &touched.gone).expect("ids serialize");
        out.extend_from_slice(b"}}");
        self.changes.push(Change::Flow(Bytes::from(out)));
    }

    /// Declares a flow (or replaces its definition), logged. The caller has validated it.
    /// Jobs already in the flow follow the new definition from their next transition.
    pub fn define_flow(&mut self, def: FlowDefinition) {
        if self.flows.defs.get(&def.name) == Some(&def) {
            return;
        }
        let change = FlowChange::Define(def.clone());
        self.changes
            .push(Change::Flow(Bytes::from(change.encode())));
        self.flows.defs.insert(def.name.clone(), def);
    }

    /// A declared flow.
    pub fn flow_definition(&self, name: &str) -> Option<&FlowDefinition> {
        self.flows.defs.get(name)
    }

    /// Every declared flow, by name.
    pub fn flow_definitions(&self) -> impl Iterator<Item = &FlowDefinition> + '_ {
        self.flows.defs.values()
    }

    /// Whether an engine job stands for a flow job: those change only by flow
    /// transitions, so the plain operations (finish, route, bury) refuse them.
    pub fn is_flow_engine_job(&self, id: JobId) -> bool {
        !self.flows.by_engine.is_empty() && self.flows.by_engine.contains_key(&id)
    }

    /// The stage definition a flow job follows now.
    pub(crate) fn stage_of(&self, job: &FlowJob) -> Option<&StageDefinition> {
        self.flows.defs.get(&job.flow)?.stage(&job.stage)
    }
}
