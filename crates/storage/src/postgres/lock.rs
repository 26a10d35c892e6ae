//! One writer per schema: the node that keeps the log holds a session advisory lock on
//! its writer connection, so a second node on the same storage is refused, and a node
//! whose connection (and so its lock) was lost cannot write again without taking it back.

use std::time::{Duration, Instant};

use sqlx::Row;

use super::conn::Conn;
use super::error::PgError;
use super::schema::meta_value;

/// How long a starting node waits for the writer lock before it says another node holds
/// it: a node restarted at once after a crash may find its old session not yet ended
/// (PostgreSQL notices the closed socket within moments, and then releases the lock).
const LOCK_PATIENCE: Duration = Duration::from_secs(3);

/// Takes the schema's writer lock on `conn`, waiting up to [`LOCK_PATIENCE`] for it, and
/// returns the connection's backend pid (by which a snapshot's connection checks that the
/// writer still holds it). Refused with the holder's name when another session keeps it.
pub(crate) fn take_writer_lock_at_start(
    conn: &mut Conn,
    schema: &str,
    shown: &str,
) -> Result<i32, PgError> {
    let deadline = Instant::now() + LOCK_PATIENCE;
    loop {
        if let Some(pid) = try_writer_lock(conn, schema)? {
            return Ok(pid);
        }
        if Instant::now() >= deadline {
            return Err(refused(conn, schema, shown));
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// [`take_writer_lock_at_start`] without waiting: for a writer that reconnects.
pub(crate) fn take_writer_lock(conn: &mut Conn, schema: &str, shown: &str) -> Result<i32, PgError> {
    try_writer_lock(conn, schema)?.ok_or_else(|| refused(conn, schema, shown))
}

/// The lock and this session's backend pid, or `None` if another session holds it.
fn try_writer_lock(conn: &mut Conn, schema: &str) -> Result<Option<i32>, PgError> {
    let (runtime, link) = conn.parts();
    let row = runtime.block_on(
        sqlx::query("SELECT pg_try_advisory_lock(hashtext($1)), pg_backend_pid()")
            .bind(lock_name(schema))
            .fetch_one(&mut *link),
    );
    let row = row.map_err(|e| conn.error(e))?;
    Ok(row.get::<bool, _>(0).then(|| row.get::<i32, _>(1)))
}

/// The error that refuses a second node, naming the node that holds the lock.
fn refused(conn: &mut Conn, schema: &str, shown: &str) -> PgError {
    let holder = meta_value(conn, schema, "holder").unwrap_or_else(|_| "unknown".into());
    PgError::fatal(format!(
        "schema {schema} of {shown} is in use by another jobyard node ({holder}): one node \
         per storage (standbys come later); stop the other node or use another --storage-schema"
    ))
}

/// The advisory lock's name (hashed to its key): one per schema.
fn lock_name(schema: &str) -> String {
    format!("jobyard:{schema}")
}
