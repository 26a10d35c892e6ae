//! Rate limits per stage (Guild's `limiter`): at most `reservoir` hand-outs per fixed
//! window of `intervalMs`, counted per value of the job field `groupJobKey`. A job over the
//! limit is not handed out: it is delayed, in the same step, to the window where its turn
//! comes (Guild's estimate: the next window, plus one window per `reservoir` jobs of its
//! group already waiting for one), with `delay`, `delayReadyTimestamp` and `delayReason`
//! recorded as Guild records them.
//!
//! The counts are not logged: after a restart a window starts afresh, so at most one extra
//! `reservoir` of jobs may go out in the window of the restart.

use std::collections::HashMap;

use serde_json::Value;

use crate::flows::{FlowStatus, Limiter, Touched};
use crate::{Engine, JobId, Millis};

/// Most groups whose counts are kept; past it, counts of windows that are over are dropped.
const MAX_GROUPS: usize = 100_000;

/// The reason recorded on a job the limiter delayed.
pub const RATE_LIMITED: &str = "rate limited";

/// Counts of the current window, and jobs waiting for a later one, per `(stage, group)`.
#[derive(Debug, Default)]
pub(crate) struct Limits {
    windows: HashMap<(String, String), (u64, u32)>,
    waiting: HashMap<(String, String), u64>,
}

/// The group a job counts in: the text of its `groupJobKey` field (empty: one group).
pub(crate) fn group_of(limiter: &Limiter, fields: &serde_json::Map<String, Value>) -> String {
    match limiter.group_job_key.as_ref().and_then(|k| fields.get(k)) {
        Some(Value::String(s)) => s.clone(),
        Some(v) => v.to_string(),
        None => String::new(),
    }
}

impl Limits {
    /// Counts a hand-out of a job of `(stage, group)` at `now` if the window has room and
    /// returns `None`; otherwise returns when the job should be ready and counts it as
    /// waiting. `was_waiting`: the job was delayed by the limiter before (it no longer
    /// waits).
    pub(crate) fn admit(
        &mut self,
        stage: &str,
        group: String,
        limiter: &Limiter,
        was_waiting: bool,
        now: Millis,
    ) -> Option<Millis> {
        let key = (stage.to_string(), group);
        if was_waiting {
            if let Some(n) = self.waiting.get_mut(&key) {
                *n = n.saturating_sub(1);
                if *n == 0 {
                    self.waiting.remove(&key);
                }
            }
        }
        let interval = limiter.interval_ms.max(1);
        let window = now / interval;
        if self.windows.len() >= MAX_GROUPS {
            self.windows.retain(|_, (w, _)| *w >= window);
        }
        let entry = self.windows.entry(key.clone()).or_insert((window, 0));
        if entry.0 != window {
            *entry = (window, 0);
        }
        if entry.1 < limiter.reservoir {
            entry.1 += 1;
            return None;
        }
        let waiting = self.waiting.entry(key).or_insert(0);
        let ahead = *waiting / limiter.reservoir as u64;
        *waiting += 1;
        Some((window + 1 + ahead).saturating_mul(interval))
    }
}

impl Engine {
    /// Applies the stage's limiter to a hand-out of job `id`: `Ok` if it may go out now
    /// (true if that cleared its delay fields), else `Err` with when it may.
    pub(crate) fn flow_admit(
        &mut self,
        id: &str,
        limiter: &Limiter,
        now: Millis,
    ) -> Result<bool, Millis> {
        let job = &self.flows.jobs[id];
        let group = group_of(limiter, &job.fields);
        let was_waiting = job.fields.get("delayReason").and_then(Value::as_str)
            == Some(RATE_LIMITED)
            && job.fields.get("delay") == Some(&Value::Bool(true));
        let stage = job.stage.clone();
        let out = self
            .flows
            .limits
            .admit(&stage, group, limiter, was_waiting, now);
        if let Some(ready_at) = out {
            return Err(ready_at);
        }
        if was_waiting {
            // Handed out at last: Guild clears the delay fields of a limited job here.
            let job = self.flows.jobs.get_mut(id).expect("job exists");
            for key in ["delay", "delayReadyTimestamp", "delayReason"] {
                job.fields.remove(key);
            }
        }
        Ok(was_waiting)
    }

    /// Puts a job off until `ready_at` in its stage, with Guild's `delay`,
    /// `delayReadyTimestamp` and `delayReason` fields, logged; the lease the engine made
    /// ends. What a worker's delay and the limiter both do.
    pub(crate) fn flow_postpone(
        &mut self,
        id: &str,
        engine_id: JobId,
        ready_at: Millis,
        reason: &str,
        now: Millis,
    ) {
        self.flow_dequeue(engine_id);
        let job = self.flows.jobs.get_mut(id).expect("job exists");
        job.fields.insert("delay".into(), true.into());
        job.fields
            .insert("delayReadyTimestamp".into(), ready_at.into());
        job.fields.insert("delayReason".into(), reason.into());
        job.status = FlowStatus::Delayed;
        job.ready_at = ready_at;
        self.flow_enqueue(id, now);
        let mut touched = Touched::default();
        touched.put(id);
        self.log_flow_jobs(touched);
    }
}
