//! The leader's lease: one row of `leader` (node, epoch, expires_at), every time on
//! PostgreSQL's clock (`now()`), never a node's. Taking it when it has expired raises the
//! epoch, which fences off every append of the node that held it before.

use std::time::{Duration, Instant};

use sqlx::Row;

use super::conn::Conn;
use super::error::PgError;
use super::leadership::LEASE;

/// The lease as a PostgreSQL interval.
fn lease_interval() -> String {
    format!("{} milliseconds", LEASE.as_millis())
}

/// Who holds the lease now, as a standby sees it.
#[derive(Debug)]
pub(crate) struct LeaseHolder {
    pub node: String,
    pub epoch: u64,
}

/// Takes the lease for `node` if nobody holds it or it has expired (an `UPDATE` that
/// raises the epoch, conditional on expiry on PostgreSQL's clock; concurrent takers are
/// serialized by the row lock, and only one sees the lease expired). Returns the new
/// epoch and when the statement was sent, or `None` while another node's lease holds.
///
/// While the lease plainly holds, the statement inserts nothing and so locks nothing: an
/// `ON CONFLICT DO UPDATE` locks the row before it checks its `WHERE`, and a standby's
/// attempt every 250 ms would otherwise queue the leader's batch inserts (which read the
/// row `FOR SHARE`) behind it. Only a lease that looks expired is tried under the lock,
/// where the `WHERE` decides as before.
pub(crate) fn try_take(
    conn: &mut Conn,
    schema: &str,
    node: &str,
) -> Result<Option<(u64, Instant)>, PgError> {
    let sql = format!(
        "INSERT INTO {schema}.leader AS l (id, node, epoch, expires_at)
             SELECT 1, $1, 1, now() + interval '{lease}'
             WHERE NOT EXISTS (
                 SELECT 1 FROM {schema}.leader WHERE id = 1 AND expires_at >= now())
         ON CONFLICT (id) DO UPDATE
             SET node = EXCLUDED.node, epoch = l.epoch + 1, expires_at = EXCLUDED.expires_at
             WHERE l.expires_at < now()
         RETURNING epoch",
        lease = lease_interval()
    );
    let sent = Instant::now();
    let (runtime, link) = conn.parts();
    let row = runtime.block_on(sqlx::query(&sql).bind(node).fetch_optional(&mut *link));
    let row = row.map_err(|e| conn.error(e))?;
    Ok(row.map(|row| (row.get::<i64, _>(0) as u64, sent)))
}

/// The current holder of the lease, if any.
pub(crate) fn holder(conn: &mut Conn, schema: &str) -> Result<Option<LeaseHolder>, PgError> {
    let sql = format!("SELECT node, epoch FROM {schema}.leader WHERE id = 1");
    let (runtime, link) = conn.parts();
    let row = runtime.block_on(sqlx::query(&sql).fetch_optional(&mut *link));
    Ok(row.map_err(|e| conn.error(e))?.map(|row| LeaseHolder {
        node: row.get(0),
        epoch: row.get::<i64, _>(1) as u64,
    }))
}

/// What a renewal found.
pub(crate) enum Renewal {
    /// The lease runs [`LEASE`] from PostgreSQL's `now()`.
    Renewed,
    /// Another node took the lease: this one must never append again.
    Lost,
}

/// Renews the lease of `epoch`, giving up after `patience` (the connection is then in an
/// unknown state, and the caller drops it).
pub(crate) fn renew(
    conn: &mut Conn,
    schema: &str,
    epoch: u64,
    patience: Duration,
) -> Result<Renewal, PgError> {
    let sql = format!(
        "UPDATE {schema}.leader SET expires_at = now() + interval '{lease}'
         WHERE id = 1 AND epoch = $1",
        lease = lease_interval()
    );
    let (runtime, link) = conn.parts();
    // The timer is made inside the runtime, whose clock it needs.
    let done = runtime.block_on(async {
        let renewal = sqlx::query(&sql).bind(epoch as i64).execute(&mut *link);
        tokio::time::timeout(patience, renewal).await
    });
    let done =
        done.map_err(|_| PgError::retryable(format!("renewing the lease took over {patience:?}")))?;
    match done.map_err(|e| conn.error(e))?.rows_affected() {
        1 => Ok(Renewal::Renewed),
        _ => Ok(Renewal::Lost),
    }
}

/// Ends the lease of `epoch` at once (a clean stop), so a standby need not wait for it.
pub(crate) fn release(conn: &mut Conn, schema: &str, epoch: u64) -> Result<(), PgError> {
    conn.execute(&format!(
        "UPDATE {schema}.leader SET expires_at = now() - interval '1 millisecond'
         WHERE id = 1 AND epoch = {epoch}"
    ))
}
