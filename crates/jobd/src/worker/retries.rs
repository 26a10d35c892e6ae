//! A jobd launch under its target's retry policy (docs/retries.md, "jobd").
//!
//! A target is an engine queue, so `[queues.TARGET]` (or the HTTP policy route) gives it a
//! retry policy like any queue's. The worker's jobs are not durable engine jobs (the row
//! is the truth), so the engine's own retry path does not see them: the worker applies
//! the same policy itself, with the engine's backoff ([`RetryPolicy::delay_ms`]) and the
//! engine's failure history. A launch that failed (a non-zero exit, a signal, a launcher
//! that could not start) is an attempt; the row stays `running` and keeps its slot while
//! it waits for the backoff, and is launched again; after the last attempt the row is
//! written failed as without a policy, and with a `dead_letter` queue a durable dead
//! letter carrying the failures is put there. Not attempts: an end by a signal an operator
//! sent (`send-signal`), and any end while the worker shuts down.

use std::time::Duration;

use bytes::Bytes;
use jobyard_broker::Broker;
use jobyard_engine::{Failure, FailureHistory, LeaseClose, RetryPolicy, HISTORY_KEPT};

use crate::launch::{signal_name, Outcome};

/// The most bytes of a launch's stderr kept in a failure's error text (its tail).
pub(super) const STDERR_TAIL: usize = 512;

/// What follows a launch's end.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Next {
    /// Store the end: it succeeded, there is no policy, or it was not an attempt.
    Store,
    /// Launch again after this pause.
    Retry(Duration),
    /// The last attempt failed: store the end, and put a dead letter in this queue first
    /// (`None`: bury, which for a row means only the failed end).
    GiveUp(Option<Bytes>),
}

/// One row's failed attempts so far.
pub(super) struct Attempts {
    history: FailureHistory,
}

impl Attempts {
    /// No failures yet, of a row of `target`.
    pub(super) fn new(target: &str) -> Attempts {
        Attempts {
            history: FailureHistory {
                origin: Bytes::copy_from_slice(target.as_bytes()),
                ..FailureHistory::default()
            },
        }
    }

    /// Decides what follows `outcome`, the end of a launch of engine job `job` that
    /// counts as an attempt if it failed, under `policy`; records the failure (by the
    /// worker `worker`, engine session `holder`) if it was one.
    pub(super) fn after(
        &mut self,
        outcome: &Outcome,
        policy: Option<&RetryPolicy>,
        job: u64,
        holder: u64,
        worker: &str,
    ) -> Next {
        let Some(policy) = policy else {
            return Next::Store;
        };
        if outcome.ok() {
            return Next::Store;
        }
        let history = &mut self.history;
        history.count += 1;
        history.failures.push(Failure::new(
            Broker::now(),
            holder,
            LeaseClose::Failed,
            Some(Bytes::from(error_text(outcome, worker))),
        ));
        if history.failures.len() > HISTORY_KEPT {
            history.failures.remove(0);
        }
        if history.count < policy.max_attempts {
            Next::Retry(Duration::from_millis(policy.delay_ms(job, history.count)))
        } else {
            Next::GiveUp(policy.dead_letter.clone())
        }
    }

    /// The failures, for a dead letter.
    pub(super) fn into_history(self) -> FailureHistory {
        self.history
    }
}

/// A failure's error text: the worker, how the launch ended and the tail of its stderr.
fn error_text(outcome: &Outcome, worker: &str) -> String {
    let how = match (outcome.code, outcome.signal) {
        (Some(code), _) => format!("exit code {code}"),
        (None, Some(sig)) => format!("killed by {}", signal_name(sig)),
        (None, None) => "could not start".to_string(),
    };
    let stderr = outcome.stderr.trim_end();
    if stderr.is_empty() {
        return format!("worker {worker}: {how}");
    }
    let mut from = stderr.len().saturating_sub(STDERR_TAIL);
    while !stderr.is_char_boundary(from) {
        from += 1;
    }
    format!("worker {worker}: {how}; stderr: {}", &stderr[from..])
}

#[cfg(test)]
mod tests {
    use super::*;
    use jobyard_engine::Backoff;

    fn exit(code: i32, stderr: &str) -> Outcome {
        Outcome {
            code: Some(code),
            signal: None,
            stdout: String::new(),
            stderr: stderr.into(),
        }
    }

    fn policy(max_attempts: u32, dead_letter: Option<&'static str>) -> RetryPolicy {
        RetryPolicy {
            max_attempts,
            backoff: Backoff::Fixed,
            backoff_ms: 250,
            backoff_max_ms: 0,
            dead_letter: dead_letter.map(|d| Bytes::from_static(d.as_bytes())),
        }
    }

    #[test]
    fn failures_retry_until_the_attempts_run_out_then_give_up() {
        let p = policy(3, Some("t-dead"));
        let mut a = Attempts::new("t");
        let retry = Next::Retry(Duration::from_millis(250));
        assert_eq!(a.after(&exit(2, "no"), Some(&p), 9, 4, "w1"), retry);
        assert_eq!(a.after(&exit(3, ""), Some(&p), 9, 4, "w1"), retry);
        assert_eq!(
            a.after(&exit(4, "boom\n"), Some(&p), 9, 4, "w1"),
            Next::GiveUp(Some(Bytes::from_static(b"t-dead")))
        );
        let h = a.into_history();
        assert_eq!((h.count, &h.origin[..]), (3, &b"t"[..]));
        let errors: Vec<_> = h
            .failures
            .iter()
            .map(|f| f.error.clone().unwrap())
            .collect();
        assert_eq!(errors[0], "worker w1: exit code 2; stderr: no");
        assert_eq!(errors[1], "worker w1: exit code 3");
        assert_eq!(errors[2], "worker w1: exit code 4; stderr: boom");
        assert!(h.failures.iter().all(|f| f.holder == 4));
    }

    #[test]
    fn success_or_no_policy_stores_the_end_at_once() {
        let mut a = Attempts::new("t");
        assert_eq!(
            a.after(&exit(0, ""), Some(&policy(3, None)), 1, 1, "w"),
            Next::Store
        );
        assert_eq!(a.after(&exit(1, ""), None, 1, 1, "w"), Next::Store);
        assert_eq!(
            a.after(&exit(1, ""), Some(&policy(1, None)), 1, 1, "w"),
            Next::GiveUp(None)
        );
    }

    #[test]
    fn signals_and_failed_starts_are_named_and_stderr_is_cut_to_its_tail() {
        let killed = Outcome {
            code: None,
            signal: Some(libc::SIGKILL),
            stdout: String::new(),
            stderr: String::new(),
        };
        assert_eq!(error_text(&killed, "w"), "worker w: killed by SIGKILL");
        let spawn = Outcome::spawn_failed("no such file".into());
        assert_eq!(
            error_text(&spawn, "w"),
            "worker w: could not start; stderr: no such file"
        );
        let long = "é".repeat(STDERR_TAIL);
        let text = error_text(&exit(1, &format!("start{long}")), "w");
        assert!(!text.contains("start") && text.ends_with('é'), "{text}");
    }
}
