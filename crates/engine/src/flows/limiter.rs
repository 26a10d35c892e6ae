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

use crate::flows::Limiter;
use crate::Millis;

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
