//! What went wrong with PostgreSQL, in one line that names the problem and never the
//! password, and whether trying again later may help.

use std::fmt;

/// An error opening or using the PostgreSQL log.
#[derive(Debug)]
pub struct PgError {
    message: String,
    retry: bool,
}

impl PgError {
    /// An error that trying again will not fix (a wrong password, a missing database).
    pub(crate) fn fatal(message: String) -> PgError {
        PgError {
            message,
            retry: false,
        }
    }

    /// An error that may pass (a statement that took too long).
    pub(crate) fn retryable(message: String) -> PgError {
        PgError {
            message,
            retry: true,
        }
    }

    /// Whether PostgreSQL may just not be there yet (down, starting, unreachable).
    pub fn is_retryable(&self) -> bool {
        self.retry
    }

    /// Describes a client error for the server `shown` (a URL without password).
    pub(crate) fn from_sqlx(shown: &str, e: sqlx::Error) -> PgError {
        let (message, retry) = match &e {
            sqlx::Error::Io(io) => (format!("cannot reach PostgreSQL at {shown}: {io}"), true),
            sqlx::Error::Tls(tls) => (
                format!("TLS with PostgreSQL at {shown} failed: {tls}"),
                false,
            ),
            sqlx::Error::Database(db) => {
                database_message(shown, db.code().as_deref(), db.message())
            }
            sqlx::Error::Configuration(_) => (
                format!("--storage {shown}: not a usable PostgreSQL URL"),
                false,
            ),
            sqlx::Error::Protocol(p) => (format!("PostgreSQL at {shown}: {p}"), true),
            other => (format!("PostgreSQL at {shown}: {other}"), true),
        };
        PgError { message, retry }
    }

    /// An I/O error the log's machinery can carry (and retry).
    pub(crate) fn into_io(self) -> std::io::Error {
        std::io::Error::other(self.message)
    }
}

/// The message for an error PostgreSQL reported, by its SQLSTATE.
fn database_message(shown: &str, code: Option<&str>, message: &str) -> (String, bool) {
    match code {
        Some("28P01") => (
            format!("PostgreSQL at {shown} refused the password ({message}); give it with PGPASSWORD or a password file"),
            false,
        ),
        Some("28000") => (format!("PostgreSQL at {shown} refused the connection: {message}"), false),
        Some("3D000") => (format!("PostgreSQL at {shown}: {message} (create it first)"), false),
        Some("42501") => (format!("PostgreSQL at {shown}: no privileges: {message}"), false),
        // Starting up, shutting down, or out of connections: it may take us later.
        Some("57P03") | Some("57P01") | Some("53300") => {
            (format!("PostgreSQL at {shown} is not accepting connections: {message}"), true)
        }
        _ => (format!("PostgreSQL at {shown}: {message}"), false),
    }
}

impl fmt::Display for PgError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for PgError {}
