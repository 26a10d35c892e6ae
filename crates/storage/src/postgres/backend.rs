//! The log's PostgreSQL backend: each group commit is one row of `log` (the batch's
//! encoded records as they would go to a segment, keyed by their byte position) inserted
//! in its own transaction, so its COMMIT is the batch's durability; snapshots go into
//! `snapshots` and `snapshot_chunks`, and completing one deletes the rows it covers.
//!
//! Every write is fenced by the leader's epoch in its own statement: the batch's
//! `INSERT` reads the lease row `FOR SHARE`, so it either commits before a standby's
//! takeover (whose `UPDATE` of that row waits for it, and whose recovery then reads the
//! batch) or sees the raised epoch and inserts nothing, and this node steps down.

use std::collections::BTreeMap;
use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use jobyard_engine::Change;
use sqlx::Connection;

use super::conn::Conn;
use super::keeper::{step_down, Keeper};
use super::leadership::Leadership;
use super::lease::{holder, release};
use super::recover::LogEnd;
use super::schema::make_partitions_ahead;
use super::target::PgTarget;
use super::PgError;
use crate::bodies::BodyFiles;
use crate::codec::encode_change;
use crate::log::{BatchStart, LogBackend, LogOptions};

/// The log kept in a PostgreSQL schema.
pub(crate) struct PgLog {
    target: PgTarget,
    options: LogOptions,
    /// This node's lease and epoch, which every write is fenced by.
    leadership: Arc<Leadership>,
    /// Renews the lease until the log closes.
    keeper: Mutex<Keeper>,
    oldest_section: AtomicU64,
    /// Bytes of the batches kept in finished sections, by section.
    sections: Mutex<BTreeMap<u64, u64>>,
    /// Bytes of the batches of the section being written.
    current_bytes: AtomicU64,
    /// Bytes of the snapshot recovery would start from.
    snapshot_bytes: AtomicU64,
    /// The connection that completed the last snapshot, reused to drop what it covers.
    snapshot_conn: Mutex<Option<(Conn, u64)>>,
    insert_batch: String,
    /// [`Self::insert_batch`] that also deletes the enqueue rows whose puts the batch
    /// holds, in the same statement (so the same transaction, under the same fence).
    insert_consuming: String,
    /// The last write found PostgreSQL out of room (its disk full): new jobs are refused
    /// until a write goes in again.
    out_of_room: AtomicBool,
}

/// The writer's side, used only under the log's writer lock.
pub(crate) struct PgWriter {
    /// `None` after a failure that may have broken the connection: the next write
    /// reconnects (its epoch check still fences it).
    conn: Option<Conn>,
    pos: u64,
    section: u64,
    section_bytes: u64,
}

/// A snapshot being written on its own connection.
pub(crate) struct PgSnapshot {
    conn: Conn,
    section: u64,
    chunks: i32,
    jobs: u64,
    bytes: u64,
    buf: Vec<u8>,
}

impl PgLog {
    /// The backend and its writer, continuing the log recovery read to `end` with section
    /// `first_section`, on `conn`, as the leader of `lease` (renewed by its keeper).
    pub fn new(
        target: PgTarget,
        conn: Conn,
        lease: (Arc<Leadership>, Keeper),
        end: LogEnd,
        first_section: u64,
        options: &LogOptions,
    ) -> (PgLog, PgWriter) {
        let schema = target.schema();
        let insert_batch = format!(
            "WITH fence AS (
                 SELECT epoch FROM {schema}.leader WHERE id = 1 AND epoch = $4 FOR SHARE)
             INSERT INTO {schema}.log (pos, section, records, epoch)
                 SELECT $1, $2, $3, epoch FROM fence
             ON CONFLICT (section, pos) DO NOTHING"
        );
        let insert_consuming = insert_consuming_sql(schema);
        let (leadership, keeper) = lease;
        let log = PgLog {
            options: options.clone(),
            leadership,
            keeper: Mutex::new(keeper),
            oldest_section: AtomicU64::new(end.oldest_section),
            sections: Mutex::new(end.sections),
            current_bytes: AtomicU64::new(0),
            snapshot_bytes: AtomicU64::new(end.snapshot_bytes),
            snapshot_conn: Mutex::new(None),
            insert_batch,
            insert_consuming,
            out_of_room: AtomicBool::new(false),
            target,
        };
        let mut conn = conn;
        // The sections about to be written get partitions a compaction can drop whole.
        make_partitions_ahead(&mut conn, log.target.schema(), first_section);
        let writer = PgWriter {
            conn: Some(conn),
            pos: end.pos,
            section: first_section,
            section_bytes: 0,
        };
        (log, writer)
    }

    /// Bytes the schema's log and snapshot hold (the rows' data, not PostgreSQL's pages):
    /// what compaction compares with the live data.
    pub fn stored_bytes(&self) -> u64 {
        let sections: u64 = self.sections.lock().expect("sections lock").values().sum();
        sections
            + self.current_bytes.load(Ordering::Relaxed)
            + self.snapshot_bytes.load(Ordering::Relaxed)
    }

    /// Where the log lives (also the enqueue table's schema).
    pub fn target(&self) -> &PgTarget {
        &self.target
    }

    /// This node's leadership (epoch, hand-out deadline, live nodes).
    pub fn leadership(&self) -> &Arc<Leadership> {
        &self.leadership
    }

    /// The writer's connection, reconnecting if the last write lost it.
    fn connected<'w>(&self, w: &'w mut PgWriter) -> Result<&'w mut Conn, PgError> {
        if w.conn.is_none() {
            let conn = Conn::open(&self.target)?;
            tracing::info!("reconnected to PostgreSQL at {}", self.target.shown());
            w.conn = Some(conn);
        }
        Ok(w.conn.as_mut().expect("connected"))
    }

    /// Inserts one batch at the writer's position (nothing if a retry finds it there),
    /// deleting the enqueue rows `consumed` whose puts it holds in the same statement.
    /// Steps down, never returning, when the epoch is no longer current.
    fn insert(&self, w: &mut PgWriter, data: &[u8], consumed: &[i64]) -> Result<(), PgError> {
        let (pos, section) = (w.pos as i64, w.section as i64);
        let epoch = self.leadership.epoch();
        let conn = self.connected(w)?;
        let (runtime, link) = conn.parts();
        let done = if consumed.is_empty() {
            runtime
                .block_on(
                    sqlx::query(&self.insert_batch)
                        .bind(pos)
                        .bind(section)
                        .bind(data)
                        .bind(epoch as i64)
                        .execute(&mut *link),
                )
                .map(|done| done.rows_affected())
        } else {
            runtime
                .block_on(
                    sqlx::query_scalar::<_, i64>(&self.insert_consuming)
                        .bind(pos)
                        .bind(section)
                        .bind(data)
                        .bind(epoch as i64)
                        .bind(consumed)
                        .fetch_one(&mut *link),
                )
                .map(|inserted| inserted as u64)
        };
        match done {
            Ok(1) => Ok(()),
            // Nothing inserted: a retry found its batch there, or the epoch is gone.
            Ok(_) => self.check_epoch(conn),
            Err(e) => {
                let keeps_connection = matches!(e, sqlx::Error::Database(_));
                let err = conn.error(e);
                if !keeps_connection {
                    w.conn = None;
                }
                Err(err)
            }
        }
    }

    /// [`PgLog::insert`] and what follows it for the log: the writer's position, and
    /// whether PostgreSQL has room.
    fn write_batch(
        &self,
        w: &mut PgWriter,
        data: &[u8],
        consumed: &[i64],
    ) -> io::Result<Option<BatchStart>> {
        if let Err(e) = self.insert(w, data, consumed) {
            if e.is_no_room() {
                self.out_of_room.store(true, Ordering::Relaxed);
            }
            return Err(e.into_io());
        }
        self.out_of_room.store(false, Ordering::Relaxed);
        w.pos += data.len() as u64;
        w.section_bytes += data.len() as u64;
        self.current_bytes.store(w.section_bytes, Ordering::Relaxed);
        Ok(None)
    }

    /// After an insert that wrote nothing: fine while the epoch is current (the batch was
    /// there from an attempt whose answer was lost); otherwise another node leads, and
    /// this one steps down before anything more is acknowledged.
    fn check_epoch(&self, conn: &mut Conn) -> Result<(), PgError> {
        let current = holder(conn, self.target.schema())?;
        let epoch = self.leadership.epoch();
        match current {
            Some(leader) if leader.epoch == epoch => Ok(()),
            Some(leader) => step_down(&format!(
                "{} leads with epoch {} (this node's was {epoch}); its batch was not written",
                leader.node, leader.epoch
            )),
            None => step_down("the leader's lease row is gone"),
        }
    }

    /// A connection for compaction: the one that completed snapshot `seq`, or a new one.
    fn compaction_conn(&self, seq: u64) -> io::Result<Conn> {
        match self
            .snapshot_conn
            .lock()
            .expect("snapshot conn lock")
            .take()
        {
            Some((conn, of)) if of == seq => Ok(conn),
            _ => Conn::open(&self.target).map_err(PgError::into_io),
        }
    }
}

/// The batch's fenced insert that also deletes the enqueue rows `$5` whose puts it holds:
/// one statement, so one transaction (PostgreSQL runs a data-modifying `WITH` whether or
/// not the query reads it); the delete runs only under the fence, and a retry of a batch
/// already committed finds its rows gone (deleting nothing). Returns how many log
/// rows it inserted (0 or 1), as the plain insert's row count.
fn insert_consuming_sql(schema: &str) -> String {
    format!(
        "WITH fence AS (
             SELECT epoch FROM {schema}.leader WHERE id = 1 AND epoch = $4 FOR SHARE),
         inserted AS (
             INSERT INTO {schema}.log (pos, section, records, epoch)
                 SELECT $1, $2, $3, epoch FROM fence
             ON CONFLICT (section, pos) DO NOTHING
             RETURNING 1),
         consumed AS (
             DELETE FROM {schema}.enqueue
             WHERE id = ANY($5::bigint[]) AND EXISTS (SELECT 1 FROM fence)
             RETURNING 1)
         SELECT count(*) FROM inserted"
    )
}

/// Deletes what snapshot `seq` covers: older batches (their sections' partitions dropped
/// whole, `log_default`'s rows deleted), snapshots and their chunks; with `fence`, only
/// while that epoch leads (the first statement locks the lease row until the transaction
/// the statements run in ends).
pub(crate) fn drop_covered_sql(schema: &str, seq: u64, fence: Option<u64>) -> String {
    let leading = match fence {
        Some(epoch) => format!(
            "EXISTS (SELECT 1 FROM {schema}.leader WHERE id = 1 AND epoch = {epoch} FOR SHARE)"
        ),
        None => "true".into(),
    };
    format!(
        "DELETE FROM {schema}.log_default WHERE section < {seq} AND {leading};
         DELETE FROM {schema}.snapshot_chunks WHERE section < {seq} AND {leading};
         DELETE FROM {schema}.snapshots WHERE section < {seq} AND {leading};
         DO $drop$ DECLARE part text; BEGIN
             IF {leading} THEN
                 FOR part IN
                     SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
                     WHERE i.inhparent = '{schema}.log'::regclass
                       AND c.relname ~ '^log_s[0-9]+$'
                       AND substring(c.relname FROM 6)::bigint < {seq}
                 LOOP
                     EXECUTE format('DROP TABLE {schema}.%I', part);
                 END LOOP;
             END IF;
         END $drop$;"
    )
}

impl LogBackend for PgLog {
    type Writer = PgWriter;
    type Flush = ();
    type Snapshot = PgSnapshot;

    fn make_room(&self, _w: &mut PgWriter, _more: u64) -> io::Result<()> {
        // PostgreSQL's own disk: a full one fails the INSERT (SQLSTATE 53100), which the
        // log retries; until one goes in again there is no room for new jobs.
        if self.out_of_room.load(Ordering::Relaxed) {
            return Err(crate::log::NoRoom(
                "PostgreSQL's disk is still full: new jobs stay refused".into(),
            )
            .into_io());
        }
        Ok(())
    }

    fn write(&self, w: &mut PgWriter, data: &[u8]) -> io::Result<Option<BatchStart>> {
        self.write_batch(w, data, &[])
    }

    fn write_consuming(
        &self,
        w: &mut PgWriter,
        data: &[u8],
        consumed: &[i64],
    ) -> io::Result<Option<BatchStart>> {
        self.write_batch(w, data, consumed)
    }

    fn sync(&self, _w: &mut PgWriter) -> io::Result<()> {
        // Each batch's INSERT committed before `write` returned.
        Ok(())
    }

    fn flush_handle(&self, _w: &PgWriter) -> Option<()> {
        None
    }

    fn sync_detached(&self, _flush: &()) -> io::Result<()> {
        Ok(())
    }

    fn start_writeback(&self, _flush: &()) {}

    fn rotation_due(&self, w: &PgWriter) -> bool {
        w.section_bytes >= self.options.segment_bytes
    }

    fn rotate(&self, w: &mut PgWriter) -> io::Result<u64> {
        let finished = std::mem::take(&mut w.section_bytes);
        if finished > 0 {
            self.sections
                .lock()
                .expect("sections lock")
                .insert(w.section, finished);
        }
        self.current_bytes.store(0, Ordering::Relaxed);
        w.section += 1;
        Ok(w.section)
    }

    fn close(&self, w: &mut PgWriter) {
        // Everything is written: the lease is let go at once, so a standby takes over
        // without waiting for it to run out.
        self.keeper.lock().expect("keeper lock").stop();
        if let Some(mut conn) = w.conn.take() {
            let epoch = self.leadership.epoch();
            if let Err(e) = release(&mut conn, self.target.schema(), epoch) {
                tracing::warn!("cannot release the leader's lease: {e}");
            }
            let (runtime, link) = conn.into_parts();
            let _ = runtime.block_on(link.close());
        }
    }

    fn has_room_for(&self, _bytes: usize) -> bool {
        true
    }

    fn oldest_section(&self) -> u64 {
        self.oldest_section.load(Ordering::Relaxed)
    }

    fn bodies(&self) -> Option<&BodyFiles> {
        None
    }

    fn begin_snapshot(&self, seq: u64, next_id: u64) -> io::Result<PgSnapshot> {
        let mut conn = Conn::open(&self.target).map_err(PgError::into_io)?;
        let schema = self.target.schema();
        conn.execute(&format!(
            "DELETE FROM {schema}.snapshot_chunks WHERE section = {seq};
             INSERT INTO {schema}.snapshots (section, next_id) VALUES ({seq}, {next_id})
                 ON CONFLICT (section) DO UPDATE SET next_id = EXCLUDED.next_id, complete = false;"
        ))
        .map_err(PgError::into_io)?;
        Ok(PgSnapshot {
            conn,
            section: seq,
            chunks: 0,
            jobs: 0,
            bytes: 0,
            buf: Vec::new(),
        })
    }

    fn add_to_snapshot(&self, s: &mut PgSnapshot, jobs: &[Change]) -> io::Result<()> {
        s.buf.clear();
        for change in jobs {
            encode_change(change, &mut s.buf);
        }
        let sql = format!(
            "INSERT INTO {}.snapshot_chunks (section, chunk, records) VALUES ($1, $2, $3)",
            self.target.schema()
        );
        let (runtime, link) = s.conn.parts();
        let done = runtime.block_on(
            sqlx::query(&sql)
                .bind(s.section as i64)
                .bind(s.chunks)
                .bind(&s.buf[..])
                .execute(&mut *link),
        );
        done.map_err(|e| s.conn.error(e).into_io())?;
        s.chunks += 1;
        s.jobs += jobs.len() as u64;
        s.bytes += s.buf.len() as u64;
        Ok(())
    }

    fn complete_snapshot(&self, mut s: PgSnapshot) -> io::Result<u64> {
        let epoch = self.leadership.epoch();
        let schema = self.target.schema();
        let seq = s.section;
        // Where section `seq` starts: its first batch, or the end of the log when none is
        // written yet (every batch before is in an earlier section). Completed only while
        // this node's epoch leads: a node that lost the lease must not compact the log
        // another node now writes.
        let completed = s
            .conn
            .execute_counting(&format!(
                "UPDATE {schema}.snapshots SET complete = true, start_pos = COALESCE(
                     (SELECT min(pos) FROM {schema}.log WHERE section >= {seq}),
                     GREATEST(
                         (SELECT COALESCE(max(pos + length(records)), 0) FROM {schema}.log),
                         (SELECT COALESCE(max(start_pos), 0) FROM {schema}.snapshots
                          WHERE complete)))
                 WHERE section = {seq} AND EXISTS (
                     SELECT 1 FROM {schema}.leader WHERE id = 1 AND epoch = {epoch} FOR SHARE);"
            ))
            .map_err(PgError::into_io)?;
        if completed != 1 {
            return Err(io::Error::other(
                "this node no longer leads the storage; the snapshot is not completed",
            ));
        }
        self.snapshot_bytes.store(s.bytes, Ordering::Relaxed);
        *self.snapshot_conn.lock().expect("snapshot conn lock") = Some((s.conn, seq));
        Ok(s.jobs)
    }

    fn drop_covered(&self, seq: u64) -> io::Result<()> {
        let mut conn = self.compaction_conn(seq)?;
        let schema = self.target.schema();
        let epoch = Some(self.leadership.epoch());
        conn.execute(&format!(
            "BEGIN; {} COMMIT;",
            drop_covered_sql(schema, seq, epoch)
        ))
        .map_err(PgError::into_io)?;
        self.sections
            .lock()
            .expect("sections lock")
            .retain(|&section, _| section >= seq);
        self.oldest_section.store(seq, Ordering::Relaxed);
        reclaim(&mut conn, schema);
        make_partitions_ahead(&mut conn, schema, seq + 1);
        Ok(())
    }
}

/// Makes the space of the rows a compaction just deleted (of `log_default`, old snapshots)
/// reusable at once, rather than whenever autovacuum next visits (by default after a
/// fifth of a table is dead, checked once a minute): under steady churn those tables would
/// otherwise hold several times their live rows. A plain `VACUUM` takes no lock that stops appends, and runs on the
/// compaction's connection, off the writer's path. Its failure costs only space, so it is
/// logged, not returned.
fn reclaim(conn: &mut Conn, schema: &str) {
    let sql = format!("VACUUM {schema}.log_default, {schema}.snapshot_chunks, {schema}.snapshots");
    if let Err(e) = conn.execute(&sql) {
        tracing::warn!("VACUUM after compaction failed: {e}; autovacuum will reclaim the space");
    }
}
