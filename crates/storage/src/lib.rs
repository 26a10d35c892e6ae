//! jobyard's embedded durable storage.
//!
//! The engine's [`Change`]s are appended to a log of segment files. Each record is framed
//! as `len:u32 crc32:u32 payload` (little-endian), so recovery can tell a record that was
//! cut off by a crash (the tail of the newest segment: dropped) from damage in the middle
//! (a startup error naming the file and offset, unless salvaging was asked for).
//!
//! Appends never touch the disk themselves: they are encoded into a shared buffer, and one
//! writer thread moves everything that accumulated to the file with one `write` and, when
//! asked, one `fdatasync` (group commit). Each append returns a [`Lsn`]; a caller that must
//! not acknowledge before its record is safe waits until [`Log::durable`] reaches it.
//!
//! A snapshot (`snap-N`) holds every live job as of the start of segment N, so segments
//! before N can be deleted: that is how the log stays proportional to the live data.
//!
//! With the `postgres` feature the same log can be kept in PostgreSQL instead
//! ([`Log::open_postgres`], [`PgStore`]): each group commit is one committed row.

mod bodies;
mod codec;
mod files;
mod lock;
mod log;
mod postgres;
mod read_ahead;
mod recovery;
mod segments;
mod stats;

pub use bodies::{body_ref, Located};
pub use codec::{decode_change, encode_change, DecodeError};
pub use files::disk_bytes;
pub use lock::DirLock;
pub use log::{FsyncMode, Log, LogOptions, SnapshotFeed};
pub use postgres::{
    redact_url, Addrs, ClusterNode, ClusterState, ClusterView, Leadership, PgLocation, Role,
    DEFAULT_SCHEMA as DEFAULT_PG_SCHEMA,
};
#[cfg(feature = "postgres")]
pub use postgres::{
    EnqueueRow, EnqueueSource, PgError, PgRecovered, PgStore, PgTarget, Replica, HOLD_LIMIT,
    STEP_DOWN_EXIT,
};
pub use recovery::{recover, recover_placed, BodyPlace, RecoveryError, RecoveryReport};
pub use stats::{sync_stats, LogStats, SyncStats};

pub use jobyard_engine::Change;

/// Log sequence number: the count of records appended since the log was opened.
pub type Lsn = u64;
