//! A worker's side of a flow job: lease, heartbeat, complete, fail, delay; and what the
//! server does when a lease runs out. Each is one engine operation and one log record.

use serde_json::{Map, Value};

use crate::flows::{FlowChange, FlowError, FlowStatus, Touched};
use crate::{ConnId, Engine, JobId, Millis};

/// Fields a worker always gets (Guild adds them to every queue's `attributesToGet`).
const DEFAULT_ATTRIBUTES: [&str; 3] = ["flowName", "priority", "correlationId"];

/// A flow job handed to a worker: what its function receives, and its lease.
#[derive(Clone, Debug, PartialEq)]
pub struct FlowLease {
    pub id: String,
    pub stage: String,
    /// The fencing token every later call about this lease names.
    pub token: u32,
    /// When the lease ends unless a heartbeat extends it.
    pub deadline: Millis,
    /// `{ id, ...attributesToGet, retries }`, as Guild's worker functions receive it.
    pub job: Map<String, Value>,
}

/// Where a transition left a flow job.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FlowOutcome {
    pub id: String,
    /// The job's stage now (its last one once ended).
    pub stage: String,
    /// `waiting`, `delayed`, `waiting_children`, `done` or `failed`.
    pub status: &'static str,
}

impl Engine {
    /// Turns a lease the engine made on a stage queue (`reserve`) into a flow lease: takes
    /// the next fencing token (logged before the worker hears of it), sets the lease to
    /// `lease_ms` (the stage's `leaseMs` when `None`) and projects the job for the worker.
    /// A lease the engine already fenced when it served a waiting session
    /// ([`Engine::flow_fence_served`]) is only projected. `None` if `engine_id` is not a
    /// flow job this session holds, or if the stage's limiter put it off instead.
    pub fn flow_hand_out(
        &mut self,
        conn: ConnId,
        engine_id: JobId,
        lease_ms: Option<Millis>,
        now: Millis,
    ) -> Option<FlowLease> {
        self.saw(now);
        if !self.holds(conn, engine_id) {
            return None;
        }
        let id = self.flows.by_engine.get(&engine_id)?.clone();
        let this_lease = (conn, self.jobs[&engine_id].reserves);
        if self.flows.fenced_on_serve.remove(&engine_id) != Some(this_lease) {
            self.flow_fence(conn, engine_id, &id, lease_ms, now)?;
        }
        Some(self.flow_lease(&id, engine_id))
    }

    /// The engine just handed flow job `engine_id` to `conn`, a session that was waiting
    /// for one, in the transition that made the job ready (a create, a complete, a
    /// timer): fences it in that same transition, so its token is logged with it — one
    /// log write, and one fsync to wait for, instead of a second one when the waiting
    /// worker takes it. A stage with a limiter is left to [`Engine::flow_hand_out`],
    /// which may put the job off instead of handing it out.
    pub(crate) fn flow_fence_served(
        &mut self,
        conn: ConnId,
        engine_id: JobId,
        lease: crate::Lease,
        now: Millis,
    ) {
        let Some(id) = self.flows.by_engine.get(&engine_id).cloned() else {
            return;
        };
        let limited = self
            .stage_of(&self.flows.jobs[&id])
            .is_some_and(|s| s.limiter.is_some());
        if limited {
            return;
        }
        let lease_ms = match lease {
            crate::Lease::For(ms) => Some(ms),
            _ => None,
        };
        if self
            .flow_fence(conn, engine_id, &id, lease_ms, now)
            .is_some()
        {
            let this_lease = (conn, self.jobs[&engine_id].reserves);
            self.flows.fenced_on_serve.insert(engine_id, this_lease);
        }
    }

    /// Admits a leased flow job past its stage's limiter (or puts it off: `None`), sets its
    /// lease length and takes its next token, logged.
    fn flow_fence(
        &mut self,
        conn: ConnId,
        engine_id: JobId,
        id: &str,
        lease_ms: Option<Millis>,
        now: Millis,
    ) -> Option<()> {
        // Only what is needed of the stage, not a copy of its whole definition.
        let (limiter, stage_lease_ms) = match self.stage_of(&self.flows.jobs[id]) {
            Some(s) => (s.limiter.clone(), s.lease_ms),
            None => (None, 180_000),
        };
        let mut fields_changed = false;
        if let Some(limiter) = &limiter {
            match self.flow_admit(id, limiter, now) {
                Ok(changed) => fields_changed = changed,
                Err(ready_at) => {
                    self.flow_postpone(id, engine_id, ready_at, crate::flows::RATE_LIMITED, now);
                    return None;
                }
            }
        }
        let ms = lease_ms.unwrap_or(stage_lease_ms);
        self.touch_for(conn, engine_id, ms, now);
        let job = self.flows.jobs.get_mut(id).expect("indexed job exists");
        job.token += 1;
        let token = job.token;
        if fields_changed {
            let mut touched = Touched::default();
            touched.put(id);
            self.log_flow_jobs(touched);
        } else {
            // Only the token moved: a small record, however large the job state is.
            let change = FlowChange::Token {
                id: id.to_string(),
                token,
            };
            self.changes
                .push(crate::Change::Flow(bytes::Bytes::from(change.encode())));
        }
        Some(())
    }

    /// A fenced flow lease as the worker gets it: `{ id, ...attributesToGet, retries }`.
    fn flow_lease(&self, id: &str, engine_id: JobId) -> FlowLease {
        let job = &self.flows.jobs[id];
        let stage = self.stage_of(job);
        let mut out = Map::new();
        out.insert("id".into(), id.into());
        let mut keys: Vec<&str> = DEFAULT_ATTRIBUTES.to_vec();
        if let Some(stage) = stage {
            keys.extend(stage.attributes_to_get.iter().map(String::as_str));
            if stage.delayable {
                keys.push("delay");
            }
            if let Some(group) = stage
                .limiter
                .as_ref()
                .and_then(|l| l.group_job_key.as_deref())
            {
                keys.push(group);
            }
        }
        for key in keys {
            let value = job.fields.get(key).cloned().unwrap_or(Value::Null);
            out.insert(key.to_string(), value);
        }
        out.insert("retries".into(), job.retries().into());
        FlowLease {
            id: id.to_string(),
            stage: job.stage.clone(),
            token: job.token,
            deadline: self.jobs[&engine_id].due,
            job: out,
        }
    }

    /// Checks that `conn` holds flow job `id` under `token`; returns its engine job.
    pub fn flow_holder(&self, conn: ConnId, id: &str, token: u32) -> Result<JobId, FlowError> {
        let job = self
            .flows
            .jobs
            .get(id)
            .ok_or_else(|| FlowError::NotFound(id.to_string()))?;
        if token != job.token {
            return Err(FlowError::StaleToken {
                id: id.to_string(),
                current: job.token,
            });
        }
        if !self.holds(conn, job.engine_id) {
            return Err(FlowError::NotLeased(id.to_string()));
        }
        Ok(job.engine_id)
    }

    /// Extends a lease to `lease_ms` from now (the stage's `leaseMs` when `None`); returns
    /// the new deadline.
    pub fn flow_heartbeat(
        &mut self,
        conn: ConnId,
        id: &str,
        token: u32,
        lease_ms: Option<Millis>,
        now: Millis,
    ) -> Result<Millis, FlowError> {
        let engine_id = self.flow_holder(conn, id, token)?;
        let ms = lease_ms.unwrap_or_else(|| {
            self.stage_of(&self.flows.jobs[id])
                .map_or(180_000, |s| s.lease_ms)
        });
        self.touch_for(conn, engine_id, ms, now);
        Ok(self.jobs[&engine_id].due)
    }

    /// Completes the job's stage: merges `result` into its state, then routes it to the
    /// result's `nextQueue` or the stage's `next` (fanning out if that stage has
    /// children), or finishes the flow (`done` set by the server). A `nextQueue` the flow
    /// does not have records the job as failed with that reason.
    pub fn flow_complete(
        &mut self,
        conn: ConnId,
        id: &str,
        token: u32,
        mut result: Map<String, Value>,
        now: Millis,
    ) -> Result<FlowOutcome, FlowError> {
        self.saw(now);
        let engine_id = self.flow_holder(conn, id, token)?;
        let next_queue = match result.remove("nextQueue") {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) => Some(s),
            Some(_) => return Err(FlowError::Invalid("`nextQueue` must be text".into())),
        };
        self.held_lease_completed(engine_id, crate::LeaseOutcome::Ok);
        self.flow_dequeue(engine_id);
        let mut touched = Touched::default();
        touched.put(id);
        if !self.flows.state_has_room(id, &result) {
            let msg = format!(
                "the result would make the job state larger than {} bytes",
                super::MAX_STATE_BYTES
            );
            self.flow_finish(id, FlowStatus::Failed, Some(msg), now, 0, &mut touched);
            self.log_flow_jobs(touched);
            self.serve_waiters(now);
            return Ok(self.flow_outcome(id));
        }
        let job = self.flows.jobs.get_mut(id).expect("held job exists");
        let stage_name = job.stage.clone();
        job.fields.extend(result);
        job.fields
            .insert("completed-queue".into(), stage_name.clone().into());
        let def = self.flows.defs.get(&job.flow);
        let stage = def.and_then(|d| d.stage(&stage_name));
        let is_child = stage_name.contains(':');
        match (next_queue, stage) {
            (Some(next), _)
                if is_child || next.contains(':') || def.and_then(|d| d.stage(&next)).is_none() =>
            {
                let msg = format!("nextQueue {next:?} is not a stage of flow {:?}", job.flow);
                self.flow_finish(id, FlowStatus::Failed, Some(msg), now, 0, &mut touched);
            }
            (Some(next), stage) => {
                let diff = stage.map_or(0, |s| s.priority_diff);
                self.flow_advance(id, &next, diff, now, 0, &mut touched);
            }
            (None, Some(stage)) if stage.next.is_some() => {
                let (next, diff) = (stage.next.clone().expect("checked"), stage.priority_diff);
                self.flow_advance(id, &next, diff, now, 0, &mut touched);
            }
            (None, _) => self.flow_finish(id, FlowStatus::Done, None, now, 0, &mut touched),
        }
        self.log_flow_jobs(touched);
        self.serve_waiters(now);
        Ok(self.flow_outcome(id))
    }

    /// A worker's failure: retried (`retries:<stage>` + 1, after the stage's backoff) while
    /// the stage allows, otherwise recorded as failed with `error`.
    pub fn flow_fail(
        &mut self,
        conn: ConnId,
        id: &str,
        token: u32,
        error: &str,
        now: Millis,
    ) -> Result<FlowOutcome, FlowError> {
        self.saw(now);
        let engine_id = self.flow_holder(conn, id, token)?;
        self.held_lease_completed(engine_id, crate::LeaseOutcome::Failed);
        self.flow_dequeue(engine_id);
        let mut touched = Touched::default();
        self.flow_retry_or_fail(id, error.to_string(), now, &mut touched);
        self.log_flow_jobs(touched);
        self.serve_waiters(now);
        Ok(self.flow_outcome(id))
    }

    /// Guild's `DelayError`: the job waits in its stage until `ready_at`, with
    /// `delay`, `delayReadyTimestamp` and `delayReason` recorded; the server's own timer
    /// makes it ready. Refused on a stage that is not delayable.
    pub fn flow_delay(
        &mut self,
        conn: ConnId,
        id: &str,
        token: u32,
        ready_at: Millis,
        reason: &str,
        now: Millis,
    ) -> Result<FlowOutcome, FlowError> {
        self.saw(now);
        let engine_id = self.flow_holder(conn, id, token)?;
        let job = &self.flows.jobs[id];
        if !self.stage_of(job).is_some_and(|s| s.delayable) {
            return Err(FlowError::Invalid(format!(
                "stage {:?} is not delayable",
                job.stage
            )));
        }
        self.flow_postpone(id, engine_id, ready_at, reason, now);
        self.serve_waiters(now);
        Ok(self.flow_outcome(id))
    }
}
