//! A job's end written to its row (`done`, result, exit code, signal, output): one row
//! at a time with retries and sanitising, or several rows in one UPDATE.

use std::time::Duration;

use super::columns::{bmp_only, is_data_error, truncate};
use super::{now, Store, MEDIUMTEXT_MAX};
use crate::launch::{signal_name, Outcome};

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
}
