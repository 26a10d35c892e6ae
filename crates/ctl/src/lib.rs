//! `jobyard ctl`: an operator's view of a running server, over its HTTP admin API
//! (`/admin/api/`, the same the dashboard uses): every queue whatever protocol fills it,
//! a queue's jobs page by page, and the actions (kick, delete, bury, pause, resume, drain);
//! a queue's policy (lease limit, rate limit, pause) over the HTTP API's policy route; and
//! periodic jobs' schedules over its schedule routes (`schedules.rs`); the nodes sharing
//! the server's storage (`cluster.rs`).
//!
//! Tables are aligned for a terminal; `--json` prints the API's JSON for scripts. Exit
//! codes: 0 done, 1 the server refused (not found, wrong state), 2 usage or connection
//! errors, 3 access denied (no token, an unknown one, or a read-only one asked to act).

mod client;
mod cluster;
mod dead_letters;
mod schedules;
mod table;

use std::path::PathBuf;

use clap::{Args, Subcommand};
use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};
use serde_json::Value;

use crate::client::{Client, Failure};

/// `jobyard ctl` options.
#[derive(Args, Debug)]
pub struct CtlArgs {
    /// Base URL of jobyard's HTTP listener.
    #[arg(long, env = "JOBYARD_URL", default_value = "http://127.0.0.1:8080")]
    pub url: String,
    /// Token for a server that requires one (`read` to look, `admin` to act).
    #[arg(long, env = "JOBYARD_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// PEM file of the CA that signed the server's certificate, for an https:// URL
    /// (instead of the public roots).
    #[arg(long, env = "JOBYARD_CA_CERT")]
    pub ca_cert: Option<PathBuf>,
    /// Print the server's JSON instead of tables.
    #[arg(long, global = true)]
    pub json: bool,
    #[command(subcommand)]
    pub command: CtlCommand,
}

/// What `jobyard ctl` does.
#[derive(Subcommand, Debug)]
pub enum CtlCommand {
    /// Server totals, protocols and the log.
    Stats,
    /// Every queue with its counts by state.
    Queues,
    /// Jobs of a queue in one state, a page at a time (`--after` the previous page's next).
    Jobs {
        queue: String,
        #[arg(long, default_value = "ready")]
        state: String,
        #[arg(long, default_value_t = 50)]
        limit: usize,
        #[arg(long)]
        after: Option<String>,
    },
    /// One job: its state, counters and the start of its body.
    Peek { id: u64 },
    /// Kick up to N buried (else delayed) jobs of a queue.
    Kick {
        queue: String,
        #[arg(default_value_t = 1)]
        bound: u64,
    },
    /// Kick one buried or delayed job.
    KickJob { id: u64 },
    /// Delete a job that no worker holds.
    Delete { id: u64 },
    /// Bury a ready or delayed job.
    Bury { id: u64 },
    /// Stop handing out a queue's jobs until resumed.
    Pause { queue: String },
    /// Hand out a paused queue's jobs again.
    Resume { queue: String },
    /// Refuse new jobs on every protocol until restart (as SIGUSR1).
    Drain,
    /// The nodes sharing the server's storage: roles, the leader, the epoch, the lag.
    Cluster,
    /// A queue's dead letters: list, retry or discard them.
    DeadLetters {
        #[command(subcommand)]
        action: dead_letters::DeadLettersAction,
    },
    /// Periodic jobs: list, show, set, pause, resume or delete schedules.
    Schedules {
        #[command(subcommand)]
        action: schedules::SchedulesAction,
    },
    /// Show a queue's policy, or change the parts given (logged: kept across restarts).
    Policy {
        queue: String,
        #[command(flatten)]
        change: PolicyChange,
    },
}

/// What `jobyard ctl policy` changes; nothing given only shows the policy.
#[derive(Args, Debug, Default)]
pub struct PolicyChange {
    /// At most this many jobs handed out per second, minute or hour: 10/s, 600/m, 36000/h.
    #[arg(long, conflicts_with = "no_rate_limit")]
    pub rate_limit: Option<String>,
    /// Remove the rate limit.
    #[arg(long)]
    pub no_rate_limit: bool,
    /// At most this many jobs leased at once; 0 removes the limit.
    #[arg(long)]
    pub lease_limit: Option<u32>,
    /// Pause for this many seconds, then resume by itself (`pause`/`resume` for the rest).
    #[arg(long)]
    pub pause_seconds: Option<u32>,
    /// Attempts a job gets in all before it is buried or dead-lettered; 0 removes the
    /// retry policy.
    #[arg(long)]
    pub max_attempts: Option<u32>,
    /// How the delay before a retry grows: fixed or exponential.
    #[arg(long)]
    pub backoff: Option<String>,
    /// The delay before the first retry, in milliseconds.
    #[arg(long)]
    pub backoff_ms: Option<u64>,
    /// The longest exponential delay, in milliseconds (0: no cap).
    #[arg(long)]
    pub backoff_max_ms: Option<u64>,
    /// The queue a job goes to after its last attempt.
    #[arg(long, conflicts_with = "no_dead_letter")]
    pub dead_letter: Option<String>,
    /// Bury a job in its queue after its last attempt.
    #[arg(long)]
    pub no_dead_letter: bool,
}

impl PolicyChange {
    /// The body of the policy route's PATCH, or `None` when nothing is to change.
    fn body(&self) -> Option<Value> {
        let mut body = serde_json::Map::new();
        if let Some(rate) = &self.rate_limit {
            body.insert("rate_limit".into(), rate.clone().into());
        }
        if self.no_rate_limit {
            body.insert("rate_limit".into(), Value::Null);
        }
        if let Some(limit) = self.lease_limit {
            body.insert("lease_limit".into(), limit.into());
        }
        if let Some(secs) = self.pause_seconds {
            body.insert("paused".into(), true.into());
            body.insert("pause_seconds".into(), secs.into());
        }
        self.retry_body(&mut body);
        (!body.is_empty()).then_some(Value::Object(body))
    }

    /// The retry policy's fields given.
    fn retry_body(&self, body: &mut serde_json::Map<String, Value>) {
        if let Some(n) = self.max_attempts {
            body.insert("max_attempts".into(), n.into());
        }
        if let Some(backoff) = &self.backoff {
            body.insert("backoff".into(), backoff.clone().into());
        }
        if let Some(ms) = self.backoff_ms {
            body.insert("backoff_ms".into(), ms.into());
        }
        if let Some(ms) = self.backoff_max_ms {
            body.insert("backoff_max_ms".into(), ms.into());
        }
        if let Some(queue) = &self.dead_letter {
            body.insert("dead_letter".into(), queue.clone().into());
        }
        if self.no_dead_letter {
            body.insert("dead_letter".into(), Value::Null);
        }
    }
}

/// Runs `jobyard ctl`; returns the process exit code.
pub fn run(args: CtlArgs) -> i32 {
    let client = Client::new(&args.url, args.token.clone(), args.ca_cert.as_deref());
    match client.and_then(|c| execute(&c, &args)) {
        Ok(()) => 0,
        Err(Failure(msg, code)) => {
            eprintln!("jobyard ctl: {msg}");
            code
        }
    }
}

/// The bytes escaped in a path segment or query value: all but RFC 3986's unreserved
/// characters, so a queue name can neither end its segment nor start a parameter.
const ESCAPED_IN_SEGMENT: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// Percent-encodes a name for a path segment or a query value.
fn enc(s: &str) -> String {
    utf8_percent_encode(s, ESCAPED_IN_SEGMENT).to_string()
}

fn execute(client: &Client, args: &CtlArgs) -> Result<(), Failure> {
    use CtlCommand::*;
    let (v, show): (Value, fn(&Value) -> String) = match &args.command {
        Stats => (client.call("GET", "/overview")?, table::stats),
        Queues => (client.call("GET", "/overview")?, table::queues),
        Jobs {
            queue,
            state,
            limit,
            after,
        } => {
            let mut path = format!("/queues/{}?state={}&limit={limit}", enc(queue), enc(state));
            if let Some(a) = after {
                path.push_str(&format!("&after={}", enc(a)));
            }
            (client.call("GET", &path)?, table::jobs)
        }
        Peek { id } => (client.call("GET", &format!("/jobs/{id}"))?, table::job),
        Kick { queue, bound } => (
            client.call(
                "POST",
                &format!("/queues/{}/kick?bound={bound}", enc(queue)),
            )?,
            table::done,
        ),
        KickJob { id } => (
            client.call("POST", &format!("/jobs/{id}/kick"))?,
            table::done,
        ),
        Delete { id } => (
            client.call("POST", &format!("/jobs/{id}/delete"))?,
            table::done,
        ),
        Bury { id } => (
            client.call("POST", &format!("/jobs/{id}/bury"))?,
            table::done,
        ),
        Pause { queue } => (
            client.call("POST", &format!("/queues/{}/pause", enc(queue)))?,
            table::done,
        ),
        Resume { queue } => (
            client.call("POST", &format!("/queues/{}/resume", enc(queue)))?,
            table::done,
        ),
        Drain => (client.call("POST", "/drain")?, table::done),
        Cluster => cluster::execute(client)?,
        Schedules { action } => schedules::execute(client, action)?,
        DeadLetters { action } => dead_letters::execute(client, action)?,
        Policy { queue, change } => {
            let path = format!("/queues/{}/policy", enc(queue));
            let v = match change.body() {
                Some(body) => client.call_api("PATCH", &path, Some(&body))?,
                None => client.call_api("GET", &path, None)?,
            };
            (v, table::policy)
        }
    };
    if args.json {
        println!("{v}");
    } else {
        print!("{}", show(&v));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_percent_encoded_in_paths() {
        assert_eq!(enc("a b/c"), "a%20b%2Fc");
        assert_eq!(enc("plain-name_1.x"), "plain-name_1.x");
        assert_eq!(enc("~é&?%"), "~%C3%A9%26%3F%25");
    }

    #[test]
    fn a_policy_change_sends_only_what_was_given() {
        assert_eq!(PolicyChange::default().body(), None);
        let change = PolicyChange {
            rate_limit: Some("10/s".into()),
            lease_limit: Some(0),
            ..PolicyChange::default()
        };
        assert_eq!(
            change.body().unwrap(),
            serde_json::json!({"rate_limit": "10/s", "lease_limit": 0})
        );
        let change = PolicyChange {
            no_rate_limit: true,
            pause_seconds: Some(30),
            ..PolicyChange::default()
        };
        assert_eq!(
            change.body().unwrap(),
            serde_json::json!({"rate_limit": null, "paused": true, "pause_seconds": 30})
        );
        let change = PolicyChange {
            max_attempts: Some(3),
            backoff: Some("exponential".into()),
            dead_letter: Some("emails-dead".into()),
            ..PolicyChange::default()
        };
        assert_eq!(
            change.body().unwrap(),
            serde_json::json!({"max_attempts": 3, "backoff": "exponential", "dead_letter": "emails-dead"})
        );
    }
}
