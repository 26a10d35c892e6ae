//! Creating flow jobs, and reading them: by id, by lookup attribute, their position in
//! their stage's queue, and counts per stage.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use crate::flows::{stage_queue_name, FlowError, FlowJob, FlowStatus, Touched};
use crate::job::JobState;
use crate::{Engine, Millis};

/// Most lookup entries one job may make (an array attribute makes one per element).
pub const MAX_LOOKUP_ENTRIES: usize = 1000;

/// A flow job to create: [`Engine::create_flow_job`] takes it.
#[derive(Clone, Debug, Default)]
pub struct NewFlowJob {
    pub flow: String,
    /// 1 (most urgent) to the first stage's `priorities`.
    pub priority: u32,
    /// The job's parameters: the start of its state.
    pub params: Map<String, Value>,
    /// A client's key for this creation: creating again with it returns the first job.
    pub idempotency_key: Option<String>,
}

/// Where a flow job waits: its stage, its state there and its 1-based place in line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FlowPosition {
    pub stage: String,
    /// `waiting`, `leased`, `delayed`, `waiting_children`, `done` or `failed`.
    pub state: &'static str,
    /// Jobs handed out before it, plus one (ready: by priority then age; delayed: by
    /// ready time). None unless waiting or delayed.
    pub position: Option<u64>,
    pub ready_at: Option<Millis>,
}

/// One job of a stage listing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StageJobEntry {
    pub id: String,
    /// `waiting`, `delayed` or `leased`.
    pub state: &'static str,
    pub priority: u32,
    /// When a delayed job is ready again.
    pub ready_at: Option<Millis>,
}

/// Jobs of one stage by state (and, for waiting jobs, by priority).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StageCounts {
    pub stage: String,
    pub waiting_by_priority: BTreeMap<u32, u64>,
    pub leased: u64,
    pub delayed: u64,
    pub waiting_children: u64,
    pub done: u64,
    pub failed: u64,
}

impl Engine {
    /// Creates a flow job in its flow's first stage (fanning out at once if that stage has
    /// children). Returns its id and whether it is new: with an idempotency key already
    /// used in this flow, the existing job's id comes back and nothing changes.
    pub fn create_flow_job(
        &mut self,
        new: NewFlowJob,
        now: Millis,
    ) -> Result<(String, bool), FlowError> {
        self.saw(now);
        let def = self
            .flows
            .defs
            .get(&new.flow)
            .ok_or_else(|| FlowError::UnknownFlow(new.flow.clone()))?;
        let first = &def.stages[0];
        if !(1..=first.priorities).contains(&new.priority) {
            return Err(FlowError::BadPriority {
                priority: new.priority,
                max: first.priorities,
            });
        }
        if let Some(key) = &new.idempotency_key {
            if let Some(id) = self.flows.by_key.get(&(new.flow.clone(), key.clone())) {
                return Ok((id.clone(), false));
            }
        }
        let lookups = lookup_entries(&def.lookup_attributes, &new.params)?;
        let (stage, retention_sec) = (first.name.clone(), def.retention_sec);
        let engine_id = self.next_id;
        self.next_id += 1;
        self.total_jobs += 1;
        let id = format!("{}:{}", new.flow, crate::flows::uuid_v7(now, engine_id));
        let mut fields = new.params;
        fields.insert("flowName".into(), new.flow.clone().into());
        fields.insert("priority".into(), new.priority.into());
        fields.insert("createdAtTimestamp".into(), now.into());
        let job = FlowJob {
            id: id.clone(),
            flow: new.flow,
            engine_id,
            stage,
            status: FlowStatus::Waiting,
            priority: new.priority,
            token: 0,
            ready_at: 0,
            fields,
            parent: None,
            children: Vec::new(),
            pending_children: 0,
            idempotency_key: new.idempotency_key,
            lookups,
            created: now,
            ended: None,
            retention_sec,
        };
        self.flows.jobs.insert(id.clone(), job);
        self.flows.index(&id);
        let mut touched = Touched::default();
        touched.put(&id);
        self.enter_stage(&id, now, 0, &mut touched);
        self.log_flow_jobs(touched);
        self.serve_waiters(now);
        Ok((id, true))
    }

    /// A flow job by id.
    pub fn flow_job(&self, id: &str) -> Option<&FlowJob> {
        self.flows.jobs.get(id)
    }

    /// The flow job an engine job stands for (what a lease on a stage queue handed out).
    pub fn flow_job_of(&self, engine_id: crate::JobId) -> Option<&FlowJob> {
        self.flows.jobs.get(self.flows.by_engine.get(&engine_id)?)
    }

    /// The jobs of a flow whose lookup attribute `attr` had `value` at creation, oldest
    /// first (a number matches its decimal text).
    pub fn flow_jobs_by_lookup(&self, flow: &str, attr: &str, value: &str) -> Vec<&FlowJob> {
        let key = (flow.to_string(), attr.to_string(), value.to_string());
        self.flows
            .by_lookup
            .get(&key)
            .into_iter()
            .flatten()
            .filter_map(|(_, id)| self.flows.jobs.get(id))
            .collect()
    }

    /// The state word of a flow job: its record's status, or `leased` while a worker
    /// holds it.
    pub fn flow_state(&self, job: &FlowJob) -> &'static str {
        match self.jobs.get(&job.engine_id).map(|j| j.state) {
            Some(JobState::Reserved) => "leased",
            Some(JobState::Delayed) => "delayed",
            Some(_) => "waiting",
            None => job.status.as_str(),
        }
    }

    /// Where a flow job is in line.
    pub fn flow_position(&self, id: &str) -> Option<FlowPosition> {
        let job = self.flows.jobs.get(id)?;
        let state = self.flow_state(job);
        let (position, ready_at) = match self.jobs.get(&job.engine_id) {
            Some(e) if e.state == JobState::Ready => {
                let queue = self.queue(e.queue);
                (
                    Some(queue.ready.range(..(e.pri, e.id)).count() as u64 + 1),
                    None,
                )
            }
            Some(e) if e.state == JobState::Delayed => {
                let queue = self.queue(e.queue);
                (
                    Some(queue.delayed.range(..(e.due, e.id)).count() as u64 + 1),
                    Some(e.due),
                )
            }
            _ => (None, None),
        };
        Some(FlowPosition {
            stage: job.stage.clone(),
            state,
            position,
            ready_at,
        })
    }

    /// The jobs of one stage in hand-out order: waiting by priority then age, then
    /// delayed by ready time, then leased by id; at most `limit` of each state. For
    /// monitors (Guild's FlowMonitor lists); it costs what it returns.
    pub fn flow_stage_jobs(&self, stage: &str, limit: usize) -> Vec<StageJobEntry> {
        let Some(q) = self.queue_id(stage_queue_name(stage).as_bytes()) else {
            return Vec::new();
        };
        let mut out = Vec::new();
        for state in [JobState::Ready, JobState::Delayed, JobState::Reserved] {
            for engine_id in self.list(q, state, None, limit).ids {
                let (Some(job), Some(e)) = (self.flow_job_of(engine_id), self.jobs.get(&engine_id))
                else {
                    continue;
                };
                out.push(StageJobEntry {
                    id: job.id.clone(),
                    state: self.flow_state(job),
                    priority: job.priority,
                    ready_at: (e.state == JobState::Delayed).then_some(e.due),
                });
            }
        }
        out
    }

    /// Job counts of every stage of a flow (children included). Reads every job of the
    /// flow's stages: meant for dashboards, not for every request.
    pub fn flow_counts(&self, flow: &str) -> Result<Vec<StageCounts>, FlowError> {
        let def = self
            .flows
            .defs
            .get(flow)
            .ok_or_else(|| FlowError::UnknownFlow(flow.to_string()))?;
        let mut out: Vec<StageCounts> = def
            .stage_names()
            .into_iter()
            .map(|stage| StageCounts {
                stage,
                ..StageCounts::default()
            })
            .collect();
        for job in self.flows.jobs.values().filter(|j| j.flow == flow) {
            let Some(c) = out.iter_mut().find(|c| c.stage == job.stage) else {
                continue;
            };
            match self.flow_state(job) {
                "waiting" => *c.waiting_by_priority.entry(job.priority).or_default() += 1,
                "leased" => c.leased += 1,
                "delayed" => c.delayed += 1,
                "waiting_children" => c.waiting_children += 1,
                "done" => c.done += 1,
                _ => c.failed += 1,
            }
        }
        Ok(out)
    }

    /// The engine queue of a declared stage, if any flow declares it (children as
    /// `<stage>:<child>`).
    pub fn flow_stage_declared(&self, stage: &str) -> bool {
        self.flows.defs.values().any(|d| d.stage(stage).is_some())
    }

    /// The engine queue name of a stage (see [`stage_queue_name`]).
    pub fn flow_stage_queue(&self, stage: &str) -> String {
        stage_queue_name(stage)
    }
}

/// The lookup entries of a new job: each lookup attribute's text or number value, or each
/// such element of an array value; other values are not indexed (as in Guild).
fn lookup_entries(
    attrs: &[String],
    params: &Map<String, Value>,
) -> Result<Vec<(String, String)>, FlowError> {
    let mut out = Vec::new();
    for attr in attrs {
        let values: Vec<&Value> = match params.get(attr) {
            Some(Value::Array(items)) => items.iter().collect(),
            Some(v) => vec![v],
            None => continue,
        };
        for v in values {
            let text = match v {
                Value::String(s) => s.clone(),
                Value::Number(n) => n.to_string(),
                _ => continue,
            };
            out.push((attr.clone(), text));
        }
    }
    out.sort();
    out.dedup();
    if out.len() > MAX_LOOKUP_ENTRIES {
        return Err(FlowError::Invalid(format!(
            "a job makes at most {MAX_LOOKUP_ENTRIES} lookup entries"
        )));
    }
    Ok(out)
}
