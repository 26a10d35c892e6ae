//! How a flow job moves: to its next stage (with its priority shift), into a stage (which
//! may fan out), back into its stage for a retry, or to its end (which tells its parent);
//! and what a lease that ran out does. The worker-facing operations in `work` and the
//! fan-in in `fanout` are made of these steps, all inside one transition.

use crate::flows::{FlowOutcome, FlowStatus, Touched};
use crate::notice::{Notice, NoticeKind};
use crate::{ConnId, Engine, JobId, Millis};

/// Limit on stage moves within one transition: a route loop through stages that fan out
/// into no children would otherwise never end.
const MAX_HOPS: u32 = 64;

impl Engine {
    /// A flow job's lease ran out: the same transition as a failure with
    /// `"<stage> lock time exceeded"` (one retry or the final failure), and the late
    /// worker's token is stale from now on.
    pub(crate) fn flow_lease_expired(&mut self, engine_id: JobId, owner: ConnId, now: Millis) {
        let Some(id) = self.flows.by_engine.get(&engine_id).cloned() else {
            return;
        };
        let q = self.jobs[&engine_id].queue;
        self.job_timeouts += 1;
        self.queue_mut(q).total_timeouts += 1;
        self.notices.push(Notice {
            conn: owner,
            kind: NoticeKind::LeaseExpired(engine_id),
        });
        self.flow_dequeue(engine_id);
        let job = self.flows.jobs.get_mut(&id).expect("indexed job exists");
        // A late worker's complete names the old token: refuse it even before a new lease.
        job.token += 1;
        let msg = format!("{} lock time exceeded", job.stage);
        let mut touched = Touched::default();
        self.flow_retry_or_fail(&id, msg, now, &mut touched);
        self.log_flow_jobs(touched);
    }

    /// Requeues a job that is out of its queue for another try of its stage, or records
    /// its failure when its retries are used up.
    pub(crate) fn flow_retry_or_fail(
        &mut self,
        id: &str,
        error: String,
        now: Millis,
        touched: &mut Touched,
    ) {
        touched.put(id);
        let job = &self.flows.jobs[id];
        let (max, backoff) = self
            .stage_of(job)
            .map_or((0, 0), |s| (s.max_retries, s.backoff_ms));
        let retries = job.retries();
        if retries >= max as u64 {
            self.flow_finish(id, FlowStatus::Failed, Some(error), now, 0, touched);
            return;
        }
        let wait = if backoff == 0 {
            0
        } else {
            let factor = 1u64 << retries.min(20);
            backoff
                .saturating_mul(factor)
                .min(crate::flows::definition::MAX_BACKOFF_MS)
        };
        let job = self.flows.jobs.get_mut(id).expect("job exists");
        job.fields
            .insert(format!("retries:{}", job.stage), (retries + 1).into());
        job.status = if wait > 0 {
            FlowStatus::Delayed
        } else {
            FlowStatus::Waiting
        };
        job.ready_at = if wait > 0 { now + wait } else { 0 };
        self.flow_enqueue(id, now);
    }

    /// Moves a job that is out of its queue to stage `next`, its priority shifted by `diff`
    /// and kept within the stage's priorities.
    pub(crate) fn flow_advance(
        &mut self,
        id: &str,
        next: &str,
        diff: i32,
        now: Millis,
        hops: u32,
        touched: &mut Touched,
    ) {
        touched.put(id);
        let job = &self.flows.jobs[id];
        let max = self
            .flows
            .defs
            .get(&job.flow)
            .and_then(|d| d.stage(next))
            .map_or(1, |s| s.priorities);
        let priority = (job.priority as i64 + diff as i64).clamp(1, max as i64) as u32;
        let job = self.flows.jobs.get_mut(id).expect("job exists");
        job.priority = priority;
        job.fields.insert("priority".into(), priority.into());
        job.stage = next.to_string();
        job.status = FlowStatus::Waiting;
        job.ready_at = 0;
        self.enter_stage(id, now, hops + 1, touched);
    }

    /// Puts a job into its (new) stage: fans out if the stage has children, else queues it.
    pub(crate) fn enter_stage(&mut self, id: &str, now: Millis, hops: u32, touched: &mut Touched) {
        if hops > MAX_HOPS {
            let msg = format!("routing loop: more than {MAX_HOPS} stages in one step");
            self.flow_finish(id, FlowStatus::Failed, Some(msg), now, hops, touched);
            return;
        }
        let fans_out = self
            .stage_of(&self.flows.jobs[id])
            .is_some_and(|s| !s.children.is_empty());
        if fans_out {
            self.fan_out(id, now, hops, touched);
        } else {
            self.flow_enqueue(id, now);
        }
    }

    /// Ends a job that is out of its queue: `done` (and for a failure `failed`,
    /// `failedQueue`, `failedErrorMsg`) recorded in its state, its retention started, and
    /// its parent told in the same transition.
    pub(crate) fn flow_finish(
        &mut self,
        id: &str,
        status: FlowStatus,
        error: Option<String>,
        now: Millis,
        hops: u32,
        touched: &mut Touched,
    ) {
        touched.put(id);
        let job = self.flows.jobs.get_mut(id).expect("job exists");
        job.fields.insert("done".into(), true.into());
        if status == FlowStatus::Failed {
            job.fields.insert("failed".into(), true.into());
            job.fields
                .insert("failedQueue".into(), job.stage.clone().into());
            job.fields
                .insert("failedErrorMsg".into(), error.unwrap_or_default().into());
        }
        job.status = status;
        job.ready_at = 0;
        job.ended = Some(now);
        let engine_id = job.engine_id;
        match job.parent.clone() {
            Some(parent) => {
                self.flow_dequeue(engine_id);
                self.fan_in(&parent, id, now, hops, touched);
            }
            None => {
                let at = self.flows.jobs[id].purge_at().expect("ended");
                self.flows.retention.insert((at, id.to_string()));
                self.flow_dequeue(engine_id);
            }
        }
    }

    pub(crate) fn flow_outcome(&self, id: &str) -> FlowOutcome {
        match self.flows.jobs.get(id) {
            Some(job) => FlowOutcome {
                id: id.to_string(),
                stage: job.stage.clone(),
                status: self.flow_state(job),
            },
            None => FlowOutcome {
                id: id.to_string(),
                stage: String::new(),
                status: "deleted",
            },
        }
    }
}
