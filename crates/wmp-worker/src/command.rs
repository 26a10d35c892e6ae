//! The ready-made command-line worker: runs a program per job, body on stdin, stdout as the
//! result. What `jobyard wmp-worker --connect … --role … -- COMMAND…` runs, so any script
//! becomes a WMP worker without writing protocol code.

use std::future::Future;
use std::process::Stdio;
use std::sync::Arc;

use bytes::Bytes;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::worker::{BuildError, Job, Outcome, Worker, WorkerConfig, WorkerStats};

/// Largest stdout kept as a result; a command that prints more fails with `error=too_large`
/// instead of growing the worker's memory without bound.
pub const MAX_RESULT: usize = 64 << 20;

/// Stderr bytes kept as the error text of a failed run.
pub const MAX_ERROR_TEXT: usize = 4096;

/// Runs `command` (program and arguments) for every job of `roles` from the managers at
/// `connects`, until `shutdown` completes. Exit status 0 → DONE `ok` with stdout; anything
/// else → DONE `fail` with `error=exit_N` (or `signal_N`) and stderr's tail as the text.
/// `config` gives concurrency and timers (its `connects` are replaced by `connects`).
pub async fn run_command_worker(
    connects: Vec<String>,
    roles: Vec<String>,
    command: Vec<String>,
    config: WorkerConfig,
    shutdown: impl Future,
) -> Result<WorkerStats, BuildError> {
    if command.is_empty() {
        return Err(BuildError::NoHandlers);
    }
    let command = Arc::new(command);
    let mut builder = Worker::builder().config(WorkerConfig { connects, ..config });
    for role in roles {
        let command = command.clone();
        builder = builder.handle(role, move |job| run_one(command.clone(), job));
    }
    let worker = builder.build()?;
    Ok(worker.run(shutdown).await)
}

/// Runs the command once for `job`.
pub async fn run_one(command: Arc<Vec<String>>, job: Job) -> Outcome {
    let mut child = match tokio::process::Command::new(&command[0])
        .args(&command[1..])
        .env("WMP_QUEUE", &job.queue)
        .env("WMP_JOB", job.job.to_string())
        .env("WMP_ATTEMPT", job.attempt.to_string())
        .env("WMP_MANAGER", &job.manager)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
    {
        Ok(child) => child,
        Err(e) => return fail("spawn", format!("cannot start {}: {e}", command[0])),
    };
    let mut stdin = child.stdin.take().expect("stdin is piped");
    let mut stdout = child.stdout.take().expect("stdout is piped");
    let mut stderr = child.stderr.take().expect("stderr is piped");
    let body = job.body.clone();
    // Feed stdin and drain both outputs at once so a chatty command cannot deadlock on a
    // full pipe. A command that does not read its stdin is fine: the write error is ignored.
    let feed = async move {
        let _ = stdin.write_all(&body).await;
        drop(stdin);
    };
    let collect_out = async {
        let mut out = Vec::new();
        let mut chunk = [0u8; 8192];
        loop {
            match stdout.read(&mut chunk).await {
                Ok(0) | Err(_) => return Ok(out),
                Ok(n) if out.len() + n > MAX_RESULT => return Err(()),
                Ok(n) => out.extend_from_slice(&chunk[..n]),
            }
        }
    };
    let collect_err = async {
        let mut tail = Vec::new();
        let mut chunk = [0u8; 4096];
        while let Ok(n) = stderr.read(&mut chunk).await {
            if n == 0 {
                break;
            }
            tail.extend_from_slice(&chunk[..n]);
            if tail.len() > MAX_ERROR_TEXT {
                tail.drain(..tail.len() - MAX_ERROR_TEXT);
            }
        }
        tail
    };
    let ((), out, err_tail) = tokio::join!(feed, collect_out, collect_err);
    let Ok(out) = out else {
        let _ = child.kill().await;
        return fail("too_large", format!("stdout exceeded {MAX_RESULT} bytes"));
    };
    let status = match child.wait().await {
        Ok(status) => status,
        Err(e) => return fail("wait", e.to_string()),
    };
    if status.success() {
        return Outcome::Ok(Bytes::from(out));
    }
    let code = match (status.code(), unix_signal(&status)) {
        (Some(code), _) => format!("exit_{code}"),
        (None, Some(sig)) => format!("signal_{sig}"),
        (None, None) => "exit_unknown".to_owned(),
    };
    Outcome::Fail {
        error: Some(code),
        message: Bytes::from(err_tail),
    }
}

fn fail(code: &str, text: String) -> Outcome {
    Outcome::Fail {
        error: Some(code.to_owned()),
        message: Bytes::from(text),
    }
}

#[cfg(unix)]
fn unix_signal(status: &std::process::ExitStatus) -> Option<i32> {
    use std::os::unix::process::ExitStatusExt;
    status.signal()
}

#[cfg(not(unix))]
fn unix_signal(_: &std::process::ExitStatus) -> Option<i32> {
    None
}
