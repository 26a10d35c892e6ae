//! What went wrong with PostgreSQL, in one line that names the problem and never the
//! password, and whether trying again later may help.

use std::fmt;

/// An error opening or using the PostgreSQL log.
#[derive(Debug)]
pub struct PgError {
    message: String,
    retry: bool,
    /// PostgreSQL is out of room (SQLSTATE class 53 but for too many connections): the
    /// log refuses new jobs until a write goes in again, as on a full disk.
    no_room: bool,
}

impl PgError {
    /// An error that trying again will not fix (a wrong password, a missing database).
    pub(crate) fn fatal(message: String) -> PgError {
        PgError {
            message,
            retry: false,
            no_room: false,
        }
    }

    /// An error that may pass (a statement that took too long).
    pub(crate) fn retryable(message: String) -> PgError {
        PgError {
            message,
            retry: true,
            no_room: false,
        }
    }

    /// Whether PostgreSQL may just not be there yet (down, starting, unreachable).
    pub fn is_retryable(&self) -> bool {
        self.retry
    }

    /// Describes a client error for the server `shown` (a URL without password).
    pub(crate) fn from_sqlx(shown: &str, e: sqlx::Error) -> PgError {
        let no_room = match &e {
            sqlx::Error::Database(db) => is_out_of_room(db.code().as_deref()),
            _ => false,
        };
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
        PgError {
            message,
            retry,
            no_room,
        }
    }

    /// Whether PostgreSQL said it has no room (its disk is full, or it ran out of memory or
    /// another resource): new jobs are refused until a write goes in again.
    pub fn is_no_room(&self) -> bool {
        self.no_room
    }

    /// An I/O error the log's machinery can carry (and retry); out of room, one its space
    /// machinery treats as a full disk (new jobs refused, other changes retried).
    pub(crate) fn into_io(self) -> std::io::Error {
        if self.no_room {
            return crate::log::NoRoom(format!(
                "PostgreSQL's disk is full (or it is out of another resource): new jobs are \
                 refused (OUT_OF_MEMORY / Gearman ERROR) until a write goes in again; deletes \
                 and other changes of stored jobs are retried until they do ({})",
                self.message
            ))
            .into_io();
        }
        std::io::Error::other(self.message)
    }
}

/// SQLSTATE class 53, insufficient resources (53100 disk_full, 53200 out_of_memory, 53400
/// configuration_limit_exceeded), but for 53300 too_many_connections, which only a new
/// connection meets and which passes by itself.
fn is_out_of_room(code: Option<&str>) -> bool {
    code.is_some_and(|c| c.starts_with("53") && c != "53300")
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn insufficient_resources_but_connections_mean_no_room() {
        assert!(is_out_of_room(Some("53100")));
        assert!(is_out_of_room(Some("53200")));
        assert!(is_out_of_room(Some("53400")));
        assert!(!is_out_of_room(Some("53300")));
        assert!(!is_out_of_room(Some("23505")));
        assert!(!is_out_of_room(None));
    }

    #[test]
    fn no_room_is_a_full_disk_to_the_log() {
        let full = PgError {
            message: "could not extend file".into(),
            retry: true,
            no_room: true,
        };
        let io = full.into_io();
        assert!(crate::log::is_no_space(&io));
        assert!(io.to_string().contains("PostgreSQL's disk is full"));
        assert!(!crate::log::is_no_space(
            &PgError::retryable("timeout".into()).into_io()
        ));
    }
}
