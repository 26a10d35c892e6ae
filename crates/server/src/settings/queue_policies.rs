//! The `[queues.NAME]` tables of the config file: queue policies declared at start.
//!
//! Each key given is set when the server starts, over whatever the log kept (an operator
//! who changed a limit at run time and wants it kept writes it here); keys left out keep
//! the logged value. The engine logs a policy only when it changes, so starting again
//! with the same file writes nothing. The retry keys (`max_attempts`, `backoff`,
//! `backoff_ms`, `backoff_max_ms`, `dead_letter`) are one part: a table that gives any of
//! them declares the whole retry policy, the keys it leaves out at their defaults (one
//! attempt, a fixed backoff of 0 ms, no cap, bury after the last attempt).

use std::collections::BTreeMap;

use jobyard_broker::Broker;
use jobyard_engine::{Backoff, Pause, QueuePolicy, RateLimit, RetryPolicy};
use serde::Deserialize;

/// One `[queues.NAME]` table as written.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct QueueTable {
    lease_limit: Option<u32>,
    rate_limit: Option<String>,
    paused: Option<bool>,
    max_attempts: Option<u32>,
    backoff: Option<String>,
    backoff_ms: Option<u64>,
    backoff_max_ms: Option<u64>,
    dead_letter: Option<String>,
}

/// A queue's policy as declared: `None` fields are left as they are.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeclaredQueue {
    pub name: String,
    pub lease_limit: Option<u32>,
    pub rate_limit: Option<RateLimit>,
    /// `true`: paused until resumed; `false`: not paused.
    pub paused: Option<bool>,
    /// The retry policy, when any of its keys is given.
    pub retry: Option<RetryPolicy>,
}

impl DeclaredQueue {
    /// `current` with the declared keys set.
    fn applied_to(&self, current: QueuePolicy) -> QueuePolicy {
        QueuePolicy {
            lease_limit: self.lease_limit.unwrap_or(current.lease_limit),
            rate_limit: self.rate_limit.or(current.rate_limit),
            pause: match self.paused {
                Some(true) => Pause::Forever,
                Some(false) => Pause::Off,
                None => current.pause,
            },
            retry: self.retry.clone().or(current.retry),
        }
    }
}

/// The declared queues of `--queues`: the config's `[queues]` table as JSON, or the path
/// of a TOML file of `[queues.NAME]` tables.
pub fn load(source: &str) -> Result<Vec<DeclaredQueue>, String> {
    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    struct QueuesFile {
        queues: BTreeMap<String, QueueTable>,
    }
    let tables: BTreeMap<String, QueueTable> = if source.starts_with('{') {
        serde_json::from_str(source).map_err(|e| format!("bad [queues] in the config: {e}"))?
    } else {
        let text = std::fs::read_to_string(source)
            .map_err(|e| format!("cannot read queues file {source}: {e}"))?;
        toml::from_str::<QueuesFile>(&text)
            .map_err(|e| format!("bad queues file {source}: {e}"))?
            .queues
    };
    tables
        .into_iter()
        .map(|(name, table)| declared(name, table))
        .collect()
}

fn declared(name: String, table: QueueTable) -> Result<DeclaredQueue, String> {
    let retry = retry_policy(&table).map_err(|e| format!("[queues.{name}]: {e}"))?;
    let rate_limit = table
        .rate_limit
        .map(|text| text.parse::<RateLimit>())
        .transpose()
        .map_err(|e| format!("[queues.{name}]: {e}"))?;
    if name.is_empty() || name.len() > 200 || name.chars().any(char::is_whitespace) {
        return Err(format!(
            "[queues.{name:?}]: a queue name is 1 to 200 bytes without whitespace"
        ));
    }
    Ok(DeclaredQueue {
        name,
        lease_limit: table.lease_limit,
        rate_limit,
        paused: table.paused,
        retry,
    })
}

/// The retry policy a table declares, if it gives any retry key.
fn retry_policy(table: &QueueTable) -> Result<Option<RetryPolicy>, String> {
    let given = table.max_attempts.is_some()
        || table.backoff.is_some()
        || table.backoff_ms.is_some()
        || table.backoff_max_ms.is_some()
        || table.dead_letter.is_some();
    if !given {
        return Ok(None);
    }
    let defaults = RetryPolicy::default();
    let backoff = match table.backoff.as_deref() {
        None => defaults.backoff,
        Some(name) => Backoff::parse(name)
            .ok_or_else(|| format!("backoff is \"fixed\" or \"exponential\", not {name:?}"))?,
    };
    let max_attempts = table.max_attempts.unwrap_or(defaults.max_attempts);
    if max_attempts == 0 {
        return Err("max_attempts is at least 1".into());
    }
    if table.dead_letter.as_deref() == Some("") {
        return Err("dead_letter names a queue".into());
    }
    Ok(Some(RetryPolicy {
        max_attempts,
        backoff,
        backoff_ms: table.backoff_ms.unwrap_or(defaults.backoff_ms),
        backoff_max_ms: table.backoff_max_ms.unwrap_or(defaults.backoff_max_ms),
        dead_letter: table.dead_letter.clone().map(Into::into),
    }))
}

/// Sets the declared policies, before any front end serves, and waits until the log
/// holds them.
pub async fn apply(broker: &Broker, queues: &[DeclaredQueue]) {
    if queues.is_empty() {
        return;
    }
    let now = Broker::now();
    let lsn = {
        let mut txn = broker.lock();
        for declared in queues {
            let q = txn.queue_id_or_create(declared.name.as_bytes());
            let policy = declared.applied_to(txn.queue(q).policy());
            txn.set_policy(q, policy, now);
        }
        txn.commit()
    };
    broker.wait_durable(lsn).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_parse_from_the_config_or_a_file() {
        let from_config = load(r#"{"emails": {"rate_limit": "10/s", "lease_limit": 4}}"#);
        let want = vec![DeclaredQueue {
            name: "emails".into(),
            lease_limit: Some(4),
            rate_limit: Some("10/s".parse().unwrap()),
            paused: None,
            retry: None,
        }];
        assert_eq!(from_config.unwrap(), want);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("q.toml");
        std::fs::write(
            &path,
            "[queues.emails]\nrate_limit = \"10/s\"\nlease_limit = 4\n",
        )
        .unwrap();
        assert_eq!(load(path.to_str().unwrap()).unwrap(), want);
    }

    #[test]
    fn bad_tables_are_refused_with_the_queue_named() {
        let err = load(r#"{"emails": {"rate_limit": "10/d"}}"#).unwrap_err();
        assert!(err.contains("[queues.emails]"), "{err}");
        assert!(load(r#"{"emails": {"max_tries": 3}}"#).is_err());
        assert!(load(r#"{"emails": {"backoff": "linear"}}"#).is_err());
        assert!(load(r#"{"emails": {"max_attempts": 0}}"#).is_err());
        assert!(load(r#"{"a b": {}}"#).is_err());
    }

    #[test]
    fn keys_left_out_keep_the_logged_value() {
        let logged = QueuePolicy {
            lease_limit: 2,
            pause: Pause::Forever,
            rate_limit: None,
            retry: None,
        };
        let declared = DeclaredQueue {
            name: "q".into(),
            lease_limit: None,
            rate_limit: Some("1/s".parse().unwrap()),
            paused: None,
            retry: None,
        };
        assert_eq!(
            declared.applied_to(logged.clone()),
            QueuePolicy {
                rate_limit: declared.rate_limit,
                ..logged
            }
        );
    }

    /// The issue's example table, as written, loads whole.
    #[test]
    fn the_retry_keys_load_as_one_retry_policy() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("q.toml");
        let example = r#"
[queues.emails]
max_attempts = 3               # after the third failed attempt: dead letter
backoff = "exponential"        # or "fixed"
backoff_ms = 1000              # first delay; doubles, with jitter, up to backoff_max_ms
backoff_max_ms = 60000
dead_letter = "emails-dead"    # absent: bury
rate_limit = "10/s"            # also "600/m", "36000/h"
lease_limit = 4
"#;
        std::fs::write(&path, example).unwrap();
        let loaded = load(path.to_str().unwrap()).unwrap();
        assert_eq!(
            loaded[0].retry,
            Some(RetryPolicy {
                max_attempts: 3,
                backoff: Backoff::Exponential,
                backoff_ms: 1000,
                backoff_max_ms: 60_000,
                dead_letter: Some("emails-dead".into()),
            })
        );
        assert_eq!(loaded[0].lease_limit, Some(4));
        let just_attempts = load(r#"{"q": {"max_attempts": 5}}"#).unwrap();
        assert_eq!(
            just_attempts[0].retry,
            Some(RetryPolicy {
                max_attempts: 5,
                ..RetryPolicy::default()
            })
        );
    }
}
