//! Transactional enqueue: an application's committed `INSERT INTO <schema>.enqueue` rows,
//! read by the leader, which puts each as a job. A row's removal commits with the log
//! batch that holds its put ([`crate::Log::append_consuming`], the backend's fenced
//! insert), so it becomes a job exactly once; rows the server cannot take move to
//! `enqueue_rejected` with a reason, and rows matching a live job's unique key are
//! deleted, each in one fenced statement of their own ([`EnqueueSource::settle`]).
//!
//! The source wakes on the table's `NOTIFY` (a statement trigger on insert, channel
//! `<schema>_enqueue`) through a `LISTEN` of its own, and its caller also looks every few
//! seconds (a notification lost while reconnecting, rows committed while no node led).

use std::sync::Arc;
use std::time::Duration;

use sqlx::postgres::{PgListener, PgPoolOptions};
use sqlx::Row;

use super::conn::Conn;
use super::error::PgError;
use super::leadership::Leadership;
use super::schema::enqueue_channel;
use super::target::PgTarget;
use crate::Log;

/// One committed row of the enqueue table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EnqueueRow {
    pub id: i64,
    pub queue: String,
    /// `body_bytes` when given, else `body` as UTF-8.
    pub body: Vec<u8>,
    /// 0..=2^32-1 (the table's check).
    pub priority: u32,
    pub delay_seconds: u32,
    pub ttr_seconds: u32,
    pub unique_key: Option<String>,
}

/// The leader's reader of the enqueue table: a connection for its statements and one that
/// listens on the table's channel, both driven by the connection's own runtime.
pub struct EnqueueSource {
    conn: Conn,
    listener: PgListener,
    leadership: Arc<Leadership>,
    fetch: String,
    settle: String,
}

impl Log {
    /// A reader of the transactional-enqueue table of this log's PostgreSQL schema, as
    /// the node that leads it; `None` for a log in files.
    pub fn enqueue_source(&self) -> Option<Result<EnqueueSource, PgError>> {
        let pg = self.postgres()?;
        Some(EnqueueSource::open(pg.target(), pg.leadership().clone()))
    }
}

impl EnqueueSource {
    /// Connects twice to `target` (statements, and `LISTEN` on the enqueue channel).
    pub fn open(target: &PgTarget, leadership: Arc<Leadership>) -> Result<EnqueueSource, PgError> {
        let mut conn = Conn::open(target)?;
        let channel = enqueue_channel(target.schema());
        let options = target.options().clone();
        let (runtime, _) = conn.parts();
        let listening = runtime.block_on(async {
            // A pool of one, which only reconnects the listener when its connection drops.
            let pool = PgPoolOptions::new()
                .max_connections(1)
                .max_lifetime(None)
                .idle_timeout(None)
                .connect_lazy_with(options);
            let mut listener = PgListener::connect_with(&pool).await?;
            listener.listen(&channel).await?;
            Ok::<_, sqlx::Error>(listener)
        });
        let listener = listening.map_err(|e| conn.error(e))?;
        let schema = target.schema();
        Ok(EnqueueSource {
            conn,
            listener,
            leadership,
            fetch: format!(
                "SELECT id, queue, COALESCE(body_bytes, convert_to(body, 'UTF8')), priority,
                        delay_seconds, ttr_seconds, unique_key
                 FROM {schema}.enqueue ORDER BY id LIMIT $1"
            ),
            settle: settle_sql(schema),
        })
    }

    /// Up to `limit` committed rows, oldest id first.
    pub fn fetch(&mut self, limit: usize) -> Result<Vec<EnqueueRow>, PgError> {
        let (runtime, link) = self.conn.parts();
        let rows = runtime.block_on(
            sqlx::query(&self.fetch)
                .bind(limit as i64)
                .fetch_all(&mut *link),
        );
        let rows = rows.map_err(|e| self.conn.error(e))?;
        let mut read = Vec::with_capacity(rows.len());
        for row in rows {
            read.push(EnqueueRow {
                id: row.get(0),
                queue: row.get(1),
                body: row.get(2),
                priority: row.get::<i64, _>(3).clamp(0, u32::MAX as i64) as u32,
                delay_seconds: row.get::<i32, _>(4).max(0) as u32,
                ttr_seconds: row.get::<i32, _>(5).max(0) as u32,
                unique_key: row.get(6),
            });
        }
        Ok(read)
    }

    /// Deletes the rows `coalesced` (their unique key matched a live job) and moves the
    /// rows `rejected` to `enqueue_rejected` with their reasons, in one statement fenced
    /// by this node's epoch: a node that no longer leads changes nothing.
    pub fn settle(&mut self, coalesced: &[i64], rejected: &[(i64, String)]) -> Result<(), PgError> {
        if coalesced.is_empty() && rejected.is_empty() {
            return Ok(());
        }
        let ids: Vec<i64> = rejected.iter().map(|(id, _)| *id).collect();
        let reasons: Vec<&str> = rejected.iter().map(|(_, why)| why.as_str()).collect();
        let epoch = self.leadership.epoch() as i64;
        let (runtime, link) = self.conn.parts();
        let done = runtime.block_on(
            sqlx::query(&self.settle)
                .bind(epoch)
                .bind(coalesced)
                .bind(&ids)
                .bind(&reasons)
                .execute(&mut *link),
        );
        done.map(|_| ()).map_err(|e| self.conn.error(e))
    }

    /// Waits for the enqueue channel's next notification, or `timeout`; true if one came.
    /// Notifications that came meanwhile are all taken, so one wait follows a burst.
    pub fn wait(&mut self, timeout: Duration) -> Result<bool, PgError> {
        let (runtime, _) = self.conn.parts();
        let listener = &mut self.listener;
        let got = runtime.block_on(async {
            match tokio::time::timeout(timeout, listener.recv()).await {
                Err(_) => Ok(false),
                Ok(Err(e)) => Err(e),
                Ok(Ok(_)) => {
                    // Drain what else is already there, without waiting.
                    while let Ok(Ok(Some(_))) =
                        tokio::time::timeout(Duration::ZERO, listener.try_recv()).await
                    {
                    }
                    Ok(true)
                }
            }
        });
        got.map_err(|e| self.conn.error(e))
    }
}

/// `$1` epoch, `$2` ids to delete, `$3`/`$4` ids and reasons to move to `enqueue_rejected`:
/// one statement (one transaction), fenced by the epoch as the log's inserts are; a row
/// already gone (settled before, consumed elsewhere) is skipped.
fn settle_sql(schema: &str) -> String {
    format!(
        "WITH fence AS (
             SELECT epoch FROM {schema}.leader WHERE id = 1 AND epoch = $1 FOR SHARE),
         coalesced AS (
             DELETE FROM {schema}.enqueue
             WHERE id = ANY($2::bigint[]) AND EXISTS (SELECT 1 FROM fence)
             RETURNING 1),
         moved AS (
             DELETE FROM {schema}.enqueue e
             USING unnest($3::bigint[], $4::text[]) AS r(id, reason)
             WHERE e.id = r.id AND EXISTS (SELECT 1 FROM fence)
             RETURNING e.id, e.queue, e.body, e.body_bytes, e.priority, e.delay_seconds,
                       e.ttr_seconds, e.unique_key, e.created_at, r.reason)
         INSERT INTO {schema}.enqueue_rejected (id, queue, body, body_bytes, priority,
             delay_seconds, ttr_seconds, unique_key, created_at, reason)
         SELECT * FROM moved
         ON CONFLICT (id) DO NOTHING"
    )
}
