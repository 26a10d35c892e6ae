//! The `[[schedules]]` tables of the config file: periodic jobs declared at start.
//!
//! Each table is declared when the server starts: a new schedule begins then, a changed one
//! keeps its last tick (and a pause set through the API), an unchanged one logs nothing. A
//! schedule no longer in the file stays, as the log kept it, until it is deleted through
//! the HTTP API or `jobyard ctl schedules delete` (docs/schedules.md).

use jobyard_broker::{Broker, ScheduleSpec};
// A scheduled job's priority and TTR unless its table says otherwise: the HTTP API's.
use jobyard_engine::{Schedule, DEFAULT_PRIORITY, DEFAULT_TTR};
use serde::Deserialize;

/// The longest schedule or queue name, as for the HTTP API's queues.
const MAX_NAME_BYTES: usize = 200;

/// The declared schedules of `--schedules`: the config's `[[schedules]]` tables as JSON,
/// or the path of a TOML file of them. Each is checked (its timing evaluates); a name
/// twice is an error.
pub fn load(source: &str) -> Result<Vec<Schedule>, String> {
    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    struct SchedulesFile {
        #[serde(default)]
        schedules: Vec<ScheduleSpec>,
    }
    let tables: Vec<ScheduleSpec> = if source.starts_with('[') {
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
fn declared(table: ScheduleSpec) -> Result<Schedule, (String, String)> {
    let name = table.name.clone().unwrap_or_default();
    checked(table, &name).map_err(|e| (name, e))
}

/// A table's schedule: its name and queue checked as the HTTP API checks queue names, the
/// rest read as `PUT /v1/schedules/{name}` reads it ([`ScheduleSpec`]).
fn checked(table: ScheduleSpec, name: &str) -> Result<Schedule, String> {
    check_name("name", name)?;
    check_name("queue", &table.queue)?;
    table.into_schedule(name, DEFAULT_PRIORITY, DEFAULT_TTR)
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
    use jobyard_engine::{MissedTicks, Overlap, Timing};

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
