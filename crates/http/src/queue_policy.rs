//! A queue's policy over HTTP: its lease limit, pause, rate limit and retry policy, shown
//! and changed.
//!
//! The engine decides and logs the policy ([`jobyard_engine::QueuePolicy`]); these routes
//! only translate. A change is answered once the log holds it, so an acknowledged pause
//! or limit survives a crash.

use axum::extract::State;
use axum::Json;
use jobyard_broker::Broker;
use jobyard_engine::{Backoff, Millis, Pause, Queue, QueuePolicy, RateLimit, RetryPolicy};
use serde::Deserialize;
use serde_json::{json, Value};

use crate::error::ApiError;
use crate::extract::{JsonBody, PathText};
use crate::queues::check_queue_name;
use crate::state::{Api, Command};

/// The policy as JSON. A queue that does not exist has the default policy.
fn policy_out(name: &str, queue: Option<&Queue>, now: Millis) -> Value {
    let policy = queue.map(Queue::policy).unwrap_or_default();
    let (paused, until) = match policy.pause {
        Pause::Off => (false, None),
        Pause::Until { at, .. } => (at > now, Some(at).filter(|&at| at > now)),
        Pause::Forever => (true, None),
    };
    json!({
        "queue": name,
        "lease_limit": policy.lease_limit,
        "rate_limit": policy.rate_limit.map(|r| r.to_string()),
        "rate_tokens": queue.and_then(|q| q.rate_tokens(now)),
        "paused": paused,
        "paused_until_ms": until,
        "waiting_workers": queue.map_or(0, Queue::waiting),
        "retry": policy.retry.as_ref().map(retry_out),
    })
}

/// A retry policy as JSON, with the TOML file's key names.
fn retry_out(retry: &RetryPolicy) -> Value {
    json!({
        "max_attempts": retry.max_attempts,
        "backoff": retry.backoff.as_str(),
        "backoff_ms": retry.backoff_ms,
        "backoff_max_ms": retry.backoff_max_ms,
        "dead_letter": retry.dead_letter.as_ref().map(|d| String::from_utf8_lossy(d)),
    })
}

/// `GET /v1/queues/{queue}/policy`.
pub async fn get_policy(
    State(api): State<Api>,
    PathText(name): PathText,
) -> Result<Json<Value>, ApiError> {
    api.count(Command::QueuePolicy);
    check_queue_name(&name)?;
    let txn = api.broker.lock();
    let queue = txn.queue_id(name.as_bytes()).map(|q| txn.queue(q));
    Ok(Json(policy_out(&name, queue, Broker::now())))
}

/// The body of `PATCH /v1/queues/{queue}/policy`: the fields given change, the others
/// keep their values.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct PolicyUpdate {
    /// At most this many jobs leased at once; 0 removes the limit.
    pub lease_limit: Option<u32>,
    /// `"10/s"`, `"600/m"`, `"36000/h"`; `null` removes the limit.
    #[serde(default, deserialize_with = "present")]
    pub rate_limit: Option<Option<String>>,
    /// `true` pauses (until resumed, or for `pause_seconds`), `false` resumes.
    pub paused: Option<bool>,
    /// With `paused: true`: resume by itself after this many seconds.
    pub pause_seconds: Option<u32>,
    /// Attempts a job gets in all; 0 removes the retry policy.
    pub max_attempts: Option<u32>,
    /// `"fixed"` or `"exponential"`.
    pub backoff: Option<String>,
    /// The delay before the first retry.
    pub backoff_ms: Option<u64>,
    /// The longest exponential delay (0: no cap).
    pub backoff_max_ms: Option<u64>,
    /// The dead-letter queue; `null`: bury after the last attempt.
    #[serde(default, deserialize_with = "present")]
    pub dead_letter: Option<Option<String>>,
}

/// Tells a field set to `null` (`Some(None)`) from one left out (`None`).
fn present<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Option<String>>, D::Error> {
    Option::<String>::deserialize(d).map(Some)
}

impl PolicyUpdate {
    /// `current` with this update's fields applied, or why they cannot be.
    pub fn applied_to(&self, current: QueuePolicy, now: Millis) -> Result<QueuePolicy, String> {
        let mut policy = current;
        if let Some(limit) = self.lease_limit {
            policy.lease_limit = limit;
        }
        if let Some(rate) = &self.rate_limit {
            policy.rate_limit = match rate {
                Some(text) => Some(text.parse::<RateLimit>().map_err(|e| e.to_string())?),
                None => None,
            };
        }
        policy.pause = match (self.paused, self.pause_seconds) {
            (None, None) => policy.pause,
            (Some(false), None) => Pause::Off,
            (Some(true), None) => Pause::Forever,
            (Some(true) | None, Some(secs)) if secs > 0 => Pause::Until {
                at: now + secs as Millis * 1000,
                secs,
            },
            _ => return Err("pause_seconds is a positive number, with paused true".into()),
        };
        policy.retry = self.retry_applied_to(policy.retry)?;
        Ok(policy)
    }

    /// The retry policy with this update's retry fields applied: any of them given starts
    /// from the current one (or the default), and `max_attempts: 0` removes it.
    fn retry_applied_to(
        &self,
        current: Option<RetryPolicy>,
    ) -> Result<Option<RetryPolicy>, String> {
        let given = self.max_attempts.is_some()
            || self.backoff.is_some()
            || self.backoff_ms.is_some()
            || self.backoff_max_ms.is_some()
            || self.dead_letter.is_some();
        if !given {
            return Ok(current);
        }
        if self.max_attempts == Some(0) {
            return Ok(None);
        }
        let mut retry = current.unwrap_or_default();
        if let Some(n) = self.max_attempts {
            retry.max_attempts = n;
        }
        if let Some(name) = &self.backoff {
            retry.backoff = Backoff::parse(name)
                .ok_or_else(|| format!("backoff is \"fixed\" or \"exponential\", not {name:?}"))?;
        }
        if let Some(ms) = self.backoff_ms {
            retry.backoff_ms = ms;
        }
        if let Some(ms) = self.backoff_max_ms {
            retry.backoff_max_ms = ms;
        }
        if let Some(dead_letter) = &self.dead_letter {
            if let Some(name) = dead_letter {
                check_queue_name(name).map_err(|_| format!("bad dead_letter queue {name:?}"))?;
            }
            retry.dead_letter = dead_letter.clone().map(Into::into);
        }
        Ok(Some(retry))
    }
}

/// `PATCH /v1/queues/{queue}/policy`: changes the fields given, answers with the whole
/// policy once it is logged. The queue is created if needed (a policy keeps it alive).
pub async fn set_policy(
    State(api): State<Api>,
    PathText(name): PathText,
    JsonBody(update): JsonBody<PolicyUpdate>,
) -> Result<Json<Value>, ApiError> {
    api.count(Command::SetQueuePolicy);
    check_queue_name(&name)?;
    let now = Broker::now();
    let (out, lsn) = {
        let mut txn = api.broker.lock();
        let current = txn
            .queue_id(name.as_bytes())
            .map_or_else(QueuePolicy::default, |q| txn.queue(q).policy());
        let policy = update
            .applied_to(current, now)
            .map_err(ApiError::bad_request)?;
        let q = txn.queue_id_or_create(name.as_bytes());
        txn.set_policy(q, policy, now);
        let queue = txn.queue_id(name.as_bytes()).map(|q| txn.queue(q));
        (policy_out(&name, queue, now), txn.commit())
    };
    api.broker.wait_durable(lsn).await;
    Ok(Json(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    const T0: Millis = 1_700_000_000_000;

    fn update(json: &str) -> PolicyUpdate {
        serde_json::from_str(json).unwrap()
    }

    #[test]
    fn only_the_fields_given_change() {
        let current = QueuePolicy {
            lease_limit: 4,
            rate_limit: Some("10/s".parse().unwrap()),
            ..QueuePolicy::default()
        };
        let p = update(r#"{"paused": true}"#)
            .applied_to(current.clone(), T0)
            .unwrap();
        assert_eq!(
            p,
            QueuePolicy {
                pause: Pause::Forever,
                ..current.clone()
            }
        );
        let p = update(r#"{"rate_limit": null, "lease_limit": 0}"#)
            .applied_to(current.clone(), T0)
            .unwrap();
        assert_eq!(p, QueuePolicy::default());
        let p = update(r#"{"pause_seconds": 30}"#)
            .applied_to(current, T0)
            .unwrap();
        assert_eq!(
            p.pause,
            Pause::Until {
                at: T0 + 30_000,
                secs: 30
            }
        );
    }

    #[test]
    fn bad_updates_are_refused() {
        for bad in [
            r#"{"rate_limit": "10/d"}"#,
            r#"{"paused": false, "pause_seconds": 5}"#,
            r#"{"pause_seconds": 0}"#,
        ] {
            assert!(
                update(bad).applied_to(QueuePolicy::default(), T0).is_err(),
                "{bad}"
            );
        }
        assert!(serde_json::from_str::<PolicyUpdate>(r#"{"max_tries": 3}"#).is_err());
        assert!(update(r#"{"backoff": "linear"}"#)
            .applied_to(QueuePolicy::default(), T0)
            .is_err());
    }

    #[test]
    fn retry_fields_change_the_retry_policy_and_zero_attempts_removes_it() {
        let p = update(r#"{"max_attempts": 3, "backoff": "exponential", "dead_letter": "dead"}"#)
            .applied_to(QueuePolicy::default(), T0)
            .unwrap();
        let retry = p.retry.clone().unwrap();
        assert_eq!(
            (
                retry.max_attempts,
                retry.backoff,
                retry.dead_letter.as_deref()
            ),
            (3, Backoff::Exponential, Some(&b"dead"[..]))
        );
        let p = update(r#"{"dead_letter": null}"#)
            .applied_to(p, T0)
            .unwrap();
        assert_eq!(p.retry.as_ref().unwrap().dead_letter, None);
        assert_eq!(p.retry.as_ref().unwrap().max_attempts, 3);
        let p = update(r#"{"max_attempts": 0}"#).applied_to(p, T0).unwrap();
        assert_eq!(p.retry, None);
    }
}
