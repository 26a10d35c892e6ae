//! Periodic jobs: schedules that put a job into a queue at every tick, and the last tick each
//! has enqueued, kept durably.
//!
//! The engine keeps no clock and reads no cron expression: a schedule's timing is data here,
//! and the caller (the broker's scheduler task) works out when it ticks and calls
//! [`Engine::fire_schedule`]. That call logs the schedule's new last tick and the tick's job
//! in the same turn, so one group commit holds both: after a crash either both happened
//! or neither did, and a tick is never enqueued twice.

use std::collections::BTreeMap;

use bytes::Bytes;

use crate::change::Change;
use crate::job::JobState;
use crate::jobs::NewJob;
use crate::{Engine, JobId, Millis};

/// When a schedule ticks, as declared; the engine only keeps it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Timing {
    /// A cron expression (5 fields, or 6 with seconds first) in an IANA time zone.
    Cron { expr: String, time_zone: String },
    /// A fixed interval as written ("30s", "5m").
    Interval(String),
}

/// Whether a tick enqueues while the schedule's previous job is still live.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Overlap {
    /// Enqueue every tick.
    #[default]
    Allow,
    /// Pass over a tick while the previous job is ready, delayed or leased.
    Skip,
}

/// What happens to ticks that passed while the server was down.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum MissedTicks {
    /// None of them enqueues.
    #[default]
    Skip,
    /// The latest of them enqueues once.
    CatchUp,
}

/// A periodic job's declaration, and how far it has got.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Schedule {
    pub name: Bytes,
    pub queue: Bytes,
    pub body: Bytes,
    pub pri: u32,
    /// The jobs' lease length, seconds.
    pub ttr: u32,
    pub timing: Timing,
    pub overlap: Overlap,
    pub missed: MissedTicks,
    /// A paused schedule enqueues nothing; its ticks pass as if the server were down.
    pub paused: bool,
    /// Every tick at or before this time is done: enqueued or passed over. A new schedule
    /// starts at its creation time.
    pub last_tick: Millis,
    /// The job the last enqueued tick put (0: none yet).
    pub last_job: JobId,
}

impl Schedule {
    /// Whether `other` declares the same thing (progress and pause aside).
    fn same_declaration(&self, other: &Schedule) -> bool {
        self.queue == other.queue
            && self.body == other.body
            && self.pri == other.pri
            && self.ttr == other.ttr
            && self.timing == other.timing
            && self.overlap == other.overlap
            && self.missed == other.missed
    }
}

/// What [`Engine::fire_schedule`] did with a tick.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fired {
    /// The tick's job.
    Put(JobId),
    /// Passed over: the previous job is still live and the schedule skips overlaps.
    Overlapped,
}

/// Every schedule, by name.
pub(crate) type Schedules = BTreeMap<Bytes, Schedule>;

impl Engine {
    /// Declares a schedule, or changes the declaration of the one of its name: a changed
    /// schedule keeps its progress and pause, so re-declaring it (at every start, from the
    /// config file) neither repeats nor skips a tick. A new one starts at `now`. Returns
    /// whether it was new.
    pub fn declare_schedule(&mut self, mut schedule: Schedule, now: Millis) -> bool {
        let existing = self.schedules.get(&schedule.name);
        if let Some(old) = existing {
            if old.same_declaration(&schedule) {
                return false;
            }
            schedule.paused = old.paused;
            schedule.last_tick = old.last_tick;
            schedule.last_job = old.last_job;
        } else {
            schedule.last_tick = now;
            schedule.last_job = 0;
        }
        let created = existing.is_none();
        self.log_schedule(&schedule);
        self.schedules.insert(schedule.name.clone(), schedule);
        created
    }

    /// Deletes a schedule; returns whether there was one. Its jobs stay.
    pub fn delete_schedule(&mut self, name: &[u8]) -> bool {
        let Some(schedule) = self.schedules.remove(name) else {
            return false;
        };
        self.changes.push(Change::Schedule {
            name: schedule.name,
            schedule: None,
        });
        true
    }

    /// Pauses or resumes a schedule; returns whether there is one. Ticks that pass while it
    /// is paused are never enqueued: resuming goes on from the next tick.
    pub fn pause_schedule(&mut self, name: &[u8], paused: bool, now: Millis) -> bool {
        let Some(schedule) = self.schedules.get_mut(name) else {
            return false;
        };
        if schedule.paused != paused {
            schedule.paused = paused;
            if !paused {
                schedule.last_tick = schedule.last_tick.max(now);
            }
            let schedule = schedule.clone();
            self.log_schedule(&schedule);
        }
        true
    }

    /// Every schedule, in name order.
    pub fn schedules(&self) -> impl Iterator<Item = &Schedule> {
        self.schedules.values()
    }

    /// The schedule of this name.
    pub fn schedule(&self, name: &[u8]) -> Option<&Schedule> {
        self.schedules.get(name)
    }

    /// Enqueues a schedule's tick at `tick` (unless it overlaps a live job and the schedule
    /// skips overlaps) and records `tick` as its last, in the same turn. The job carries
    /// `{"schedule": NAME, "tick": MILLIS}` as its attributes. `None`: no such schedule, or
    /// the tick is not after its last (already done).
    pub fn fire_schedule(&mut self, name: &[u8], tick: Millis, now: Millis) -> Option<Fired> {
        let schedule = self.schedules.get(name)?;
        if tick <= schedule.last_tick {
            return None;
        }
        let overlapped =
            schedule.overlap == Overlap::Skip && self.schedule_job_is_live(schedule.last_job);
        let job = (!overlapped).then(|| schedule_job(schedule, tick));
        let record_at = self.changes.len();
        let fired = match job {
            Some((queue, job)) => {
                let queue = self.queue_id_or_create(&queue);
                Fired::Put(self.put_job(NewJob { queue, ..job }, now).id)
            }
            None => Fired::Overlapped,
        };
        let schedule = self.schedules.get_mut(name)?;
        schedule.last_tick = tick;
        if let Fired::Put(id) = fired {
            schedule.last_job = id;
        }
        let record = Change::Schedule {
            name: schedule.name.clone(),
            schedule: Some(Box::new(schedule.clone())),
        };
        // The schedule's record goes in front of the job's: should a crash cut the group
        // commit short, a tick is lost rather than enqueued twice.
        self.changes.insert(record_at, record);
        Some(fired)
    }

    /// Whether a schedule's previous job is still to be done: ready, delayed or leased (a
    /// buried job waits for an operator, not for the schedule).
    fn schedule_job_is_live(&self, job: JobId) -> bool {
        job != 0 && self.job(job).is_some_and(|j| j.state != JobState::Buried)
    }

    fn log_schedule(&mut self, schedule: &Schedule) {
        self.changes.push(Change::Schedule {
            name: schedule.name.clone(),
            schedule: Some(Box::new(schedule.clone())),
        });
    }

    /// Applies a schedule record read back from the log.
    pub(crate) fn replay_schedule(&mut self, name: Bytes, schedule: Option<Box<Schedule>>) {
        match schedule {
            Some(schedule) => {
                self.schedules.insert(name, *schedule);
            }
            None => {
                self.schedules.remove(&name);
            }
        }
    }

    /// A record of every schedule, for a snapshot.
    pub(crate) fn schedule_snapshot(&self, out: &mut Vec<Change>) {
        for schedule in self.schedules.values() {
            out.push(Change::Schedule {
                name: schedule.name.clone(),
                schedule: Some(Box::new(schedule.clone())),
            });
        }
    }
}

/// The queue and job a schedule's tick puts (the queue id is the caller's to fill in).
fn schedule_job(schedule: &Schedule, tick: Millis) -> (Bytes, NewJob) {
    let attrs = serde_json::json!({
        "schedule": String::from_utf8_lossy(&schedule.name),
        "tick": tick,
    });
    let job = NewJob {
        queue: 0,
        pri: schedule.pri,
        ttr: schedule.ttr,
        ready_at: 0,
        delay: 0,
        body: schedule.body.clone(),
        unique: None,
        durable: true,
        attrs: Some(Bytes::from(attrs.to_string())),
    };
    (schedule.queue.clone(), job)
}
