//! A queue's policy over HTTP: its lease limit, pause and rate limit, shown and changed.
//!
//! The engine decides and logs the policy ([`jobyard_engine::QueuePolicy`]); these routes
//! only translate. A change is answered once the log holds it, so an acknowledged pause
//! or limit survives a crash.

use axum::extract::State;
use axum::Json;
use jobyard_broker::Broker;
use jobyard_engine::{Millis, Pause, Queue, QueuePolicy, RateLimit};
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
        Ok(policy)
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
            .applied_to(current, T0)
            .unwrap();
        assert_eq!(
            p,
            QueuePolicy {
                pause: Pause::Forever,
                ..current
            }
        );
        let p = update(r#"{"rate_limit": null, "lease_limit": 0}"#)
            .applied_to(current, T0)
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
        assert!(serde_json::from_str::<PolicyUpdate>(r#"{"max_attempts": 3}"#).is_err());
    }
}
