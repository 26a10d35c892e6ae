//! The log kept in PostgreSQL (`--storage postgres://...`), beside segment files: the
//! same group commit, records and recovery, with each batch one row committed in its own
//! transaction. docs/postgres.md describes the tables and what is durable when.
//!
//! One leader per schema: it holds a lease row on PostgreSQL's clock, and each batch's
//! insert is fenced by its epoch; other nodes are standbys that follow the log into their
//! engine (`follow`, woken by `wake`) and take the lease over when it runs out (`store`,
//! `lease`, `keeper`); every node heartbeats its role and addresses (`nodes`) into the
//! cluster view (`view`).

mod leadership;
mod location;
mod redact;
mod view;

pub use leadership::{ClusterNode, Leadership};
pub use location::{PgLocation, DEFAULT_SCHEMA};
pub use redact::redact_url;
pub use view::{Addrs, ClusterState, ClusterView, Role};

#[cfg(feature = "postgres")]
mod backend;
#[cfg(feature = "postgres")]
mod conn;
#[cfg(feature = "postgres")]
mod enqueue;
#[cfg(feature = "postgres")]
mod error;
#[cfg(feature = "postgres")]
mod follow;
#[cfg(feature = "postgres")]
mod keeper;
#[cfg(feature = "postgres")]
mod lease;
#[cfg(feature = "postgres")]
mod nodes;
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
mod wake;

#[cfg(feature = "postgres")]
pub(crate) use backend::PgLog;
#[cfg(feature = "postgres")]
pub use enqueue::{EnqueueRow, EnqueueSource};
#[cfg(feature = "postgres")]
pub use error::PgError;
#[cfg(feature = "postgres")]
pub use follow::Replica;
#[cfg(feature = "postgres")]
pub use keeper::{HOLD_LIMIT, STEP_DOWN_EXIT};
#[cfg(feature = "postgres")]
pub use store::{PgRecovered, PgStore};
#[cfg(feature = "postgres")]
pub use target::PgTarget;
