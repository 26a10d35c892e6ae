//! run-manual's claim: the `manual` rows among the ids asked for, taken by primary key.

use std::collections::BTreeMap;

use super::columns::{row_id, text};
use super::{id_list, Claimed, Store};

/// What `run-manual` found for its ids.
#[derive(Debug, Default)]
pub struct ManualClaim {
    /// Rows now `accepted` by this worker.
    pub accepted: Vec<Claimed>,
    /// Ids not taken, with jobd's reason text.
    pub errors: BTreeMap<u64, String>,
}

impl Store {
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
}
