//! Start-up from PostgreSQL: the newest complete snapshot, then every batch after it in
//! order, through the same record decoding as the files (`crate::recovery`).

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

/// The snapshot recovery starts from.
struct SnapshotRow {
    section: u64,
    next_id: u64,
    start_pos: u64,
}

/// Replays the schema's log into `apply`; returns the report (its `next_segment` is the
/// section the writer starts) and where the log ends. Leftovers of a snapshot never
/// completed, or of one whose compaction was cut short, are removed first.
pub(crate) fn recover(
    conn: &mut Conn,
    schema: &str,
    mut apply: impl FnMut(Change),
) -> Result<(RecoveryReport, LogEnd), PgError> {
    conn.execute(&format!(
        "DELETE FROM {schema}.snapshot_chunks WHERE section IN
             (SELECT section FROM {schema}.snapshots WHERE NOT complete);
         DELETE FROM {schema}.snapshots WHERE NOT complete;"
    ))?;
    let mut report = RecoveryReport {
        next_segment: 1,
        next_id: 1,
        ..Default::default()
    };
    let mut end = LogEnd {
        oldest_section: 1,
        ..Default::default()
    };
    if let Some(snapshot) = newest_snapshot(conn, schema)? {
        conn.execute(&super::backend::drop_covered_sql(
            schema,
            snapshot.section,
            None,
        ))?;
        end.snapshot_bytes = read_snapshot(conn, schema, &snapshot, &mut report, &mut apply)?;
        report.snapshot = Some(snapshot.section);
        report.next_id = report.next_id.max(snapshot.next_id);
        report.next_segment = snapshot.section + 1;
        end.pos = snapshot.start_pos;
        end.oldest_section = snapshot.section;
    }
    read_batches(conn, schema, &mut report, &mut end, &mut apply)?;
    Ok((report, end))
}

fn newest_snapshot(conn: &mut Conn, schema: &str) -> Result<Option<SnapshotRow>, PgError> {
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
fn read_snapshot(
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

/// Applies every batch from the start section on, checking that each starts where the one
/// before ended (a missing row would silently lose or resurrect jobs).
fn read_batches(
    conn: &mut Conn,
    schema: &str,
    report: &mut RecoveryReport,
    end: &mut LogEnd,
    apply: &mut impl FnMut(Change),
) -> Result<(), PgError> {
    let sql = format!(
        "SELECT pos, section, records FROM {schema}.log
         WHERE section >= $1 AND pos >= $2 ORDER BY pos LIMIT $3"
    );
    let from_section = end.oldest_section;
    loop {
        let (runtime, link) = conn.parts();
        let rows = runtime.block_on(
            sqlx::query(&sql)
                .bind(from_section as i64)
                .bind(end.pos as i64)
                .bind(PAGE)
                .fetch_all(&mut *link),
        );
        let rows = rows.map_err(|e| conn.error(e))?;
        if rows.is_empty() {
            return Ok(());
        }
        for row in rows {
            let pos = row.get::<i64, _>(0) as u64;
            let section = row.get::<i64, _>(1) as u64;
            let records: Vec<u8> = row.get(2);
            if pos != end.pos {
                return Err(PgError::fatal(format!(
                    "{schema}.log: the batch at position {pos} follows one that ended at {}: \
                     rows are missing, and the jobs they held would be lost",
                    end.pos
                )));
            }
            let name = PathBuf::from(format!("{schema}.log (position {pos})"));
            apply_records(&name, &records, report, apply).map_err(corrupt)?;
            end.pos = pos + records.len() as u64;
            *end.sections.entry(section).or_default() += records.len() as u64;
            report.next_segment = report.next_segment.max(section + 1);
        }
    }
}

fn corrupt(e: crate::RecoveryError) -> PgError {
    PgError::fatal(format!("cannot recover the log: {e}"))
}
