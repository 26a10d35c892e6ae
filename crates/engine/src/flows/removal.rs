//! Removing flow jobs: a delete (cascading to children and lookup entries, whatever state
//! the job is in) and retention (an ended job is purged a set time after its end, never
//! while it is in flight).

use crate::flows::{FlowStatus, Touched};
use crate::{Engine, Millis};

impl Engine {
    /// Deletes a flow job, its children (recursively) and their lookup entries. A lease on
    /// any of them ends (the holder's next call is refused). A deleted child counts as
    /// failed for its parent, so the parent is never stranded. False if there is no such job.
    pub fn delete_flow_job(&mut self, id: &str, now: Millis) -> bool {
        self.saw(now);
        let Some(job) = self.flows.jobs.get(id) else {
            return false;
        };
        let parent = job.parent.clone();
        let mut touched = Touched::default();
        if let Some(parent) = parent {
            if let Some(child) = self.flows.jobs.get_mut(id) {
                child.fields.insert("done".into(), true.into());
                child.fields.insert("failed".into(), true.into());
                child
                    .fields
                    .insert("failedErrorMsg".into(), "deleted".into());
            }
            self.fan_in(&parent, id, now, 0, &mut touched);
        }
        self.remove_flow_tree(id, &mut touched);
        self.log_flow_jobs(touched);
        self.serve_waiters(now);
        true
    }

    /// Removes a job and its children without logging (the caller logs `touched`).
    fn remove_flow_tree(&mut self, id: &str, touched: &mut Touched) {
        if !self.flows.jobs.contains_key(id) {
            return;
        }
        self.flows.unindex(id);
        let job = self.flows.jobs.remove(id).expect("checked");
        self.flows.drop_size(id, job.engine_id);
        self.flow_dequeue(job.engine_id);
        touched.gone(id);
        // Removed before its children, so even a cycle in a damaged record ends.
        for child in job.children {
            self.remove_flow_tree(&child, touched);
        }
    }

    /// Purges ended top-level jobs whose retention ran out by `now`, with their children.
    pub(crate) fn purge_flow_jobs(&mut self, now: Millis) {
        let mut touched = Touched::default();
        while let Some((at, id)) = self.flows.retention.first().cloned() {
            if at > now {
                break;
            }
            self.flows.retention.pop_first();
            let ended = self
                .flows
                .jobs
                .get(&id)
                .is_some_and(|j| j.status.is_end() && j.status != FlowStatus::WaitingChildren);
            if ended {
                self.remove_flow_tree(&id, &mut touched);
            }
        }
        self.log_flow_jobs(touched);
    }

    /// When the next ended flow job is due to be purged.
    pub(crate) fn next_flow_purge(&self) -> Option<Millis> {
        self.flows.retention.first().map(|(at, _)| *at)
    }
}
