//! The scheduler: one task that enqueues periodic jobs' ticks on time.
//!
//! The engine keeps the schedules and their last ticks; this task reads the clock, works
//! out with `jobyard-schedule` which tick is due, and fires it through
//! [`jobyard_engine::Engine::fire_schedule`], whose job and last-tick record one commit
//! makes durable together (docs/schedules.md).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use jobyard_engine::{Millis, MissedTicks, Overlap, Schedule, Timing};
use jobyard_schedule::{due, Missed, When};
use serde::Deserialize;

use crate::Broker;

/// The longest the scheduler sleeps, so a wall-clock jump cannot hold a tick back for long.
const MAX_SLEEP_MS: Millis = 60_000;

impl Broker {
    /// Tells the scheduler that a schedule was declared, changed or resumed, so it works
    /// out its next tick now rather than after its current sleep.
    pub fn schedules_changed(&self) {
        self.schedules_changed.notify_one();
    }
}

/// Fires every schedule's due tick, then sleeps until the next one (or a change).
pub(crate) async fn run(broker: Arc<Broker>) {
    // Ticks before this passed while the server was down: missed, not late.
    let started_at = Broker::now();
    let mut timings = Timings::default();
    loop {
        let next = fire_due(&broker, started_at, &mut timings);
        let wait = next.map_or(MAX_SLEEP_MS, |at| {
            at.saturating_sub(Broker::now()).min(MAX_SLEEP_MS)
        });
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(wait)) => {}
            _ = broker.schedules_changed.notified() => {}
        }
    }
}

/// One pass over the schedules, in one transaction: fires what is due and returns the
/// earliest next tick.
fn fire_due(broker: &Broker, started_at: Millis, timings: &mut Timings) -> Option<Millis> {
    let now = Broker::now();
    let mut txn = broker.lock();
    let mut next: Option<Millis> = None;
    let mut to_fire: Vec<(Bytes, Millis)> = Vec::new();
    for schedule in txn.schedules().filter(|s| !s.paused) {
        let Some(when) = timings.of(schedule) else {
            continue;
        };
        let plan = due(when, schedule.last_tick, started_at, now, missed(schedule));
        if let Some(tick) = plan.fire {
            to_fire.push((schedule.name.clone(), tick));
        }
        next = match (next, plan.next) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
    }
    // A draining server refuses puts; the ticks stay due and fire after a restart if the
    // schedule catches up.
    if !broker.draining() {
        for (name, tick) in to_fire {
            txn.fire_schedule(&name, tick, now);
        }
    }
    txn.commit();
    next
}

fn missed(schedule: &Schedule) -> Missed {
    match schedule.missed {
        MissedTicks::Skip => Missed::Skip,
        MissedTicks::CatchUp => Missed::CatchUp,
    }
}

/// Each schedule's parsed timing, kept while its declaration stays the same.
#[derive(Default)]
struct Timings {
    by_name: HashMap<Bytes, (Timing, Option<When>)>,
}

impl Timings {
    /// The schedule's timing, parsed once (`None`: it no longer parses, e.g. its time zone
    /// left the system's database; logged once).
    fn of(&mut self, schedule: &Schedule) -> Option<&When> {
        let fresh = self
            .by_name
            .get(&schedule.name)
            .is_none_or(|(timing, _)| *timing != schedule.timing);
        if fresh {
            let parsed = when_of(&schedule.timing)
                .inspect_err(|e| {
                    tracing::warn!(
                        schedule = %String::from_utf8_lossy(&schedule.name),
                        "schedule not run: {e}"
                    )
                })
                .ok();
            let entry = (schedule.timing.clone(), parsed);
            self.by_name.insert(schedule.name.clone(), entry);
        }
        self.by_name.get(&schedule.name)?.1.as_ref()
    }
}

/// When a declared timing ticks; the error says why it cannot be evaluated (an unknown
/// time zone, a bad cron expression or interval).
pub fn when_of(timing: &Timing) -> Result<When, jobyard_schedule::BadSchedule> {
    match timing {
        Timing::Cron { expr, time_zone } => When::cron(expr, time_zone),
        Timing::Interval(text) => When::every(text),
    }
}

/// A schedule as people write it: a `[[schedules]]` table of the config file, or the body
/// of `PUT /v1/schedules/{name}`. Both read it here, so the two cannot drift apart.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScheduleSpec {
    /// Given in a config table; over HTTP the name is the path's.
    #[serde(default)]
    pub name: Option<String>,
    pub queue: String,
    pub cron: Option<String>,
    pub time_zone: Option<String>,
    pub interval: Option<String>,
    #[serde(default)]
    pub body: String,
    pub priority: Option<u32>,
    pub ttr: Option<u32>,
    pub overlap: Option<String>,
    pub missed: Option<String>,
}

impl ScheduleSpec {
    /// The schedule the engine keeps, named `name`, with a job's priority and TTR
    /// defaulting to the given ones; or why it cannot be (its timing is evaluated once).
    pub fn into_schedule(
        self,
        name: &str,
        default_priority: u32,
        default_ttr: u32,
    ) -> Result<Schedule, String> {
        let timing = match (self.cron, self.interval, self.time_zone) {
            (Some(expr), None, time_zone) => Timing::Cron {
                expr,
                time_zone: time_zone.unwrap_or_else(|| "UTC".into()),
            },
            (None, Some(interval), None) => Timing::Interval(interval),
            (None, Some(_), Some(_)) => return Err("time_zone goes with cron, not interval".into()),
            (Some(_), Some(_), _) => return Err("give cron or interval, not both".into()),
            (None, None, _) => return Err("give cron (and time_zone) or interval".into()),
        };
        when_of(&timing).map_err(|e| e.to_string())?;
        let overlap = match self.overlap.as_deref() {
            None | Some("allow") => Overlap::Allow,
            Some("skip") => Overlap::Skip,
            Some(other) => return Err(format!("overlap {other:?}: want \"skip\" or \"allow\"")),
        };
        let missed = match self.missed.as_deref() {
            None | Some("skip") => MissedTicks::Skip,
            Some("catch_up") => MissedTicks::CatchUp,
            Some(other) => return Err(format!("missed {other:?}: want \"skip\" or \"catch_up\"")),
        };
        Ok(Schedule {
            name: Bytes::copy_from_slice(name.as_bytes()),
            queue: Bytes::from(self.queue),
            body: Bytes::from(self.body),
            pri: self.priority.unwrap_or(default_priority),
            ttr: self.ttr.unwrap_or(default_ttr).max(1),
            timing,
            overlap,
            missed,
            paused: false,
            last_tick: 0,
            last_job: 0,
        })
    }
}
