//! `jobyard ctl schedules`: periodic jobs over the HTTP API's schedule routes.

use clap::{Args, Subcommand};
use serde_json::{json, Value};

use crate::client::{Client, Failure};
use crate::enc;
use crate::table::render;

/// What `jobyard ctl schedules` does.
#[derive(Subcommand, Debug)]
pub enum SchedulesAction {
    /// Every schedule with its queue, timing, pause and next tick.
    List,
    /// One schedule, a field a line.
    Show { name: String },
    /// Declare a schedule, or change the one of this name (its last tick is kept).
    Set {
        name: String,
        #[command(flatten)]
        declaration: Declaration,
    },
    /// Enqueue nothing until resumed.
    Pause { name: String },
    /// Enqueue again from the next tick on.
    Resume { name: String },
    /// Delete a schedule (the jobs it put stay).
    Delete { name: String },
}

/// A schedule's declaration, as `jobyard ctl schedules set` takes it.
#[derive(Args, Debug, Default)]
pub struct Declaration {
    /// The queue its jobs go into.
    #[arg(long)]
    pub queue: String,
    /// A cron expression, 5 fields or 6 with seconds first ("0 3 * * *").
    #[arg(
        long,
        conflicts_with = "interval",
        required_unless_present = "interval"
    )]
    pub cron: Option<String>,
    /// The IANA time zone of --cron [default: UTC].
    #[arg(long, requires = "cron")]
    pub time_zone: Option<String>,
    /// A fixed interval: 30s, 5m, 2h, 1d.
    #[arg(long)]
    pub interval: Option<String>,
    /// Every job's body.
    #[arg(long)]
    pub body: Option<String>,
    /// Every job's priority [default: 1024].
    #[arg(long)]
    pub priority: Option<u32>,
    /// Every job's lease length in seconds [default: 60].
    #[arg(long)]
    pub ttr: Option<u32>,
    /// skip: no job while the previous one is live; allow [default].
    #[arg(long)]
    pub overlap: Option<String>,
    /// Ticks missed while the server was down: skip [default], or catch_up once.
    #[arg(long)]
    pub missed: Option<String>,
}

impl Declaration {
    /// The body of the schedule route's PUT: the fields given.
    fn body(&self) -> Value {
        let mut body = json!({ "queue": self.queue });
        let optional = [
            ("cron", self.cron.clone().map(Value::from)),
            ("time_zone", self.time_zone.clone().map(Value::from)),
            ("interval", self.interval.clone().map(Value::from)),
            ("body", self.body.clone().map(Value::from)),
            ("priority", self.priority.map(Value::from)),
            ("ttr", self.ttr.map(Value::from)),
            ("overlap", self.overlap.clone().map(Value::from)),
            ("missed", self.missed.clone().map(Value::from)),
        ];
        for (key, value) in optional {
            if let Some(value) = value {
                body[key] = value;
            }
        }
        body
    }
}

/// Draws a reply as a table.
type Show = fn(&Value) -> String;

/// Runs the action; the server's JSON and how to show it as a table.
pub fn execute(client: &Client, action: &SchedulesAction) -> Result<(Value, Show), Failure> {
    use SchedulesAction::*;
    let path = |name: &str, tail: &str| format!("/schedules/{}{tail}", enc(name));
    Ok(match action {
        List => (client.call_api("GET", "/schedules", None)?, list),
        Show { name } => (client.call_api("GET", &path(name, ""), None)?, one),
        Set { name, declaration } => {
            let body = declaration.body();
            (client.call_api("PUT", &path(name, ""), Some(&body))?, one)
        }
        Pause { name } => (client.call_api("POST", &path(name, "/pause"), None)?, one),
        Resume { name } => (client.call_api("POST", &path(name, "/resume"), None)?, one),
        Delete { name } => (
            client.call_api("DELETE", &path(name, ""), None)?,
            crate::table::done,
        ),
    })
}

fn text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => "-".into(),
        other => other.to_string(),
    }
}

/// "cron EXPR ZONE" or "every INTERVAL".
fn timing(s: &Value) -> String {
    match s["interval"].as_str() {
        Some(interval) => format!("every {interval}"),
        None => format!("cron {} {}", text(&s["cron"]), text(&s["time_zone"])),
    }
}

/// Every schedule, a line each.
fn list(v: &Value) -> String {
    let rows: Vec<Vec<String>> = v["schedules"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default()
        .iter()
        .map(|s| {
            vec![
                text(&s["name"]),
                text(&s["queue"]),
                timing(s),
                text(&s["paused"]),
                text(&s["next_tick_ms"]),
            ]
        })
        .collect();
    render(
        &["NAME", "QUEUE", "TIMING", "PAUSED", "NEXT_TICK_MS"],
        &rows,
    )
}

/// One schedule, a field a line.
fn one(v: &Value) -> String {
    let rows: Vec<Vec<String>> = v
        .as_object()
        .map(|o| o.iter().map(|(k, x)| vec![k.clone(), text(x)]).collect())
        .unwrap_or_default();
    render(&["FIELD", "VALUE"], &rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_declaration_sends_only_what_was_given() {
        let cron = Declaration {
            queue: "reports".into(),
            cron: Some("0 3 * * *".into()),
            time_zone: Some("Europe/Berlin".into()),
            missed: Some("catch_up".into()),
            ..Declaration::default()
        };
        assert_eq!(
            cron.body(),
            json!({"queue": "reports", "cron": "0 3 * * *", "time_zone": "Europe/Berlin",
                   "missed": "catch_up"})
        );
        let every = Declaration {
            queue: "q".into(),
            interval: Some("30s".into()),
            ttr: Some(5),
            ..Declaration::default()
        };
        assert_eq!(
            every.body(),
            json!({"queue": "q", "interval": "30s", "ttr": 5})
        );
    }

    #[test]
    fn the_list_shows_each_timing() {
        let v = json!({"schedules": [
            {"name": "a", "queue": "q", "interval": "30s", "paused": false, "next_tick_ms": 5},
            {"name": "b", "queue": "q", "cron": "0 3 * * *", "time_zone": "UTC",
             "paused": true, "next_tick_ms": null},
        ]});
        let out = list(&v);
        assert!(out.contains("every 30s"), "{out}");
        assert!(out.contains("cron 0 3 * * * UTC"), "{out}");
    }
}
