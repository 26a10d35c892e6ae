//! The `[[schedules]]` tables of the config file: periodic jobs declared at start.
//!
//! Each table is declared when the server starts: a new schedule begins then, a changed one
//! keeps its last tick (and a pause set through the API), an unchanged one logs nothing. A
//! schedule no longer in the file stays, as the log kept it, until it is deleted through
//! the HTTP API or `jobyard ctl schedules delete` (docs/schedules.md).

use bytes::Bytes;
use jobyard_broker::Broker;
use jobyard_engine::{MissedTicks, Overlap, Schedule, Timing};
use serde::Deserialize;

/// The priority and TTR of a scheduled job unless its table says otherwise: the HTTP
/// API's defaults for a put.
const DEFAULT_PRIORITY: u32 = 1024;
const DEFAULT_TTR: u32 = 60;
/// The longest schedule or queue name, as for the HTTP API's queues.
const MAX_NAME_BYTES: usize = 200;

/// One `[[schedules]]` table as written.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ScheduleTable {
    name: String,
    queue: String,
    cron: Option<String>,
    time_zone: Option<String>,
    interval: Option<String>,
    #[serde(default)]
    body: String,
    priority: Option<u32>,
    ttr: Option<u32>,
    overlap: Option<String>,
    missed: Option<String>,
}

/// The declared schedules of `--schedules`: the config's `[[schedules]]` tables as JSON,
/// or the path of a TOML file of them. Each is checked (its timing evaluates); a name
/// twice is an error.
pub fn load(source: &str) -> Result<Vec<Schedule>, String> {
    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    struct SchedulesFile {
        #[serde(default)]
        schedules: Vec<ScheduleTable>,
    }
    let tables: Vec<ScheduleTable> = if source.starts_with('[') {
        serde_json::from_str(source).map_err(|e| format!("bad [[schedules]] in the config: {e}"))?
    } else {
        let text = std::fs::read_to_string(source)
            .map_err(|e| format!("cannot read schedules file {source}: {e}"))?;
        toml::from_str::<SchedulesFile>(&text)
            .map_err(|e| format!("bad schedules file {source}: {e}"))?
            .schedules
    };
    let mut names = std::collections::HashSet::new();
    let mut out = Vec::with_capacity(tables.len());
    for table in tables {
        let schedule =
            declared(table).map_err(|(name, e)| format!("[[schedules]] {name:?}: {e}"))?;
        if !names.insert(schedule.name.clone()) {
            return Err(format!("schedule {:?} is declared twice", schedule.name));
        }
        out.push(schedule);
    }
    Ok(out)
}

/// A table as the engine keeps it, or its name and what is wrong with it.
fn declared(table: ScheduleTable) -> Result<Schedule, (String, String)> {
    let name = table.name.clone();
    checked(table).map_err(|e| (name, e))
}

fn checked(table: ScheduleTable) -> Result<Schedule, String> {
    check_name("name", &table.name)?;
    check_name("queue", &table.queue)?;
    let timing = match (table.cron, table.interval, table.time_zone) {
        (Some(expr), None, time_zone) => Timing::Cron {
            expr,
            time_zone: time_zone.unwrap_or_else(|| "UTC".into()),
        },
        (None, Some(interval), None) => Timing::Interval(interval),
        (None, Some(_), Some(_)) => return Err("time_zone goes with cron, not interval".into()),
        (Some(_), Some(_), _) => return Err("give cron or interval, not both".into()),
        (None, None, _) => return Err("give cron (and time_zone) or interval".into()),
    };
    jobyard_broker::when_of(&timing).map_err(|e| e.to_string())?;
    Ok(Schedule {
        name: Bytes::from(table.name),
        queue: Bytes::from(table.queue),
        body: Bytes::from(table.body),
        pri: table.priority.unwrap_or(DEFAULT_PRIORITY),
        ttr: table.ttr.unwrap_or(DEFAULT_TTR).max(1),
        timing,
        overlap: match table.overlap.as_deref() {
            None | Some("allow") => Overlap::Allow,
            Some("skip") => Overlap::Skip,
            Some(other) => return Err(format!("overlap {other:?}: want \"skip\" or \"allow\"")),
        },
        missed: match table.missed.as_deref() {
            None | Some("skip") => MissedTicks::Skip,
            Some("catch_up") => MissedTicks::CatchUp,
            Some(other) => return Err(format!("missed {other:?}: want \"skip\" or \"catch_up\"")),
        },
        paused: false,
        last_tick: 0,
        last_job: 0,
    })
}

fn check_name(what: &str, name: &str) -> Result<(), String> {
    if name.is_empty() || name.len() > MAX_NAME_BYTES || name.chars().any(char::is_whitespace) {
        return Err(format!(
            "a {what} is 1 to {MAX_NAME_BYTES} bytes without whitespace"
        ));
    }
    Ok(())
}

/// Declares the schedules, durably, before any front end serves, and wakes the scheduler.
pub async fn apply(broker: &Broker, schedules: &[Schedule]) {
    if schedules.is_empty() {
        return;
    }
    let lsn = {
        let mut txn = broker.lock();
        let now = Broker::now();
        for schedule in schedules {
            txn.declare_schedule(schedule.clone(), now);
        }
        txn.commit()
    };
    broker.wait_durable(lsn).await;
    broker.schedules_changed();
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load_toml(text: &str) -> Result<Vec<Schedule>, String> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.toml");
        std::fs::write(&path, text).unwrap();
        load(path.to_str().unwrap())
    }

    #[test]
    fn the_issue_example_loads_with_either_cron_form() {
        for cron in ["0 0 3 * * *", "0 3 * * *"] {
            let text = format!(
                "[[schedules]]\nname = \"nightly-report\"\nqueue = \"reports\"\n\
                 cron = \"{cron}\"\ntime_zone = \"Europe/Berlin\"\n\
                 body = \"build the nightly report\"\noverlap = \"skip\"\nmissed = \"skip\"\n"
            );
            let got = load_toml(&text).unwrap();
            assert_eq!(got.len(), 1);
            let s = &got[0];
            assert_eq!(&s.queue[..], b"reports");
            assert_eq!(&s.body[..], b"build the nightly report");
            assert_eq!((s.pri, s.ttr), (DEFAULT_PRIORITY, DEFAULT_TTR));
            assert_eq!(s.overlap, Overlap::Skip);
            assert_eq!(s.missed, MissedTicks::Skip);
            assert_eq!(
                s.timing,
                Timing::Cron {
                    expr: cron.into(),
                    time_zone: "Europe/Berlin".into()
                }
            );
        }
    }

    #[test]
    fn bad_tables_are_refused_with_their_name() {
        let base = "[[schedules]]\nname = \"s\"\nqueue = \"q\"\n";
        for (extra, want) in [
            ("cron = \"0 3 * *\"\n", "cron"),
            (
                "cron = \"0 3 * * *\"\ntime_zone = \"Nowhere/Else\"\n",
                "time zone",
            ),
            ("interval = \"30x\"\n", "interval"),
            ("interval = \"30s\"\ntime_zone = \"UTC\"\n", "time_zone"),
            ("", "cron"),
            ("interval = \"30s\"\nmissed = \"later\"\n", "missed"),
            ("interval = \"30s\"\nwhen = \"now\"\n", "unknown field"),
        ] {
            let err = load_toml(&format!("{base}{extra}")).unwrap_err();
            assert!(err.contains(want), "{extra:?}: {err}");
        }
        let twice = format!("{base}interval = \"1s\"\n{base}interval = \"2s\"\n");
        assert!(load_toml(&twice).unwrap_err().contains("twice"));
    }
}
