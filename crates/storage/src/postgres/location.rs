//! What the settings say about a log in PostgreSQL, before anything is parsed or opened.

use super::redact::redact_url;
use super::view::Addrs;

/// A log kept in PostgreSQL: the URL (which may hold a password, so `Debug` never shows
/// it), the schema of its tables, and this node's name among the nodes sharing it.
#[derive(Clone, PartialEq, Eq)]
pub struct PgLocation {
    /// `postgres://USER@HOST:PORT/DATABASE?PARAMS` (`postgresql://` too).
    pub url: String,
    /// The schema the tables live in (`--storage-schema`).
    pub schema: String,
    /// This node's name in the cluster (`--node-name`, by default `HOSTNAME:PORT`).
    pub node_name: String,
    /// Where this node's listeners accept clients, as other nodes reach them: written into
    /// its `nodes` row by every heartbeat, so a standby can forward clients to the leader.
    pub advertise: Addrs,
}

/// The schema when none is given.
pub const DEFAULT_SCHEMA: &str = "jobyard";

impl PgLocation {
    /// The URL without its password, for messages.
    pub fn shown(&self) -> String {
        redact_url(&self.url)
    }

    /// Whether `storage` names PostgreSQL rather than a directory.
    pub fn is_postgres_url(storage: &str) -> bool {
        storage.starts_with("postgres://") || storage.starts_with("postgresql://")
    }
}

impl std::fmt::Debug for PgLocation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PgLocation({}, schema {})", self.shown(), self.schema)
    }
}
