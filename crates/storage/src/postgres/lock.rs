//! One writer per schema: the node that keeps the log holds a session advisory lock on
//! its writer connection, so a second node on the same storage is refused, and a node
//! whose connection (and so its lock) was lost cannot write again without taking it back.

use sqlx::Row;

use super::conn::Conn;
use super::error::PgError;
use super::schema::meta_value;

/// Takes the schema's writer lock on `conn` and returns the connection's backend pid (by
/// which the snapshot's connection checks that the writer still holds it). Refused with
/// the holder's name when another session holds it.
pub(crate) fn take_writer_lock(conn: &mut Conn, schema: &str, shown: &str) -> Result<i32, PgError> {
    let (runtime, link) = conn.parts();
    let row = runtime.block_on(
        sqlx::query("SELECT pg_try_advisory_lock(hashtext($1)), pg_backend_pid()")
            .bind(lock_name(schema))
            .fetch_one(&mut *link),
    );
    let row = row.map_err(|e| conn.error(e))?;
    if row.get::<bool, _>(0) {
        return Ok(row.get::<i32, _>(1));
    }
    let holder = meta_value(conn, schema, "holder").unwrap_or_else(|_| "unknown".into());
    Err(PgError::fatal(format!(
        "schema {schema} of {shown} is in use by another jobyard node ({holder}): one node \
         per storage (standbys come later); stop the other node or use another --storage-schema"
    )))
}

/// The advisory lock's name (hashed to its key): one per schema.
fn lock_name(schema: &str) -> String {
    format!("jobyard:{schema}")
}
