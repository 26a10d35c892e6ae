//! The log kept in PostgreSQL (`--storage postgres://...`), beside segment files: the
//! same group commit, records and recovery, with each batch one row committed in its own
//! transaction. docs/postgres.md describes the tables and what is durable when.
//!
//! One node per schema for now: the writer holds an advisory lock, and a second node is
//! refused. Standbys that follow the log, leadership and failover build on the same
//! tables (batches are read back in order after a position).

mod location;
mod redact;

pub use location::{PgLocation, DEFAULT_SCHEMA};
pub use redact::redact_url;

#[cfg(feature = "postgres")]
mod backend;
#[cfg(feature = "postgres")]
mod conn;
#[cfg(feature = "postgres")]
mod error;
#[cfg(feature = "postgres")]
mod lock;
#[cfg(feature = "postgres")]
mod passfile;
#[cfg(feature = "postgres")]
mod recover;
#[cfg(feature = "postgres")]
mod schema;
#[cfg(feature = "postgres")]
mod store;
#[cfg(feature = "postgres")]
mod target;

#[cfg(feature = "postgres")]
pub(crate) use backend::PgLog;
#[cfg(feature = "postgres")]
pub use error::PgError;
#[cfg(feature = "postgres")]
pub use store::{PgRecovered, PgStore};
#[cfg(feature = "postgres")]
pub use target::PgTarget;
