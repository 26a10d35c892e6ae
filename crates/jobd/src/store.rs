//! The user's MySQL jobs table, the source of truth (reference §3).
//!
//! Rules kept from jobd: rows are never inserted or deleted; columns are written in jobd's
//! order (`accepted`, except for a polled row, whose `accepted` would share the `running`
//! write's transaction and is left out; then `running, result='ok', time_started` before
//! the launcher starts; then `done, result, time_finished, return_code, sig, stdout,
//! stderr`). Fixed: a pool
//! instead of one shared connection, fetches take only as many rows as there are free
//! slots with `FOR UPDATE SKIP LOCKED` (no hoarding, no blocking between workers), rows
//! deleted meanwhile are skipped, and the final write is retried and sanitised so a row is
//! never left `running` because its output did not fit.

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use sqlx::mysql::{MySqlConnectOptions, MySqlPool, MySqlPoolOptions};
use sqlx::{Executor, Row};

use crate::config::MysqlConfig;
use crate::dedicated::{Dedicated, Held};
use crate::launcher::{signal_name, Outcome};
use crate::metrics::JobdMetrics;
use crate::sqltext;

/// Largest `mediumtext` value, in bytes (the README schema's column type).
pub const MEDIUMTEXT_MAX: usize = 16 * 1024 * 1024 - 1;

/// A handle on the jobs table.
#[derive(Clone)]
pub struct Store {
    pool: MySqlPool,
    /// The final writes' connection (one writer task).
    writer: Arc<Dedicated>,
    /// The fetches' connection (the worker runs one fetch at a time).
    fetcher: Arc<Dedicated>,
    table: String,
    metrics: Option<JobdMetrics>,
}

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

/// A row a worker took for one of its targets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claimed {
    /// Row id.
    pub id: u64,
    /// Its target.
    pub target: String,
}

/// What `run-manual` found for its ids.
#[derive(Debug, Default)]
pub struct ManualClaim {
    /// Rows now `accepted` by this worker.
    pub accepted: Vec<Claimed>,
    /// Ids not taken, with jobd's reason text.
    pub errors: BTreeMap<u64, String>,
}

fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}

/// Rolls back the transaction open on `conn` after an error, waiting for the server's
/// answer (which comes once the locks are released), but not for long: a connection that
/// does not answer is dropped by the caller anyway.
async fn roll_back(conn: &mut sqlx::MySqlConnection) {
    let _ = tokio::time::timeout(ROLLBACK_WAIT, conn.execute("ROLLBACK")).await;
}

/// How long [`roll_back`] waits for the server.
const ROLLBACK_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

fn id_list(ids: &[u64]) -> String {
    ids.iter().map(u64::to_string).collect::<Vec<_>>().join(",")
}

/// The batched `done` UPDATE for `rows` rows. Its text depends only on the row count, so
/// each size is prepared once per connection and then reused (the writer's batches are
/// capped, which bounds the number of statements a connection keeps prepared).
fn done_batch_sql(table: &str, rows: usize) -> String {
    let case = |col: &str| {
        let arms = " WHEN ? THEN ?".repeat(rows);
        format!("{col} = CASE id{arms} END")
    };
    let marks = vec!["?"; rows].join(",");
    format!(
        "UPDATE {table} SET status='done', {}, time_finished=?, {}, {}, {}, {} WHERE id IN ({marks})",
        case("result"),
        case("return_code"),
        case("sig"),
        case("stdout"),
        case("stderr"),
    )
}

impl Store {
    /// A pool for `cfg`, connecting lazily so the daemon serves even while MySQL is down.
    pub fn connect(cfg: &MysqlConfig, max_connections: u32) -> Store {
        let mut opts = MySqlConnectOptions::new()
            .username(&cfg.user)
            .password(&cfg.password)
            .database(&cfg.database)
            .charset("utf8mb4");
        opts = if cfg.host.starts_with('/') {
            opts.socket(&cfg.host)
        } else {
            opts.host(&cfg.host).port(cfg.port)
        };
        let pool = MySqlPoolOptions::new()
            .max_connections(max_connections.max(2))
            .acquire_timeout(Duration::from_secs(10))
            .connect_lazy_with(opts.clone());
        Store {
            pool,
            writer: Arc::new(Dedicated::new(opts.clone())),
            fetcher: Arc::new(Dedicated::new(opts)),
            table: format!("`{}`", cfg.table.replace('`', "``")),
            metrics: None,
        }
    }

    /// The same store, counting its retried errors in `metrics`.
    pub fn with_metrics(mut self, metrics: JobdMetrics) -> Store {
        self.metrics = Some(metrics);
        self
    }

    /// Counts a failed batch write (its rows are then written one by one: a retry).
    pub fn count_batch_error(&self) {
        self.count_error(true);
    }

    fn count_error(&self, retried: bool) {
        if let Some(m) = &self.metrics {
            m.db_error(retried);
        }
    }

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

    /// Takes the `manual` rows among `ids` whose target `serves` accepts. Other rows are
    /// reported and left exactly as they were (jobd rewrote them to `ignored`).
    pub async fn claim_manual(
        &self,
        ids: &[u64],
        serves: impl Fn(&str) -> bool,
    ) -> Result<ManualClaim, sqlx::Error> {
        let mut out = ManualClaim::default();
        let mut tx = self.pool.begin().await?;
        // By the primary key only: on a small table the optimizer prefers scanning a whole
        // index, and this locking read then locks every row until the commit, `waiting`
        // rows included, which a fetch running meanwhile skips (`SKIP LOCKED`) and, having
        // got fewer rows than it asked for, does not fetch again until the next poke.
        let sql = format!(
            "SELECT id, status, target FROM {} FORCE INDEX (PRIMARY) WHERE id IN ({}) FOR UPDATE",
            self.table,
            id_list(ids)
        );
        let rows = sqlx::query(&sql).fetch_all(&mut *tx).await?;
        let mut seen = Vec::new();
        for row in rows {
            let id = row_id(&row)?;
            let status = text(&row, "status")?;
            let target = text(&row, "target")?;
            seen.push(id);
            if status != "manual" {
                out.errors
                    .insert(id, format!("status = {status} != manual"));
            } else if !serves(&target) {
                out.errors
                    .insert(id, format!("target '{target}' not found (job id={id})"));
            } else {
                out.accepted.push(Claimed { id, target });
            }
        }
        for id in ids {
            if !seen.contains(id) {
                out.errors.insert(*id, format!("job {id} not found"));
            }
        }
        if !out.accepted.is_empty() {
            let ids: Vec<u64> = out.accepted.iter().map(|c| c.id).collect();
            let sql = format!(
                "UPDATE {} SET status='accepted' WHERE id IN ({})",
                self.table,
                id_list(&ids)
            );
            sqlx::query(&sql).execute(&mut *tx).await?;
        }
        tx.commit().await?;
        out.accepted.sort_by_key(|c| c.id);
        Ok(out)
    }

    /// Marks a row `running` just before its launcher starts. False if the row is gone or
    /// no longer `accepted` (deleted or changed by the user meanwhile): do not run it.
    pub async fn mark_running(&self, id: u64) -> Result<bool, sqlx::Error> {
        let sql = format!(
            "UPDATE {} SET status='running', result='ok', time_started=? WHERE id=? AND status='accepted'",
            self.table
        );
        let r = sqlx::query(&sql)
            .bind(now())
            .bind(id)
            .execute(&self.pool)
            .await?;
        Ok(r.rows_affected() == 1)
    }

    /// Writes the end of a job. Retries until it is stored: data the column rejects is
    /// sanitised step by step (4-byte characters replaced, output truncated, finally
    /// replaced by a note), and a lost database is waited for with growing pauses.
    pub async fn finish(&self, id: u64, outcome: &Outcome) {
        let mut stdout = truncate(&outcome.stdout, MEDIUMTEXT_MAX);
        let mut stderr = truncate(&outcome.stderr, MEDIUMTEXT_MAX);
        let mut pause = Duration::from_millis(100);
        let mut shrink = 0;
        loop {
            match self.write_done(id, outcome, &stdout, &stderr).await {
                Ok(()) => return,
                Err(e) if is_data_error(&e) => {
                    self.count_error(true);
                    tracing::warn!(id, error = %e, "jobd: final UPDATE rejected the data; sanitising");
                    shrink += 1;
                    match shrink {
                        1 => {
                            stdout = bmp_only(&stdout);
                            stderr = bmp_only(&stderr);
                        }
                        2 => {
                            stdout = truncate(&stdout, 65_535 / 4);
                            stderr = truncate(&stderr, 65_535 / 4);
                        }
                        _ => {
                            stdout = String::new();
                            stderr = format!("jobyard: the job's output could not be stored: {e}");
                            stderr = bmp_only(&truncate(&stderr, 200));
                            if shrink > 3 {
                                // Last resort: the status alone, so the row is not left
                                // `running` whatever the output columns accept.
                                if let Err(e) = self.write_status_only(id, outcome).await {
                                    tracing::error!(id, error = %e, "jobd: could not record the end of a job");
                                }
                                return;
                            }
                        }
                    }
                }
                Err(e) => {
                    self.count_error(true);
                    tracing::warn!(id, error = %e, "jobd: final UPDATE failed; retrying");
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(Duration::from_secs(10));
                }
            }
        }
    }

    /// Writes the ends of several jobs with one UPDATE (one statement, one round trip,
    /// one commit, instead of `BEGIN`, an UPDATE per job and `COMMIT`): each column is a
    /// `CASE id WHEN … THEN … END` over the rows, in the same column order as
    /// [`Store::finish`]. A row deleted by the user meanwhile is simply not matched. On any
    /// error nothing is written and the caller writes them one by one with
    /// [`Store::finish`], which retries and sanitises.
    pub async fn finish_batch(&self, ends: &[(u64, &Outcome)]) -> Result<(), sqlx::Error> {
        let sql = done_batch_sql(&self.table, ends.len());
        let mut q = sqlx::query(&sql);
        for (id, o) in ends {
            q = q.bind(*id).bind(if o.ok() { "ok" } else { "fail" });
        }
        q = q.bind(now());
        for (id, o) in ends {
            q = q.bind(*id).bind(o.code.map(|c| c.clamp(0, 255)));
        }
        for (id, o) in ends {
            q = q.bind(*id).bind(o.signal.map(signal_name));
        }
        for (id, o) in ends {
            q = q.bind(*id).bind(truncate(&o.stdout, MEDIUMTEXT_MAX));
        }
        for (id, o) in ends {
            q = q.bind(*id).bind(truncate(&o.stderr, MEDIUMTEXT_MAX));
        }
        for (id, _) in ends {
            q = q.bind(*id);
        }
        self.execute_on_writer(q).await
    }

    async fn write_done(
        &self,
        id: u64,
        o: &Outcome,
        stdout: &str,
        stderr: &str,
    ) -> Result<(), sqlx::Error> {
        let sql = format!(
            "UPDATE {} SET status='done', result=?, time_finished=?, return_code=?, sig=?, stdout=?, stderr=? WHERE id=?",
            self.table
        );
        let q = sqlx::query(&sql)
            .bind(if o.ok() { "ok" } else { "fail" })
            .bind(now())
            .bind(o.code.map(|c| c.clamp(0, 255)))
            .bind(o.signal.map(signal_name))
            .bind(stdout)
            .bind(stderr)
            .bind(id);
        self.execute_on_writer(q).await
    }

    /// Runs a `done` write on the writer's own connection. A data error (a value the
    /// column refuses) keeps the connection; any other error drops it, so the next write
    /// opens a fresh one instead of reusing a connection in an unknown state.
    async fn execute_on_writer(
        &self,
        q: sqlx::query::Query<'_, sqlx::MySql, sqlx::mysql::MySqlArguments>,
    ) -> Result<(), sqlx::Error> {
        let mut held = self.writer.lock().await?;
        if let Err(e) = q.execute(held.conn()).await {
            if !is_data_error(&e) {
                held.discard();
            }
            return Err(e);
        }
        Ok(())
    }

    async fn write_status_only(&self, id: u64, o: &Outcome) -> Result<(), sqlx::Error> {
        let sql = format!(
            "UPDATE {} SET status='done', result=?, time_finished=? WHERE id=?",
            self.table
        );
        sqlx::query(&sql)
            .bind(if o.ok() { "ok" } else { "fail" })
            .bind(now())
            .bind(id)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    /// Puts rows this worker took but never started back to `to` (`waiting` or `manual`,
    /// whichever they came from), e.g. on shutdown.
    pub async fn release(&self, ids: &[u64], to: &str) -> Result<(), sqlx::Error> {
        if ids.is_empty() {
            return Ok(());
        }
        let to = if to == "manual" { "manual" } else { "waiting" };
        // `running` too: fetched rows are marked running before they start (see
        // fetch_waiting); the caller passes only ids it holds unstarted.
        let sql = format!(
            "UPDATE {} SET status='{to}', result=NULL, time_started=0 \
             WHERE status IN ('accepted','running') AND id IN ({})",
            self.table,
            id_list(ids)
        );
        // Text protocol: the id list makes every statement new (nothing to prepare).
        sqlx::raw_sql(&sql).execute(&self.pool).await?;
        Ok(())
    }

    /// Startup reconciliation for `targets`: `accepted` rows go back to `waiting` (they
    /// never started), `running` rows become `done`/`fail` with a note in `stderr` (their
    /// launcher died with the previous daemon). Returns (released, failed) counts.
    pub async fn reclaim(&self, targets: &[String]) -> Result<(u64, u64), sqlx::Error> {
        if targets.is_empty() {
            return Ok((0, 0));
        }
        let marks = vec!["?"; targets.len()].join(",");
        let sql = format!(
            "UPDATE {} SET status='waiting' WHERE status='accepted' AND target IN ({marks})",
            self.table
        );
        let mut q = sqlx::query(&sql);
        for t in targets {
            q = q.bind(t);
        }
        let released = q.execute(&self.pool).await?.rows_affected();
        let sql = format!(
            "UPDATE {} SET status='done', result='fail', time_finished=?, \
             stderr=CONCAT(IFNULL(stderr,''), 'jobyard: the worker stopped while this job was running') \
             WHERE status='running' AND target IN ({marks})",
            self.table
        );
        let mut q = sqlx::query(&sql).bind(now());
        for t in targets {
            q = q.bind(t);
        }
        let failed = q.execute(&self.pool).await?.rows_affected();
        Ok((released, failed))
    }

    /// Closes the pool, the write connection and the fetch connection.
    pub async fn close(&self) {
        self.writer.close().await;
        self.fetcher.close().await;
        self.pool.close().await;
    }
}

fn row_id(row: &sqlx::mysql::MySqlRow) -> Result<u64, sqlx::Error> {
    if let Ok(v) = row.try_get::<u64, _>("id") {
        return Ok(v);
    }
    if let Ok(v) = row.try_get::<u32, _>("id") {
        return Ok(v.into());
    }
    row.try_get::<i64, _>("id").map(|v| v.max(0) as u64)
}

fn text(row: &sqlx::mysql::MySqlRow, col: &str) -> Result<String, sqlx::Error> {
    if let Ok(s) = row.try_get::<String, _>(col) {
        return Ok(s);
    }
    let b: Vec<u8> = row.try_get(col)?;
    Ok(String::from_utf8_lossy(&b).trim_end().to_string())
}

/// MySQL errors about the value, not the connection: 1366 incorrect string value,
/// 1406 data too long, 1264 out of range, 1265 truncated, 1301/1153 packet too large.
pub fn is_data_error(e: &sqlx::Error) -> bool {
    match e {
        sqlx::Error::Database(db) => {
            let code = db
                .try_downcast_ref::<sqlx::mysql::MySqlDatabaseError>()
                .map(|m| m.number())
                .unwrap_or(0);
            matches!(code, 1366 | 1406 | 1264 | 1265 | 1301 | 1153 | 1300)
        }
        _ => false,
    }
}

/// Cuts `s` to at most `max` bytes at a character boundary.
pub fn truncate(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s[..end].to_string()
}

/// Replaces characters outside the Basic Multilingual Plane (4 bytes in UTF-8, rejected by
/// MySQL's 3-byte `utf8` columns) with U+FFFD.
pub fn bmp_only(s: &str) -> String {
    s.chars()
        .map(|c| if (c as u32) > 0xFFFF { '\u{FFFD}' } else { c })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn truncate_keeps_char_boundaries() {
        assert_eq!(truncate("aé", 2), "a");
        assert_eq!(truncate("abc", 5), "abc");
    }

    #[test]
    fn bmp_only_replaces_emoji() {
        assert_eq!(bmp_only("a😀b"), "a\u{FFFD}b");
    }
}
