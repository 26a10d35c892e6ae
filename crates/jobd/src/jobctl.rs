//! jobctl: the command-line client for a jobd worker or jobd-master (reference §8), with
//! the same options, config file, commands and output. Also offers the commands jobd's
//! README listed as missing: add-target, remove-target, run-manual and send-signal.

use std::io::{BufRead, Write};
use std::sync::Arc;

use serde_json::{json, Value};
use tokio::net::TcpStream;

use crate::ini::Ini;
use crate::link::{Handler, Link, LinkError, ReplyFuture};
use crate::protocol::MAX_RESPONSE_FRAME;
use crate::session::Session;

const USAGE: &str = "Usage: jobctl [OPTIONS] COMMAND [ARGS]

Options:
    --master             Connect to jobd-master instead of a jobd worker.
    --host HOST          Host to connect to (default: 127.0.0.1).
    --port PORT          Port (default: 7080, or 7081 with --master).
    --config PATH        Config file (default: ~/.jobctl.conf; keys: master, host,
                         port, password, log_level).
    --password           Ask for the password on standard input.
    --log-level LEVEL    error, warn, info, debug or trace (default: warn).
    --help               Show this help.
    --version            Show the version.

Worker commands:
    list-targets                      List targets with their state.
    memory-usage                      Show memory usage.
    poll TARGET...                    Ask the worker to fetch jobs of targets.
    set-target-concurrency TARGET N   Change a target's concurrency.
    pause TARGET...                   Pause targets.
    continue TARGET...                Continue targets.
    add-target TARGET N               Add a target.
    remove-target TARGET              Remove an idle target.
    run-manual ID...                  Run manual jobs and print their results.
    send-signal ID SIGNAL             Signal a running job's process group.

Master commands:
    list-workers                      List workers and their targets.
    memory-usage                      Show memory usage.
    poke TARGET...                    Make the workers of targets fetch jobs.
    pause [TARGET...]                 Pause targets on the workers.
    continue [TARGET...]              Continue targets on the workers.
    run-manual ID:TARGET...           Run manual jobs through the workers.
    send-signal ID SIGNAL TARGET      Signal a running job.
";

#[derive(Debug, Default)]
struct Options {
    master: bool,
    host: Option<String>,
    port: Option<u16>,
    config: Option<String>,
    ask_password: bool,
    help: bool,
    version: bool,
}

/// Runs jobctl with `args` (without the program name); returns the exit code.
pub fn run_jobctl(args: Vec<String>) -> i32 {
    let mut out = std::io::stdout();
    let mut err = std::io::stderr();
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("ERROR [jobctl] {e}");
            return 1;
        }
    };
    rt.block_on(jobctl(args, &mut out, &mut err))
}

fn parse_options(args: &[String]) -> Result<(Options, Vec<String>), String> {
    let mut o = Options::default();
    let mut i = 0;
    while i < args.len() {
        let a = &args[i];
        if !a.starts_with("--") {
            break;
        }
        let (name, inline) = match a[2..].split_once('=') {
            Some((n, v)) => (n.to_string(), Some(v.to_string())),
            None => (a[2..].to_string(), None),
        };
        let value = |i: &mut usize| -> Result<String, String> {
            if let Some(v) = inline.clone() {
                return Ok(v);
            }
            *i += 1;
            args.get(*i)
                .cloned()
                .ok_or(format!("option --{name} needs a value"))
        };
        match name.as_str() {
            "master" => o.master = true,
            "password" => o.ask_password = true,
            "help" => o.help = true,
            "version" => o.version = true,
            "host" => o.host = Some(value(&mut i)?),
            "port" => {
                let v = value(&mut i)?;
                o.port = Some(v.parse().map_err(|_| format!("invalid port '{v}'"))?);
            }
            "config" => o.config = Some(value(&mut i)?),
            "log-level" => {
                value(&mut i)?;
            }
            _ => return Err(format!("unknown option --{name}")),
        }
        i += 1;
    }
    Ok((o, args[i..].to_vec()))
}

struct NoRequests;

impl Handler for NoRequests {
    fn handle(&self, _link: Arc<Link>, kind: String, _data: Value) -> ReplyFuture {
        Box::pin(async move { Err(format!("unknown request type: '{kind}'")) })
    }
}

/// jobctl against writers, so tests can read what it prints.
pub async fn jobctl(args: Vec<String>, out: &mut dyn Write, err: &mut dyn Write) -> i32 {
    let (mut o, rest) = match parse_options(&args) {
        Ok(x) => x,
        Err(e) => {
            let _ = writeln!(err, "ERROR [jobctl] {e}");
            return 1;
        }
    };
    if o.version {
        let _ = writeln!(out, "{}", env!("CARGO_PKG_VERSION"));
        return 0;
    }
    if o.help || rest.is_empty() {
        let _ = write!(out, "{USAGE}");
        return 0;
    }
    let config_path = o.config.clone().or_else(|| {
        std::env::var("HOME")
            .ok()
            .map(|h| format!("{h}/.jobctl.conf"))
    });
    let mut password = None;
    if let Some(path) = config_path {
        if let Ok(text) = std::fs::read_to_string(&path) {
            let ini = Ini::parse(&text);
            if matches!(ini.get("master"), Some("1") | Some("true")) {
                o.master = true;
            }
            if o.host.is_none() {
                o.host = ini.get("host").map(str::to_string);
            }
            if o.port.is_none() {
                o.port = ini.get("port").and_then(|p| p.parse().ok());
            }
            password = ini
                .get("password")
                .filter(|p| !p.is_empty())
                .map(str::to_string);
        }
    }
    if o.ask_password {
        let _ = write!(out, "Password: ");
        let _ = out.flush();
        let mut line = String::new();
        let _ = std::io::stdin().lock().read_line(&mut line);
        password = Some(line.trim_end_matches(['\r', '\n']).to_string());
    }
    let host = o.host.clone().unwrap_or_else(|| "127.0.0.1".into());
    let port = o.port.unwrap_or(if o.master { 7081 } else { 7080 });
    let (command, cmd_args) = (rest[0].as_str(), &rest[1..]);
    let request = match build_request(o.master, command, cmd_args) {
        Ok(r) => r,
        Err(e) => {
            let _ = writeln!(err, "ERROR [jobctl] {e}");
            return 1;
        }
    };
    let stream = match TcpStream::connect((host.as_str(), port)).await {
        Ok(s) => s,
        Err(e) => {
            let _ = writeln!(err, "ERROR [jobctl] cannot connect to {host}:{port}: {e}");
            return 1;
        }
    };
    let link = Link::spawn(
        stream,
        Session::new(None, true),
        Arc::new(NoRequests),
        MAX_RESPONSE_FRAME,
        password,
    );
    let (kind, data) = request;
    let result = link.request(kind, data, None).await;
    link.close();
    match result {
        Ok(v) => {
            let _ = write!(out, "{}", render(o.master, command, &v));
            0
        }
        Err(LinkError::Remote(e)) => {
            let _ = writeln!(err, "ERROR [jobctl] Worker error: {e}");
            0
        }
        Err(e) => {
            let _ = writeln!(err, "ERROR [jobctl] {e}");
            1
        }
    }
}

fn build_request(
    master: bool,
    command: &str,
    args: &[String],
) -> Result<(&'static str, Value), String> {
    let targets = |min: usize| -> Result<Value, String> {
        if args.len() < min {
            return Err("No targets specified.".into());
        }
        Ok(if args.is_empty() {
            json!({})
        } else {
            json!({"targets": args})
        })
    };
    let number = |s: &String| -> Result<i64, String> {
        s.parse::<i64>()
            .map_err(|_| "'concurrency' must be a number.".to_string())
    };
    let r = match (master, command) {
        (false, "list-targets") | (_, "memory-usage") => ("status", json!({})),
        (true, "list-workers") => ("status", json!({"poll_workers": true})),
        (false, "poll") => ("poll", targets(1)?),
        (true, "poke") => ("poke", targets(1)?),
        (false, "pause") => ("pause", targets(1)?),
        (false, "continue") => ("continue", targets(1)?),
        (true, "pause") => ("pause", targets(0)?),
        (true, "continue") => ("continue", targets(0)?),
        (false, "set-target-concurrency") | (false, "add-target") => {
            if args.len() != 2 {
                return Err("Invalid number of arguments.".into());
            }
            let kind = if command == "add-target" {
                "add-target"
            } else {
                "set-target-concurrency"
            };
            (
                kind,
                json!({"target": args[0], "concurrency": number(&args[1])?}),
            )
        }
        (false, "remove-target") => {
            if args.len() != 1 {
                return Err("Invalid number of arguments.".into());
            }
            ("remove-target", json!({"target": args[0]}))
        }
        (false, "run-manual") => {
            let ids: Result<Vec<u64>, _> = args.iter().map(|a| a.parse::<u64>()).collect();
            match ids {
                Ok(ids) if !ids.is_empty() => ("run-manual", json!({"ids": ids})),
                _ => return Err("Invalid job ids.".into()),
            }
        }
        (true, "run-manual") => {
            let mut jobs = Vec::new();
            for a in args {
                let (id, target) = a.split_once(':').ok_or("Expected ID:TARGET.")?;
                let id: u64 = id.parse().map_err(|_| "Invalid job ids.")?;
                jobs.push(json!({"id": id, "target": target}));
            }
            if jobs.is_empty() {
                return Err("Invalid job ids.".into());
            }
            ("run-manual", json!({"jobs": jobs}))
        }
        (false, "send-signal") if args.len() == 2 => {
            let sig: Value = match args[1].parse::<i64>() {
                Ok(n) => n.into(),
                Err(_) => args[1].clone().into(),
            };
            ("send-signal", json!({"jobs": {args[0].clone(): sig}}))
        }
        (true, "send-signal") if args.len() == 3 => {
            let id: u64 = args[0].parse().map_err(|_| "Invalid job ids.")?;
            let sig: i64 = args[1].parse().map_err(|_| "'signal' must be a number.")?;
            (
                "send-signal",
                json!({"jobs": [{"id": id, "signal": sig, "target": args[2]}]}),
            )
        }
        (_, "send-signal") => return Err("Invalid number of arguments.".into()),
        _ => return Err(format!("Unsupported command: '{command}'")),
    };
    Ok(r)
}

fn render(master: bool, command: &str, v: &Value) -> String {
    match command {
        "list-targets" => {
            let mut rows = Vec::new();
            if let Some(Value::Object(t)) = v.get("targets") {
                for (name, s) in t {
                    rows.push(target_row(name.clone(), s));
                }
            }
            table(&["TARGET", "CONCURRENCY", "LENGTH", "PAUSED"], rows)
        }
        "list-workers" => {
            let mut rows = Vec::new();
            for w in v
                .get("workers")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                let who = format!(
                    "{}\n({})",
                    w.get("name").and_then(Value::as_str).unwrap_or(""),
                    w.get("remoteAddr").and_then(Value::as_str).unwrap_or("")
                );
                let status = w.get("workerStatus").and_then(|s| s.get("targets"));
                let names: Vec<String> = match status {
                    Some(Value::Object(t)) => t.keys().cloned().collect(),
                    _ => w
                        .get("targets")
                        .and_then(Value::as_array)
                        .into_iter()
                        .flatten()
                        .filter_map(|t| t.as_str().map(str::to_string))
                        .collect(),
                };
                let mut cols = [String::new(), String::new(), String::new(), String::new()];
                for n in &names {
                    let s = status
                        .and_then(|t| t.get(n))
                        .cloned()
                        .unwrap_or(Value::Null);
                    let r = target_row(n.clone(), &s);
                    for (c, val) in cols.iter_mut().zip(r) {
                        if !c.is_empty() {
                            c.push('\n');
                        }
                        c.push_str(&val);
                    }
                }
                let [t, c, l, p] = cols;
                rows.push(vec![who, t, c, l, p]);
            }
            table(
                &["WORKER", "TARGETS", "CONCURRENCY", "LENGTH", "PAUSED"],
                rows,
            )
        }
        "memory-usage" => {
            let mut rows = Vec::new();
            if let Some(Value::Object(m)) = v.get("memoryUsage") {
                for (k, val) in m {
                    rows.push(vec![k.clone(), val.to_string()]);
                }
            }
            if !master {
                let n = v.get("jobPromisesCount").cloned().unwrap_or(json!(0));
                rows.push(vec!["pendingJobPromises".into(), n.to_string()]);
            }
            table(&["WHAT", "VALUE"], rows)
        }
        _ => match v {
            Value::String(s) => format!("{s}\n"),
            other => format!(
                "{}\n",
                serde_json::to_string_pretty(other).unwrap_or_default()
            ),
        },
    }
}

fn target_row(name: String, s: &Value) -> Vec<String> {
    let field = |k: &str| s.get(k).map(|v| v.to_string()).unwrap_or_default();
    let paused = match s.get("paused") {
        Some(Value::Bool(true)) => "yes",
        Some(Value::Bool(false)) => "no",
        _ => "",
    };
    vec![
        name,
        field("concurrency"),
        field("length"),
        paused.to_string(),
    ]
}

/// A plain text table; cells may span several lines.
fn table(header: &[&str], rows: Vec<Vec<String>>) -> String {
    let mut widths: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for r in &rows {
        for (i, c) in r.iter().enumerate() {
            for line in c.lines() {
                widths[i] = widths[i].max(line.chars().count());
            }
        }
    }
    let sep: String = widths
        .iter()
        .map(|w| "-".repeat(w + 2))
        .collect::<Vec<_>>()
        .join("+");
    let line = |cells: Vec<&str>| -> String {
        let parts: Vec<String> = cells
            .iter()
            .zip(&widths)
            .map(|(c, w)| format!(" {c:<w$} "))
            .collect();
        format!("{}\n", parts.join("|").trim_end())
    };
    let mut out = line(header.to_vec());
    out.push_str(&sep);
    out.push('\n');
    for r in rows {
        let height = r
            .iter()
            .map(|c| c.lines().count().max(1))
            .max()
            .unwrap_or(1);
        for i in 0..height {
            out.push_str(&line(
                r.iter().map(|c| c.lines().nth(i).unwrap_or("")).collect(),
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn argument_errors() {
        assert_eq!(
            build_request(false, "poll", &[]).unwrap_err(),
            "No targets specified."
        );
        assert_eq!(
            build_request(false, "nope", &[]).unwrap_err(),
            "Unsupported command: 'nope'"
        );
        assert_eq!(
            build_request(false, "set-target-concurrency", &["a".into()]).unwrap_err(),
            "Invalid number of arguments."
        );
        assert_eq!(
            build_request(false, "set-target-concurrency", &["a".into(), "x".into()]).unwrap_err(),
            "'concurrency' must be a number."
        );
        assert_eq!(build_request(true, "pause", &[]).unwrap().1, json!({}));
    }

    #[test]
    fn options_stop_at_the_command() {
        let args: Vec<String> = ["--master", "--port=9", "poke", "--host"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let (o, rest) = parse_options(&args).unwrap();
        assert!(o.master);
        assert_eq!(o.port, Some(9));
        assert_eq!(rest, vec!["poke", "--host"]);
    }
}
