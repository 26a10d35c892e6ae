//! Following the log: a standby loads the newest complete snapshot once, then applies
//! every batch after it as the leader commits it (`WHERE pos >= $1 ORDER BY pos`), into
//! the engine the broker will serve from, through recovery's own decoding and the
//! broker's replay path. So when it takes the lease it has only the last few batches to
//! read, not the whole log.
//!
//! Compaction may delete batches a slow follower has not read yet: it finds out (the next
//! batch is not where the last one ended, or the newest snapshot starts past its
//! position with no batch there) and reloads from the newest snapshot into a fresh engine.

use std::collections::BTreeMap;
use std::time::Instant;

use jobyard_engine::Change;
use sqlx::Row;

use super::conn::Conn;
use super::error::PgError;
use super::recover::{
    apply_batch, newest_snapshot, read_snapshot, snapshot_bytes, LogEnd, SnapshotRow,
};
use crate::recovery::RecoveryReport;

/// Batches fetched per round trip.
const PAGE: usize = 64;

/// The engine a standby keeps current, as the broker owns it.
pub trait Replica {
    /// Applies one change read from the log: the same replay recovery does.
    fn apply(&mut self, change: Change);
    /// Forgets everything applied, for a fresh start from a snapshot (the batches this
    /// node still needed were compacted away).
    fn reset(&mut self);
}

/// What a completed read found about the batches after its position.
#[derive(Debug, PartialEq, Eq)]
enum After {
    /// Nothing: every batch committed before the read is applied.
    Nothing,
    /// A batch at the position committed after the read looked: read again.
    MoreCame,
    /// The batches at the position were compacted away: reload from the snapshot.
    Compacted,
}

/// Judges the end of a read at `pos`: whether a batch starts there now, and where the
/// newest complete snapshot starts. Batches before a snapshot's start are deleted only
/// after it is complete, so a snapshot starting past `pos` with no batch at `pos` means
/// the batches this follower needs are gone.
fn judge(pos: u64, batch_at_pos: bool, newest_start: Option<u64>) -> After {
    if batch_at_pos {
        After::MoreCame
    } else if newest_start.is_some_and(|start| start > pos) {
        After::Compacted
    } else {
        After::Nothing
    }
}

/// A follower's place in the log and what it has applied.
pub(crate) struct Follower {
    schema: String,
    /// Whether the engine holds a snapshot (or the whole log from its start): until then
    /// the next read loads one first.
    loaded: bool,
    /// Where the next batch starts.
    pos: u64,
    /// Bytes of batches applied, by section (what a new leader's compaction counts).
    sections: BTreeMap<u64, u64>,
    /// Records applied, next section and ids, as recovery reports them.
    report: RecoveryReport,
    /// When the oldest committed batch not yet applied was first known to exist.
    behind_since: Option<Instant>,
    /// Batches applied since the follower started (for the takeover's message).
    batches: u64,
    rows_sql: String,
    after_sql: String,
}

/// A report as a fresh recovery starts it.
fn fresh_report() -> RecoveryReport {
    RecoveryReport {
        next_segment: 1,
        next_id: 1,
        ..Default::default()
    }
}

impl Follower {
    /// A follower of `schema` that has loaded nothing yet.
    pub fn new(schema: &str) -> Follower {
        Follower {
            schema: schema.to_string(),
            loaded: false,
            pos: 0,
            sections: BTreeMap::new(),
            report: fresh_report(),
            behind_since: None,
            batches: 0,
            rows_sql: format!(
                "SELECT pos, section, records FROM {schema}.log
                 WHERE pos >= $1 ORDER BY pos LIMIT {PAGE}"
            ),
            after_sql: format!(
                "SELECT EXISTS (SELECT 1 FROM {schema}.log WHERE pos = $1),
                        (SELECT start_pos FROM {schema}.snapshots
                         WHERE complete ORDER BY section DESC LIMIT 1)"
            ),
        }
    }

    /// Whether the engine holds a loaded snapshot (else the next read loads one).
    pub fn loaded(&self) -> bool {
        self.loaded
    }

    /// When the oldest batch not yet applied was first known to exist (`None`: caught up).
    pub fn behind_since(&self) -> Option<Instant> {
        self.behind_since
    }

    /// Records applied so far (snapshot and batches).
    pub fn records(&self) -> u64 {
        self.report.records
    }

    /// Batches applied since the follower started.
    pub fn batches(&self) -> u64 {
        self.batches
    }

    /// The connection was lost at `at`: whatever committed since is unknown, so the
    /// follower counts as behind from then on until a read catches up.
    pub fn lost_sight(&mut self, at: Instant) {
        self.behind_since.get_or_insert(at);
    }

    /// Loads the newest complete snapshot into a fresh engine (or, with none, starts
    /// from the log's beginning). A snapshot deleted while being read (a newer one
    /// completed, and compaction dropped it) is read again from the newer one.
    pub fn load(&mut self, conn: &mut Conn, replica: &mut impl Replica) -> Result<(), PgError> {
        loop {
            replica.reset();
            self.loaded = false;
            self.pos = 0;
            self.sections.clear();
            self.report = fresh_report();
            let Some(snapshot) = newest_snapshot(conn, &self.schema)? else {
                self.loaded = true;
                return Ok(());
            };
            read_snapshot(
                conn,
                &self.schema,
                &snapshot,
                &mut self.report,
                &mut |change| replica.apply(change),
            )?;
            // Deleting a snapshot's chunks is one transaction: if its row is still there
            // after the last chunk was read, every chunk was.
            if self.still_complete(conn, &snapshot)? {
                self.pos = snapshot.start_pos;
                self.report.snapshot = Some(snapshot.section);
                self.report.next_id = self.report.next_id.max(snapshot.next_id);
                self.report.next_segment = snapshot.section + 1;
                self.loaded = true;
                return Ok(());
            }
            tracing::info!(
                "snapshot {} was replaced while this node read it; reading the newer one",
                snapshot.section
            );
        }
    }

    fn still_complete(&self, conn: &mut Conn, snapshot: &SnapshotRow) -> Result<bool, PgError> {
        let sql = format!(
            "SELECT 1 FROM {}.snapshots WHERE section = $1 AND complete",
            self.schema
        );
        let (runtime, link) = conn.parts();
        let row = runtime.block_on(
            sqlx::query(&sql)
                .bind(snapshot.section as i64)
                .fetch_optional(&mut *link),
        );
        Ok(row.map_err(|e| conn.error(e))?.is_some())
    }

    /// Applies the batches committed after the follower's position, loading a snapshot
    /// first if none is loaded. `noticed`: when a notification said a batch committed.
    /// Stops at `deadline` (if any) between pages; returns whether it read to the end,
    /// i.e. applied every batch committed before its last look.
    pub fn read(
        &mut self,
        conn: &mut Conn,
        replica: &mut impl Replica,
        noticed: Option<Instant>,
        deadline: Option<Instant>,
    ) -> Result<bool, PgError> {
        if !self.loaded {
            self.load(conn, replica)?;
        }
        if let Some(at) = noticed {
            self.behind_since.get_or_insert(at);
        }
        loop {
            let asked = Instant::now();
            let rows = self.fetch(conn)?;
            let full = rows.len() == PAGE;
            if !rows.is_empty() {
                self.behind_since.get_or_insert(asked);
            }
            let mut gap = None;
            for (pos, section, records) in rows {
                if pos != self.pos {
                    gap = Some(pos);
                    break;
                }
                apply_batch(
                    &self.schema,
                    pos,
                    &records,
                    &mut self.report,
                    &mut |change| replica.apply(change),
                )?;
                let len = records.len() as u64;
                self.pos = pos + len;
                *self.sections.entry(section).or_default() += len;
                self.report.next_segment = self.report.next_segment.max(section + 1);
                self.batches += 1;
            }
            if gap.is_some() || !full {
                match self.after(conn)? {
                    After::Nothing if gap.is_none() => {
                        self.behind_since = None;
                        return Ok(true);
                    }
                    After::Nothing => return Err(self.missing(gap.unwrap_or(self.pos))),
                    // Everything committed before `asked` is applied: the batches not yet
                    // applied committed after it, so they are known since then at most.
                    After::MoreCame if gap.is_none() => self.behind_since = Some(asked),
                    After::MoreCame => {}
                    After::Compacted => {
                        tracing::info!(
                            "the batches after position {} were compacted away before this \
                             node read them; loading the newest snapshot instead",
                            self.pos
                        );
                        self.load(conn, replica)?;
                    }
                }
            }
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return Ok(false);
            }
        }
    }

    fn fetch(&self, conn: &mut Conn) -> Result<Vec<(u64, u64, Vec<u8>)>, PgError> {
        let (runtime, link) = conn.parts();
        let rows = runtime.block_on(
            sqlx::query(&self.rows_sql)
                .bind(self.pos as i64)
                .fetch_all(&mut *link),
        );
        Ok(rows
            .map_err(|e| conn.error(e))?
            .into_iter()
            .map(|row| {
                (
                    row.get::<i64, _>(0) as u64,
                    row.get::<i64, _>(1) as u64,
                    row.get::<Vec<u8>, _>(2),
                )
            })
            .collect())
    }

    /// Looks, in one statement, whether a batch starts at the position and where the
    /// newest snapshot starts.
    fn after(&self, conn: &mut Conn) -> Result<After, PgError> {
        let (runtime, link) = conn.parts();
        let row = runtime.block_on(
            sqlx::query(&self.after_sql)
                .bind(self.pos as i64)
                .fetch_one(&mut *link),
        );
        let row = row.map_err(|e| conn.error(e))?;
        let newest_start = row.get::<Option<i64>, _>(1).map(|p| p as u64);
        Ok(judge(self.pos, row.get(0), newest_start))
    }

    fn missing(&self, found: u64) -> PgError {
        PgError::fatal(format!(
            "{}.log: the batch at position {found} follows one that ended at {}: rows are \
             missing, and the jobs they held would be lost",
            self.schema, self.pos
        ))
    }

    /// Where the log ends for the writer of a node that has just taken the lease and read
    /// to the end, with the report its broker continues from. Sections a newer snapshot
    /// covers are not counted, and the next section is past that snapshot's.
    pub fn into_end(mut self, conn: &mut Conn) -> Result<(LogEnd, RecoveryReport), PgError> {
        let mut end = LogEnd {
            pos: self.pos,
            oldest_section: 1,
            ..Default::default()
        };
        if let Some(snapshot) = newest_snapshot(conn, &self.schema)? {
            end.oldest_section = snapshot.section;
            end.snapshot_bytes = snapshot_bytes(conn, &self.schema, snapshot.section)?;
            self.report.snapshot = Some(snapshot.section);
            self.report.next_id = self.report.next_id.max(snapshot.next_id);
            self.report.next_segment = self.report.next_segment.max(snapshot.section + 1);
        }
        self.sections
            .retain(|&section, _| section >= end.oldest_section);
        end.sections = self.sections;
        Ok((end, self.report))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_batch_at_the_position_means_read_again() {
        assert_eq!(judge(100, true, Some(500)), After::MoreCame);
        assert_eq!(judge(100, true, None), After::MoreCame);
    }

    #[test]
    fn a_snapshot_past_the_position_with_no_batch_there_means_compacted() {
        assert_eq!(judge(100, false, Some(101)), After::Compacted);
    }

    #[test]
    fn otherwise_the_follower_is_at_the_end() {
        assert_eq!(judge(100, false, None), After::Nothing);
        assert_eq!(judge(100, false, Some(100)), After::Nothing);
        assert_eq!(judge(100, false, Some(40)), After::Nothing);
    }
}
