//! A PostgreSQL connection used from a plain thread (the log's writer, a snapshot's):
//! each owns a small current-thread runtime and blocks on it, so the server's runtime is
//! never involved and the log's machinery stays synchronous.

use sqlx::{Connection, PgConnection};

use super::error::PgError;
use super::target::PgTarget;

/// One connection and the runtime that drives it.
pub(crate) struct Conn {
    runtime: tokio::runtime::Runtime,
    link: PgConnection,
    /// The URL without password, for messages.
    shown: String,
}

impl Conn {
    /// Connects to `target` (blocking).
    pub fn open(target: &PgTarget) -> Result<Conn, PgError> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .enable_time()
            .build()
            .map_err(|e| PgError::fatal(format!("cannot start the PostgreSQL client: {e}")))?;
        let link = runtime
            .block_on(PgConnection::connect_with(target.options()))
            .map_err(|e| PgError::from_sqlx(target.shown(), e))?;
        Ok(Conn {
            runtime,
            link,
            shown: target.shown().to_string(),
        })
    }

    /// [`Conn::open`], giving up after `patience` (an unreachable host must not hold the
    /// lease keeper longer than its bound).
    pub fn open_within(target: &PgTarget, patience: std::time::Duration) -> Result<Conn, PgError> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .enable_time()
            .build()
            .map_err(|e| PgError::fatal(format!("cannot start the PostgreSQL client: {e}")))?;
        let connecting = runtime.block_on(async {
            tokio::time::timeout(patience, PgConnection::connect_with(target.options())).await
        });
        let link = connecting
            .map_err(|_| {
                PgError::retryable(format!(
                    "cannot reach PostgreSQL at {} within {patience:?}",
                    target.shown()
                ))
            })?
            .map_err(|e| PgError::from_sqlx(target.shown(), e))?;
        Ok(Conn {
            runtime,
            link,
            shown: target.shown().to_string(),
        })
    }

    /// The runtime the connection runs on: tasks spawned on it (a standby's `LISTEN`)
    /// run whenever the connection is used.
    pub fn runtime(&self) -> &tokio::runtime::Runtime {
        &self.runtime
    }

    /// Runs statements without parameters (several, separated by `;`).
    pub fn execute(&mut self, sql: &str) -> Result<(), PgError> {
        let result = self
            .runtime
            .block_on(sqlx::raw_sql(sql).execute(&mut self.link));
        result.map(|_| ()).map_err(|e| self.error(e))
    }

    /// [`Conn::execute`], returning how many rows the statements changed.
    pub fn execute_counting(&mut self, sql: &str) -> Result<u64, PgError> {
        let result = self
            .runtime
            .block_on(sqlx::raw_sql(sql).execute(&mut self.link));
        result
            .map(|done| done.rows_affected())
            .map_err(|e| self.error(e))
    }

    /// The runtime and the connection, to close the connection.
    pub fn into_parts(self) -> (tokio::runtime::Runtime, PgConnection) {
        (self.runtime, self.link)
    }

    /// The runtime and the connection, borrowed apart so a query can borrow the
    /// connection while the runtime drives it.
    pub fn parts(&mut self) -> (&tokio::runtime::Runtime, &mut PgConnection) {
        (&self.runtime, &mut self.link)
    }

    /// A client error as an error that names this server (never its password).
    pub fn error(&self, e: sqlx::Error) -> PgError {
        PgError::from_sqlx(&self.shown, e)
    }
}
