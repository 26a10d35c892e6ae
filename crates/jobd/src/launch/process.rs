//! Runs one job's launcher command and reports how it ended.
//!
//! Differences from jobd, all on purpose: the child gets its own session and process group
//! (`setsid`), so a signal or a shutdown reaches everything the job started; output is
//! read as bytes, at most `max_output` per stream (the rest is drained and dropped), and
//! decoded once; the job ends when the child has exited and its pipes have closed, or
//! [`PIPE_GRACE`] after the exit if a grandchild keeps them open; stdin is /dev/null.
//!
//! The child also gets a parent-death signal (SIGKILL), so a kill -9 of the daemon does not
//! leave jobs running unrecorded. Linux delivers it when the *thread* that forked exits:
//! start jobs from long-lived runtime threads (the worker starts them on its runtime's
//! worker threads, which live as long as the runtime; tokio's blocking-pool threads do not).

use std::future::Future;
use std::pin::Pin;
use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::process::Command;

use super::job::{argv, LaunchSpec, Outcome};

/// How long output is still collected after the child exited while a grandchild holds
/// the pipes open (jobd did not wait at all and could lose the tail).
pub const PIPE_GRACE: Duration = Duration::from_millis(500);

/// A running job: its process group id is its pid.
pub struct Running {
    child: Child,
    /// The process group to signal.
    pub pgid: i32,
    /// Reading stdout and stderr: polled by [`Running::wait`] on the job's own task, not
    /// as tasks of their own (two task spawns and their wake-ups per launch).
    out: Reader,
    err: Reader,
}

/// One pipe being read, up to the cap.
type Reader = Pin<Box<dyn Future<Output = Vec<u8>> + Send>>;

/// How the job's process is waited for: its pidfd (started by [`super::spawn`]), or
/// tokio's child handle (the fork fallback on kernels without `CLONE_PIDFD`).
enum Child {
    Pidfd(std::os::fd::OwnedFd),
    Tokio(tokio::process::Child),
}

/// Starts job `id`. An error is a readable reason (e.g. the launcher does not exist).
pub fn start(spec: &LaunchSpec, id: u64) -> Result<Running, String> {
    let args = argv(&spec.template, id);
    let Some((program, rest)) = args.split_first() else {
        return Err("launcher command is empty".into());
    };
    match super::spawn::spawn(&args, spec.cwd.as_deref(), &spec.env) {
        Ok(s) => {
            let (pid, pidfd, out, err) = s.into_parts();
            let cap = spec.max_output;
            let pipe = |fd| tokio::net::unix::pipe::Receiver::from_owned_fd_unchecked(fd).ok();
            return Ok(Running {
                child: Child::Pidfd(pidfd),
                pgid: pid,
                out: Box::pin(read_capped(pipe(out), cap)),
                err: Box::pin(read_capped(pipe(err), cap)),
            });
        }
        Err(super::spawn::SpawnError::Failed(e)) => {
            return Err(format!("cannot start launcher '{program}': {e}"));
        }
        Err(super::spawn::SpawnError::Unsupported) => {}
    }
    let mut cmd = Command::new(program);
    cmd.args(rest)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(false);
    if let Some(cwd) = &spec.cwd {
        cmd.current_dir(cwd);
    }
    for (k, v) in &spec.env {
        cmd.env(k, v);
    }
    // SAFETY: only async-signal-safe calls between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            if libc::setsid() < 0 {
                return Err(std::io::Error::last_os_error());
            }
            // A kill -9 of the daemon takes the launcher with it, so no job runs on
            // unrecorded after the restart reclaims its row.
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            Ok(())
        });
    }
    let mut child = cmd
        .spawn()
        .map_err(|e| format!("cannot start launcher '{program}': {e}"))?;
    let pgid = child.id().map(|p| p as i32).unwrap_or(0);
    let cap = spec.max_output;
    let stdout = child.stdout.take();
    let stderr = child.stderr.take();
    Ok(Running {
        child: Child::Tokio(child),
        pgid,
        out: Box::pin(read_capped(stdout, cap)),
        err: Box::pin(read_capped(stderr, cap)),
    })
}

impl Running {
    /// Waits for the end of the job and collects its output: the pipes are read while
    /// the process runs (so a chatty job never blocks on a full pipe), then for at most
    /// [`PIPE_GRACE`] after its exit; a pipe still open then (a grandchild holds it) gives
    /// no output, as before.
    pub async fn wait(self) -> Outcome {
        use std::os::unix::process::ExitStatusExt;
        let Running {
            child,
            mut out,
            mut err,
            ..
        } = self;
        let exited = async move {
            match child {
                Child::Tokio(mut c) => c.wait().await.map(|st| (st.code(), st.signal())),
                Child::Pidfd(fd) => super::spawn::Spawned::wait(fd).await,
            }
        };
        tokio::pin!(exited);
        let (mut stdout, mut stderr) = (None, None);
        let status = loop {
            tokio::select! {
                st = &mut exited => break st,
                o = &mut out, if stdout.is_none() => stdout = Some(o),
                e = &mut err, if stderr.is_none() => stderr = Some(e),
            }
        };
        let grace = tokio::time::sleep(PIPE_GRACE);
        tokio::pin!(grace);
        while stdout.is_none() || stderr.is_none() {
            tokio::select! {
                o = &mut out, if stdout.is_none() => stdout = Some(o),
                e = &mut err, if stderr.is_none() => stderr = Some(e),
                _ = &mut grace => break,
            }
        }
        let (stdout, stderr) = (stdout.unwrap_or_default(), stderr.unwrap_or_default());
        match status {
            Ok((code, signal)) => Outcome {
                code,
                signal,
                stdout: String::from_utf8_lossy(&stdout).into_owned(),
                stderr: String::from_utf8_lossy(&stderr).into_owned(),
            },
            Err(e) => Outcome::spawn_failed(format!("waiting for the launcher failed: {e}")),
        }
    }
}

async fn read_capped<R: AsyncRead + Unpin>(pipe: Option<R>, cap: usize) -> Vec<u8> {
    let Some(mut pipe) = pipe else {
        return Vec::new();
    };
    let mut kept = Vec::new();
    let mut chunk = vec![0u8; 16 * 1024];
    loop {
        match pipe.read(&mut chunk).await {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                let room = cap.saturating_sub(kept.len());
                kept.extend_from_slice(&chunk[..n.min(room)]);
            }
        }
    }
    kept
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::launch::signal_group;

    /// A launcher running `body` through `/bin/sh`. The file is not executed itself: a
    /// test launching in parallel may have forked while this one still had the file open
    /// for writing, and exec of a file open for writing fails (ETXTBSY).
    fn script(dir: &std::path::Path, body: &str) -> LaunchSpec {
        let path = dir.join("job.sh");
        std::fs::write(&path, format!("{body}\n")).unwrap();
        LaunchSpec {
            template: format!("/bin/sh {}", path.display()),
            cwd: None,
            env: Vec::new(),
            max_output: 1 << 20,
        }
    }

    #[tokio::test]
    async fn output_larger_than_a_pipe_is_read_while_the_job_runs() {
        // 256 KiB on each stream is more than a pipe holds: unless both are read while
        // the job runs, it blocks writing and never exits.
        let dir = tempfile::tempdir().unwrap();
        let spec = script(
            dir.path(),
            "head -c 262144 /dev/zero | tr '\\0' a; head -c 262144 /dev/zero | tr '\\0' b >&2",
        );
        let o = start(&spec, 1).unwrap().wait().await;
        assert_eq!(o.code, Some(0));
        assert_eq!(o.stdout.len(), 262144);
        assert!(o.stdout.bytes().all(|b| b == b'a'));
        assert_eq!(o.stderr.len(), 262144);
        assert!(o.stderr.bytes().all(|b| b == b'b'));
    }

    #[tokio::test]
    async fn a_grandchild_holding_a_pipe_does_not_hold_the_job() {
        // The launcher exits at once, leaving a background process with its stdout open:
        // the job ends PIPE_GRACE after the exit, not when the grandchild does (an hour);
        // the stream that did close (stderr) keeps its output.
        let dir = tempfile::tempdir().unwrap();
        let spec = script(dir.path(), "echo err >&2; exec 2>&-; sleep 3600 &");
        let running = start(&spec, 1).unwrap();
        let pgid = running.pgid;
        let o = tokio::time::timeout(Duration::from_secs(60), running.wait())
            .await
            .expect("the job ended without waiting for its grandchild");
        signal_group(pgid, libc::SIGKILL);
        assert_eq!(o.code, Some(0));
        assert_eq!(o.stderr, "err\n");
    }
}
