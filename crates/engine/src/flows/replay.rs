//! Flows in recovery and snapshots: replaying a flow record sets the jobs it holds
//! outright (so records of different jobs may come in any order, as in a fuzzy snapshot),
//! and a snapshot writes every definition and every flow job as such a record.

use bytes::Bytes;

use crate::change::Change;
use crate::flows::{jobs_record, FlowChange, FlowStatus};
use crate::{Engine, JobId};

/// The id a snapshot's order uses for "the flow definitions" (job ids start at 1).
pub(crate) const DEFINITIONS_SLOT: JobId = 0;

impl Engine {
    /// Applies a flow record read back from the log. Bytes that are not a flow record are
    /// ignored (recovery has already checked the frame's checksum).
    pub(crate) fn replay_flow(&mut self, bytes: &[u8]) {
        match FlowChange::decode(bytes) {
            Some(FlowChange::Define(def)) => {
                self.flows.defs.insert(def.name.clone(), def);
            }
            Some(FlowChange::Jobs { put, gone }) => {
                for id in gone {
                    self.forget_flow_job(&id);
                }
                for job in put {
                    let id = job.id.clone();
                    self.forget_flow_job(&id);
                    // An engine id another job already has cannot be this one's: such a
                    // record is not one the engine wrote, and is skipped whole.
                    if self.jobs.contains_key(&job.engine_id)
                        || self.flows.by_engine.contains_key(&job.engine_id)
                    {
                        continue;
                    }
                    let queued = matches!(job.status, FlowStatus::Waiting | FlowStatus::Delayed);
                    self.next_id = self.next_id.max(job.engine_id.saturating_add(1));
                    let json = serde_json::to_vec(&job).unwrap_or_default();
                    self.flows
                        .keep_ended_record(job.engine_id, job.status.is_end(), &json);
                    self.flows.set_size(&id, json.len() as u64);
                    self.flows.jobs.insert(id.clone(), job);
                    self.flows.index(&id);
                    if queued {
                        let now = self.last_now;
                        self.flow_enqueue(&id, now);
                    }
                }
            }
            Some(FlowChange::Token { id, token }) => {
                if let Some(job) = self.flows.jobs.get_mut(&id) {
                    if token > job.token {
                        job.token = token;
                        let engine_id = job.engine_id;
                        self.flows.forget_ended_record(engine_id);
                    }
                }
            }
            None => {}
        }
    }

    fn forget_flow_job(&mut self, id: &str) {
        if let Some(engine_id) = self.flows.jobs.get(id).map(|j| j.engine_id) {
            self.flows.unindex(id);
            self.flows.drop_size(id, engine_id);
            self.flows.jobs.remove(id);
            self.flow_dequeue(engine_id);
        }
    }

    /// The slots a snapshot adds for flows: the definitions first, then the engine ids of
    /// flow jobs that are in no queue (ended or waiting for children; queued ones are
    /// listed with the engine's jobs already).
    pub(crate) fn flow_snapshot_slots(&self) -> Vec<JobId> {
        let mut slots = vec![DEFINITIONS_SLOT];
        slots.extend(
            self.flows
                .jobs
                .values()
                .map(|j| j.engine_id)
                .filter(|id| !self.jobs.contains_key(id)),
        );
        slots
    }

    /// The snapshot records of one slot: the definitions, or one flow job.
    pub(crate) fn flow_snapshot_of(&self, slot: JobId, out: &mut Vec<Change>) {
        if slot == DEFINITIONS_SLOT {
            for def in self.flows.defs.values() {
                let change = FlowChange::Define(def.clone());
                out.push(Change::Flow(Bytes::from(change.encode())));
            }
            return;
        }
        if let Some(record) = self.flows.ended_records.get(&slot) {
            out.push(Change::Flow(record.clone()));
        } else if let Some(job) = self.flow_job_of(slot) {
            let json = serde_json::to_vec(job).expect("flow jobs serialize");
            out.push(Change::Flow(Bytes::from(jobs_record(&json))));
        }
    }
}
