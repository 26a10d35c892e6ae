//! A schedule's timing: the instants at which it ticks.

use croner::parser::{CronParser, Seconds};
use croner::Cron;
use jiff::tz::TimeZone;
use jiff::{Timestamp, Zoned};

use crate::{parse_interval, Millis};

/// Why a schedule's timing was refused, in words for the operator.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BadSchedule(pub String);

impl std::fmt::Display for BadSchedule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for BadSchedule {}

/// The instants a schedule ticks at.
#[derive(Clone, Debug)]
pub enum When {
    /// Where a cron expression (5 fields, or 6 with seconds first) matches the wall clock of
    /// a time zone.
    Cron { cron: Box<Cron>, zone: TimeZone },
    /// Every multiple of this many milliseconds since the Unix epoch, so the ticks fall on
    /// the same instants whenever the server starts.
    Every(Millis),
}

impl When {
    /// A cron expression in the IANA time zone `time_zone` (e.g. "Europe/Berlin", "UTC").
    pub fn cron(expr: &str, time_zone: &str) -> Result<When, BadSchedule> {
        let cron = CronParser::builder()
            .seconds(Seconds::Optional)
            .build()
            .parse(expr)
            .map_err(|e| BadSchedule(format!("bad cron expression {expr:?}: {e}")))?;
        let zone = TimeZone::get(time_zone)
            .map_err(|e| BadSchedule(format!("unknown time zone {time_zone:?}: {e}")))?;
        Ok(When::Cron {
            cron: Box::new(cron),
            zone,
        })
    }

    /// A fixed interval written as "30s", "5m", ... (see [`parse_interval`]).
    pub fn every(interval: &str) -> Result<When, BadSchedule> {
        parse_interval(interval).map(When::Every)
    }

    /// The first tick strictly after `t` (`None`: the expression never matches again).
    pub fn next_after(&self, t: Millis) -> Option<Millis> {
        match self {
            When::Every(ms) => Some((t / ms + 1) * ms),
            When::Cron { cron, zone } => {
                let start = zoned(t, zone)?;
                let next = cron.find_next_occurrence(&start, false).ok()?;
                millis(&next)
            }
        }
    }

    /// The last tick at or before `t` (`None`: none since the epoch).
    pub fn latest_at_or_before(&self, t: Millis) -> Option<Millis> {
        match self {
            When::Every(ms) => Some(t / ms * ms),
            When::Cron { cron, zone } => {
                // Whole seconds: cron ticks fall on them, and a search that starts between
                // two would not count the earlier one as "at or before".
                let start = zoned(t / 1000 * 1000, zone)?;
                let prev = cron.find_previous_occurrence(&start, true).ok()?;
                millis(&prev)
            }
        }
    }
}

fn zoned(t: Millis, zone: &TimeZone) -> Option<Zoned> {
    let ms = i64::try_from(t).ok()?;
    Some(Timestamp::from_millisecond(ms).ok()?.to_zoned(zone.clone()))
}

fn millis(z: &Zoned) -> Option<Millis> {
    Millis::try_from(z.timestamp().as_millisecond()).ok()
}
