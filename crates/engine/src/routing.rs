//! Moving a leased job to another queue in one step: one stage of a multi-stage job ends
//! and the next begins, in one transition and one log record, so the job is never in
//! neither queue nor in both (the races of a Redis flow library's complete-then-push).
//! The job keeps its id, body, watchers and attempt count (so fencing tokens keep growing
//! across stages); its priority and attributes may change.

use bytes::Bytes;

use crate::change::Change;
use crate::queue::QueueId;
use crate::{ConnId, Engine, JobId, Millis};

impl Engine {
    /// Moves a job `conn` holds to queue `to`, ready now with priority `pri`, with new
    /// attributes (`None` keeps them). The stage it leaves counts as done (`total_ok`).
    /// False unless `conn` holds the job, or if the job has a unique key (keys are unique
    /// per queue, and a stage job has none).
    pub fn route(
        &mut self,
        conn: ConnId,
        id: JobId,
        to: QueueId,
        pri: u32,
        attrs: Option<Bytes>,
        now: Millis,
    ) -> bool {
        self.saw(now);
        if !self.holds(conn, id) || self.unique_of.contains_key(&id) || self.is_flow_engine_job(id)
        {
            return false;
        }
        let stamp = self.leave_state(id);
        self.lease_closed(id, conn, stamp, crate::LeaseClose::Ok, None);
        let from = self.jobs[&id].queue;
        self.lease_completed(from, stamp, crate::LeaseOutcome::Ok);
        self.queue_mut(from).total_ok += 1;
        if self.jobs[&id].durable {
            self.changes.push(Change::Route {
                id,
                queue: self.queue(to).name.clone(),
                pri,
                attrs: attrs.clone(),
            });
        }
        self.move_to(id, to, pri, attrs);
        self.drop_queue_if_unreferenced(from);
        self.serve_waiters(now);
        true
    }

    /// Puts a job that left its state into queue `to`, ready.
    pub(crate) fn move_to(&mut self, id: JobId, to: QueueId, pri: u32, attrs: Option<Bytes>) {
        let job = &self.jobs[&id];
        let (from, durable, body_len) = (job.queue, job.durable, job.body.len() as u64);
        if durable {
            // The record cost counts the queue name: keep the estimate exact.
            self.live_bytes -= self.queue(from).name.len() as u64 + body_len;
            self.live_bytes += self.queue(to).name.len() as u64 + body_len;
        }
        let job = self.jobs.get_mut(&id).expect("moved job exists");
        job.queue = to;
        job.pri = pri;
        if let Some(attrs) = attrs {
            self.attrs.insert(id, attrs);
        }
        self.queue_mut(to).total_jobs += 1;
        self.enter_ready(id);
    }
}
