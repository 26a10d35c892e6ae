//! `jobyard ctl`: an operator's view of a running server, over its HTTP admin API
//! (`/admin/api/`, the same the dashboard uses): every queue whatever protocol fills it,
//! a queue's jobs page by page, and the actions (kick, delete, bury, pause, resume, drain).
//!
//! Tables are aligned for a terminal; `--json` prints the API's JSON for scripts. Exit
//! codes: 0 done, 1 the server refused (not found, wrong state), 2 usage or connection
//! errors.

mod table;

use clap::{Args, Subcommand};
use serde_json::Value;

/// `jobyard ctl` options.
#[derive(Args, Debug)]
pub struct CtlArgs {
    /// Base URL of jobyard's HTTP listener.
    #[arg(long, env = "JOBYARD_URL", default_value = "http://127.0.0.1:8080")]
    pub url: String,
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
}

/// Why a command failed, and its exit code.
struct Failure(String, i32);

/// Runs `jobyard ctl`; returns the process exit code.
pub fn run(args: CtlArgs) -> i32 {
    let base = args.url.trim_end_matches('/').to_string();
    match execute(&base, &args) {
        Ok(()) => 0,
        Err(Failure(msg, code)) => {
            eprintln!("jobyard ctl: {msg}");
            code
        }
    }
}

fn call(base: &str, method: &str, path: &str) -> Result<Value, Failure> {
    let url = format!("{base}/admin/api{path}");
    let res = ureq::request(method, &url).call();
    let (status, text) = match res {
        Ok(r) => (r.status(), r.into_string()),
        Err(ureq::Error::Status(code, r)) => (code, r.into_string()),
        Err(e) => return Err(Failure(format!("cannot reach {base}: {e}"), 2)),
    };
    let text = text.map_err(|e| Failure(format!("reading the reply: {e}"), 2))?;
    let v: Value = serde_json::from_str(&text)
        .map_err(|_| Failure(format!("{url} did not answer JSON ({status})"), 2))?;
    if status >= 400 {
        let msg = v["error"]["message"]
            .as_str()
            .unwrap_or("refused")
            .to_string();
        return Err(Failure(msg, 1));
    }
    Ok(v)
}

fn enc(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

fn execute(base: &str, args: &CtlArgs) -> Result<(), Failure> {
    use CtlCommand::*;
    let (v, show): (Value, fn(&Value) -> String) = match &args.command {
        Stats => (call(base, "GET", "/overview")?, table::stats),
        Queues => (call(base, "GET", "/overview")?, table::queues),
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
            (call(base, "GET", &path)?, table::jobs)
        }
        Peek { id } => (call(base, "GET", &format!("/jobs/{id}"))?, table::job),
        Kick { queue, bound } => (
            call(
                base,
                "POST",
                &format!("/queues/{}/kick?bound={bound}", enc(queue)),
            )?,
            table::done,
        ),
        KickJob { id } => (
            call(base, "POST", &format!("/jobs/{id}/kick"))?,
            table::done,
        ),
        Delete { id } => (
            call(base, "POST", &format!("/jobs/{id}/delete"))?,
            table::done,
        ),
        Bury { id } => (
            call(base, "POST", &format!("/jobs/{id}/bury"))?,
            table::done,
        ),
        Pause { queue } => (
            call(base, "POST", &format!("/queues/{}/pause", enc(queue)))?,
            table::done,
        ),
        Resume { queue } => (
            call(base, "POST", &format!("/queues/{}/resume", enc(queue)))?,
            table::done,
        ),
        Drain => (call(base, "POST", "/drain")?, table::done),
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
    }
}
