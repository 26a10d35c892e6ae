//! When a periodic job's schedule ticks, as pure functions of the times they are given.
//!
//! A schedule's timing is a cron expression read in an IANA time zone ([`When::cron`]) or a
//! fixed interval ([`When::every`]); [`due`] decides, from the schedule's last tick, when the
//! server started and the time now, whether a tick is to fire, to be passed over as missed,
//! and when to look again. Nothing here reads a clock, so tests drive it with any times
//! (daylight-saving changes, leap days, restarts).
//!
//! Cron expressions and their daylight-saving rules come from the `croner` crate, time zones
//! from the system's tz database through `jiff` (see docs/schedules.md for the rules).

mod due;
mod interval;
mod when;

pub use due::{due, Due, Missed};
pub use interval::parse_interval;
pub use when::{BadSchedule, When};

/// Wall-clock milliseconds since the Unix epoch, the engine's unit of time.
pub type Millis = u64;
