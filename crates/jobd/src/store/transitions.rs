//! Rows moved outside fetches and ends: marked `running` before a run-manual job's
//! launch, handed back when taken but not started, reclaimed at start-up.

use super::{id_list, now, Store};

impl Store {
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
}
