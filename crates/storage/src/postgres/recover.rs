//! Reading the log back from PostgreSQL: the newest complete snapshot, and batches,
//! through the same record decoding as the files (`crate::recovery`). A standby's
//! follower (`follow`) is the one reader: it loads a snapshot, then applies every batch
//! after it as it commits.

use std::collections::BTreeMap;
use std::path::PathBuf;

use jobyard_engine::Change;
use sqlx::Row;

use super::conn::Conn;
use super::error::PgError;
use crate::recovery::{apply_records, RecoveryReport};

/// Rows fetched per round trip: a page of batches or snapshot chunks.
const PAGE: i64 = 64;

/// Where the log ends, as recovery found it: what the writer continues from.
#[derive(Debug, Default)]
pub(crate) struct LogEnd {
    /// The byte position the next batch starts at.
    pub pos: u64,
    /// Bytes of batches kept, by section.
    pub sections: BTreeMap<u64, u64>,
    /// Bytes of the snapshot recovery started from.
    pub snapshot_bytes: u64,
    /// The section recovery started from (the snapshot's, or 1).
    pub oldest_section: u64,
}

/// A complete snapshot, which a follower loads and a new leader continues after.
#[derive(Debug)]
pub(crate) struct SnapshotRow {
    pub section: u64,
    pub next_id: u64,
    /// Where the first batch of `section` is (or was): every batch from here on is after
    /// the snapshot.
    pub start_pos: u64,
}

/// Removes the leftovers a leader may leave behind: a snapshot it never completed, and
/// what the newest complete snapshot covers when its compaction was cut short. Run by a
/// node that has just taken the lease, fenced by its `epoch`.
pub(crate) fn clean_up(conn: &mut Conn, schema: &str, epoch: u64) -> Result<(), PgError> {
    conn.execute(&format!(
        "DELETE FROM {schema}.snapshot_chunks WHERE section IN
             (SELECT section FROM {schema}.snapshots WHERE NOT complete);
         DELETE FROM {schema}.snapshots WHERE NOT complete;"
    ))?;
    if let Some(snapshot) = newest_snapshot(conn, schema)? {
        conn.execute(&format!(
            "BEGIN; {} COMMIT;",
            super::backend::drop_covered_sql(schema, snapshot.section, Some(epoch))
        ))?;
    }
    Ok(())
}

/// The newest complete snapshot, if any.
pub(crate) fn newest_snapshot(
    conn: &mut Conn,
    schema: &str,
) -> Result<Option<SnapshotRow>, PgError> {
    let sql = format!(
        "SELECT section, next_id, start_pos FROM {schema}.snapshots
         WHERE complete ORDER BY section DESC LIMIT 1"
    );
    let (runtime, link) = conn.parts();
    let row = runtime.block_on(sqlx::query(&sql).fetch_optional(&mut *link));
    Ok(row.map_err(|e| conn.error(e))?.map(|row| SnapshotRow {
        section: row.get::<i64, _>(0) as u64,
        next_id: row.get::<i64, _>(1) as u64,
        start_pos: row.get::<i64, _>(2) as u64,
    }))
}

/// Applies a snapshot's chunks in order; returns its size in bytes.
pub(crate) fn read_snapshot(
    conn: &mut Conn,
    schema: &str,
    snapshot: &SnapshotRow,
    report: &mut RecoveryReport,
    apply: &mut impl FnMut(Change),
) -> Result<u64, PgError> {
    let sql = format!(
        "SELECT chunk, records FROM {schema}.snapshot_chunks
         WHERE section = $1 AND chunk > $2 ORDER BY chunk LIMIT $3"
    );
    let (mut after, mut bytes) = (-1i32, 0u64);
    loop {
        let (runtime, link) = conn.parts();
        let rows = runtime.block_on(
            sqlx::query(&sql)
                .bind(snapshot.section as i64)
                .bind(after)
                .bind(PAGE)
                .fetch_all(&mut *link),
        );
        let rows = rows.map_err(|e| conn.error(e))?;
        if rows.is_empty() {
            return Ok(bytes);
        }
        for row in rows {
            after = row.get(0);
            let records: Vec<u8> = row.get(1);
            bytes += records.len() as u64;
            let name = PathBuf::from(format!(
                "{schema}.snapshot_chunks (snapshot {}, chunk {after})",
                snapshot.section
            ));
            apply_records(&name, &records, report, apply).map_err(corrupt)?;
        }
    }
}

/// The size in bytes of snapshot `section`'s chunks (what compaction counts as stored).
pub(crate) fn snapshot_bytes(conn: &mut Conn, schema: &str, section: u64) -> Result<u64, PgError> {
    let sql = format!(
        "SELECT COALESCE(sum(length(records)), 0)::bigint FROM {schema}.snapshot_chunks
         WHERE section = $1"
    );
    let (runtime, link) = conn.parts();
    let row = runtime.block_on(sqlx::query(&sql).bind(section as i64).fetch_one(&mut *link));
    Ok(row.map_err(|e| conn.error(e))?.get::<i64, _>(0) as u64)
}

/// Applies one batch of the log (`pos` names it in messages) through recovery's decoding.
pub(crate) fn apply_batch(
    schema: &str,
    pos: u64,
    records: &[u8],
    report: &mut RecoveryReport,
    apply: &mut impl FnMut(Change),
) -> Result<(), PgError> {
    let name = PathBuf::from(format!("{schema}.log (position {pos})"));
    apply_records(&name, records, report, apply).map_err(corrupt)
}

fn corrupt(e: crate::RecoveryError) -> PgError {
    PgError::fatal(format!("cannot recover the log: {e}"))
}
