//! A fetch: the `waiting` rows of the wanted targets taken in one transaction of two
//! round trips, the ends of jobs that finished meanwhile written in its commit.

use std::future::Future;
use std::pin::Pin;

use sqlx::{Executor, Row};

use super::columns::row_id;
use super::dedicated::Held;
use super::{id_list, now, sqltext, Claimed, Store};
use crate::launch::Outcome;

/// A fetch between its two round trips (see [`Store::open_fetch`]): the rows it took are
/// locked on its connection, not yet written.
pub struct OpenFetch {
    /// `None` once [`Store::commit_fetch`] has taken it.
    conn: Option<Held>,
    claimed: Vec<Claimed>,
}

impl Drop for OpenFetch {
    /// A fetch dropped before its commit (a cancelled task) must not leave its transaction,
    /// and the row locks it holds, open on the connection the next fetch uses: drop the
    /// connection instead (the server rolls back).
    fn drop(&mut self) {
        if let Some(conn) = self.conn.take() {
            conn.discard();
        }
    }
}

/// Rolls back the transaction open on `conn` after an error, waiting for the server's
/// answer (which comes once the locks are released), but not for long: a connection that
/// does not answer is dropped by the caller anyway.
async fn roll_back(conn: &mut sqlx::MySqlConnection) {
    let _ = tokio::time::timeout(ROLLBACK_WAIT, conn.execute("ROLLBACK")).await;
}

/// How long [`roll_back`] waits for the server.
const ROLLBACK_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

impl Store {
    /// Opens a fetch: takes up to `limit` `waiting` rows of each target, oldest id first,
    /// skipping rows another worker has locked, and holds them locked (`FOR UPDATE`) until
    /// [`Store::commit_fetch`]. One round trip whatever the number of targets: `BEGIN` with
    /// every target's `SELECT … FOR UPDATE SKIP LOCKED` as one text batch. It is on the
    /// path from a poke to the launch, so every round trip saved there shortens it; for
    /// the same reason it runs on a connection of its own, not the pool's (whose ping on
    /// hand-out would be a third round trip; see [`Dedicated`]). One fetch at a time: a
    /// second waits until the first is committed or dropped.
    ///
    /// (Boxed: the text-protocol executor's lifetimes are too general for the compiler to
    /// see the future is `Send` from a spawned task; boxing settles them here.)
    pub fn open_fetch<'a>(
        &'a self,
        wants: &'a [(String, u64)],
    ) -> Pin<Box<dyn Future<Output = Result<OpenFetch, sqlx::Error>> + Send + 'a>> {
        Box::pin(async move {
            let mut conn = self.fetcher.lock().await?;
            match self.select_waiting(conn.conn(), wants).await {
                Ok(claimed) => Ok(OpenFetch {
                    conn: Some(conn),
                    claimed,
                }),
                Err(e) => {
                    // The transaction may still be open on this connection, holding locks
                    // on rows its first SELECTs took: roll it back now (a closed
                    // connection's locks go only when the server notices), then drop the
                    // connection rather than use it again.
                    roll_back(conn.conn()).await;
                    conn.discard();
                    Err(e)
                }
            }
        })
    }

    async fn select_waiting(
        &self,
        conn: &mut sqlx::MySqlConnection,
        wants: &[(String, u64)],
    ) -> Result<Vec<Claimed>, sqlx::Error> {
        let select = sqltext::select_waiting(&self.table, wants);
        let rows = conn.fetch_all(select.as_str()).await?;
        let mut claimed = Vec::with_capacity(rows.len());
        for row in rows {
            let want: i64 = row.try_get("w")?;
            let Some((target, _)) = usize::try_from(want).ok().and_then(|i| wants.get(i)) else {
                continue;
            };
            claimed.push(Claimed {
                id: row_id(&row)?,
                target: target.clone(),
            });
        }
        claimed.sort_by_key(|c| c.id);
        Ok(claimed)
    }

    /// Ends a fetch: the rows it took are written `running, result='ok', time_started` in
    /// its transaction, since rows are fetched only for free slots and each starts at once
    /// (one commit instead of two, which halves the fsyncs before a job can start). jobd
    /// wrote `accepted` first; in the same transaction that write was never seen by any
    /// other session, only by triggers, so it is left out (one UPDATE less per fetch:
    /// statements per job -13 % at 1x8; MariaDB CPU per job -6 to -13 % at 4x4, within
    /// the noise at 1x8; A/B in docs/benchmarks.md#jobd). The `done` rows of `ends` (jobs
    /// that ended meanwhile) are written in the same transaction, so they share its round
    /// trip and its commit instead of needing their own. One round trip: the UPDATEs and the
    /// `COMMIT` as one text batch (their id lists change every time: nothing to prepare).
    /// Returns the rows taken, now `running`. On an error nothing is written (rolled back,
    /// then the connection is closed): the caller writes `ends` another way.
    pub fn commit_fetch<'a>(
        &'a self,
        open: OpenFetch,
        ends: &'a [(u64, &'a Outcome)],
    ) -> Pin<Box<dyn Future<Output = Result<Vec<Claimed>, sqlx::Error>> + Send + 'a>> {
        Box::pin(async move {
            let mut open = open;
            let claimed = std::mem::take(&mut open.claimed);
            let Some(mut conn) = open.conn.take() else {
                return Err(sqlx::Error::PoolClosed);
            };
            let mut sql = String::new();
            if !claimed.is_empty() {
                let ids: Vec<u64> = claimed.iter().map(|c| c.id).collect();
                let ids = id_list(&ids);
                sql.push_str(&format!(
                    "UPDATE {t} SET status='running', result='ok', time_started={now} WHERE id IN ({ids}); ",
                    t = self.table,
                    now = now()
                ));
            }
            if !ends.is_empty() {
                sql.push_str(&sqltext::done_rows(&self.table, ends, now()));
                sql.push_str("; ");
            }
            sql.push_str("COMMIT");
            match conn.conn().execute(sql.as_str()).await {
                Ok(_) => Ok(claimed),
                Err(e) => {
                    // Roll back before letting go: a closed connection's locks go only when
                    // the server notices, and the fetch that follows a refused end at once
                    // would skip the rows still locked (SKIP LOCKED), take fewer than it
                    // asked for, and leave them `waiting` until the next poke.
                    roll_back(conn.conn()).await;
                    conn.discard();
                    Err(e)
                }
            }
        })
    }
}
