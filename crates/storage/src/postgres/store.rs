//! Opening the PostgreSQL log: connect, take the writer lock, make or check the tables,
//! and recover; then [`crate::Log::open_postgres`] continues the log.

use jobyard_engine::Change;

use super::backend::PgLog;
use super::conn::Conn;
use super::error::PgError;
use super::lock::take_writer_lock_at_start;
use super::recover::{recover, LogEnd};
use super::schema::{prepare, set_meta};
use super::target::PgTarget;
use crate::log::LogOptions;
use crate::recovery::RecoveryReport;

/// A schema opened for writing by this node: its writer connection holds the lock.
pub struct PgStore {
    target: PgTarget,
    conn: Conn,
    writer_pid: i32,
    cluster_id: String,
}

impl PgStore {
    /// Connects, takes the schema's writer lock (refused while another node holds it),
    /// and creates or checks the tables. Errors name the problem, never the password;
    /// [`PgError::is_retryable`] tells a PostgreSQL that is down from a wrong setting.
    pub fn open(target: &PgTarget) -> Result<PgStore, PgError> {
        let mut conn = Conn::open(target)?;
        // Locked before the tables are touched: two nodes never create them at once.
        let writer_pid = take_writer_lock_at_start(&mut conn, target.schema(), target.shown())?;
        let cluster_id = prepare(&mut conn, target.schema())?;
        set_meta(&mut conn, target.schema(), "holder", &holder_name())?;
        Ok(PgStore {
            target: target.clone(),
            conn,
            writer_pid,
            cluster_id,
        })
    }

    /// The id made with the tables: the same for every node of one server.
    pub fn cluster_id(&self) -> &str {
        &self.cluster_id
    }

    /// Where the log lives, for messages (no password).
    pub fn target(&self) -> &PgTarget {
        &self.target
    }

    /// Hands every change, in order, to `apply`: the newest complete snapshot, then every
    /// batch after it. The report's `next_segment` is the section the log continues with
    /// ([`crate::Log::open_postgres`]).
    pub fn recover(
        mut self,
        apply: impl FnMut(Change),
    ) -> Result<(PgRecovered, RecoveryReport), PgError> {
        let (report, end) = recover(&mut self.conn, self.target.schema(), apply)?;
        Ok((PgRecovered { store: self, end }, report))
    }
}

/// A schema read to its end by [`PgStore::recover`]: only such a one can be written.
pub struct PgRecovered {
    store: PgStore,
    end: LogEnd,
}

impl PgRecovered {
    /// The backend and its writer, continuing where recovery ended.
    pub(crate) fn into_backend(
        self,
        first_section: u64,
        options: &LogOptions,
    ) -> (PgLog, super::backend::PgWriter) {
        let PgRecovered { store, end } = self;
        PgLog::new(
            store.target,
            store.conn,
            store.writer_pid,
            end,
            first_section,
            options,
        )
    }
}

/// Who holds the writer lock, for the message that refuses a second node.
fn holder_name() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_else(|_| "unknown host".into());
    format!("{host}, pid {}", std::process::id())
}
