//! The `[queues.NAME]` tables of the config file: queue policies declared at start.
//!
//! Each key given is set when the server starts, over whatever the log kept (an operator
//! who changed a limit at run time and wants it kept writes it here); keys left out keep
//! the logged value. The engine logs a policy only when it changes, so starting again
//! with the same file writes nothing.

use std::collections::BTreeMap;

use jobyard_broker::Broker;
use jobyard_engine::{Pause, QueuePolicy, RateLimit};
use serde::Deserialize;

/// One `[queues.NAME]` table as written.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct QueueTable {
    lease_limit: Option<u32>,
    rate_limit: Option<String>,
    paused: Option<bool>,
}

/// A queue's policy as declared: `None` fields are left as they are.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeclaredQueue {
    pub name: String,
    pub lease_limit: Option<u32>,
    pub rate_limit: Option<RateLimit>,
    /// `true`: paused until resumed; `false`: not paused.
    pub paused: Option<bool>,
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
    })
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
        assert!(load(r#"{"emails": {"max_attempts": 3}}"#).is_err());
        assert!(load(r#"{"a b": {}}"#).is_err());
    }

    #[test]
    fn keys_left_out_keep_the_logged_value() {
        let logged = QueuePolicy {
            lease_limit: 2,
            pause: Pause::Forever,
            rate_limit: None,
        };
        let declared = DeclaredQueue {
            name: "q".into(),
            lease_limit: None,
            rate_limit: Some("1/s".parse().unwrap()),
            paused: None,
        };
        assert_eq!(
            declared.applied_to(logged),
            QueuePolicy {
                rate_limit: declared.rate_limit,
                ..logged
            }
        );
    }
}
