//! Moving a job between the structures of its states.

use crate::job::JobState;
use crate::timers::Timer;
use crate::{Engine, JobId, Millis, URGENT_PRIORITY};

impl Engine {
    pub(crate) fn enter_ready(&mut self, id: JobId) {
        let job = self.jobs.get_mut(&id).expect("job exists");
        job.state = JobState::Ready;
        job.due = 0;
        let (q, pri) = (job.queue, job.pri);
        let queue = self.queue_mut(q);
        queue.ready.insert((pri, id));
        if pri < URGENT_PRIORITY {
            queue.urgent += 1;
        }
        if !queue.waiters.is_empty() {
            self.to_serve.push(q);
        }
    }

    pub(crate) fn enter_delayed(&mut self, id: JobId, at: Millis) {
        let job = self.jobs.get_mut(&id).expect("job exists");
        job.state = JobState::Delayed;
        job.due = at;
        let q = job.queue;
        self.queue_mut(q).delayed.insert((at, id));
        self.timers.add(at, Timer::Delay(id));
    }

    pub(crate) fn enter_buried(&mut self, id: JobId) {
        self.bury_seq += 1;
        let seq = self.bury_seq;
        let job = self.jobs.get_mut(&id).expect("job exists");
        job.state = JobState::Buried;
        job.due = seq;
        let q = job.queue;
        self.queue_mut(q).buried.insert((seq, id));
    }

    /// Takes a job out of whatever structure its state keeps it in. Returns the stamp of
    /// its lease if it was leased (for [`Engine::lease_completed`]).
    pub(crate) fn leave_state(&mut self, id: JobId) -> Option<u64> {
        let job = &self.jobs[&id];
        let mut stamp = None;
        if job.state == JobState::Reserved {
            let owner = job.owner;
            if let Some(s) = self.sessions.get_mut(&owner) {
                stamp = s.reserved.remove(&id);
            }
        }
        self.leave_state_unowned(id);
        stamp
    }

    /// As [`Self::leave_state`], for when the owner's session is already gone.
    pub(crate) fn leave_state_unowned(&mut self, id: JobId) {
        let job = &self.jobs[&id];
        let (q, pri, due, state) = (job.queue, job.pri, job.due, job.state);
        match state {
            JobState::Ready => {
                let queue = self.queue_mut(q);
                queue.ready.remove(&(pri, id));
                if pri < URGENT_PRIORITY {
                    queue.urgent -= 1;
                }
            }
            JobState::Delayed => {
                self.queue_mut(q).delayed.remove(&(due, id));
                self.timers.remove(due, Timer::Delay(id));
            }
            JobState::Reserved => {
                let queue = self.queue_mut(q);
                // A queue at its lease limit may now hand out another job.
                let was_full = !queue.has_lease_room();
                queue.reserved -= 1;
                if was_full && !queue.waiters.is_empty() {
                    self.to_serve.push(q);
                }
                if due > 0 {
                    self.timers.remove(due, Timer::Lease(id));
                }
            }
            JobState::Buried => {
                // `due` holds the burial order while buried.
                self.queue_mut(q).buried.remove(&(due, id));
            }
        }
    }
}
