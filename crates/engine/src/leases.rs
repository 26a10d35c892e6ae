//! What a lease holder does with its job (release, bury, touch, fence), kicks, and what
//! happens to a session's leases when it goes away.

use crate::change::Change;
use crate::job::JobState;
use crate::lease_timing::LeaseOutcome;
use crate::queue::QueueId;
use crate::timers::Timer;
use crate::waits::Lease;
use crate::{ConnId, Engine, JobId, Millis};
use crate::{Failure, LeaseClose};

impl Engine {
    /// Gives a leased job back, ready now or after a delay, with a new priority.
    pub fn release(
        &mut self,
        conn: ConnId,
        id: JobId,
        pri: u32,
        delay_secs: u32,
        now: Millis,
    ) -> bool {
        self.saw(now);
        if !self.holds(conn, id) {
            return false;
        }
        let stamp = self.leave_state(id);
        self.lease_closed(id, conn, stamp, LeaseClose::Released, None);
        let job = self.jobs.get_mut(&id).expect("held job exists");
        job.pri = pri;
        job.delay = delay_secs;
        job.releases += 1;
        let durable = job.durable;
        let ready_at = if delay_secs > 0 {
            now + delay_secs as Millis * 1000
        } else {
            0
        };
        if ready_at > 0 {
            self.enter_delayed(id, ready_at);
        } else {
            self.enter_ready(id);
        }
        if durable {
            self.changes.push(Change::Release { id, pri, ready_at });
        }
        self.serve_waiters(now);
        true
    }

    /// Sets a leased job aside until it is kicked.
    pub fn bury(&mut self, conn: ConnId, id: JobId, pri: u32) -> bool {
        if !self.holds(conn, id) || self.is_flow_engine_job(id) {
            return false;
        }
        let stamp = self.leave_state(id);
        self.lease_closed(id, conn, stamp, LeaseClose::Buried, None);
        let q = self.jobs[&id].queue;
        self.lease_completed(q, stamp, LeaseOutcome::Failed);
        let job = self.jobs.get_mut(&id).expect("held job exists");
        job.pri = pri;
        job.buries += 1;
        let durable = job.durable;
        self.enter_buried(id);
        if durable {
            self.changes.push(Change::Bury { id, pri });
        }
        // A lease limit may have been reached: burying makes room.
        let now = self.last_now;
        self.serve_waiters(now);
        true
    }

    /// Logs the attempt number of a job this session holds, and returns it. A front end
    /// that hands it out as a fencing token (WMP's `attempt`, a flow lease's token) calls
    /// this before telling the worker, so a token is never handed out twice: after a
    /// restart the job's next lease has a higher number, and a late result for an old
    /// one can be told apart. None if the session does not hold the job.
    pub fn fence(&mut self, conn: ConnId, id: JobId) -> Option<u32> {
        if !self.holds(conn, id) {
            return None;
        }
        let job = &self.jobs[&id];
        let (attempt, durable) = (job.reserves, job.durable);
        self.fenced.insert(id);
        if durable {
            self.changes.push(Change::Attempt { id, attempt });
        }
        Some(attempt)
    }

    /// Restarts a lease's clock with the job's full time-to-run.
    pub fn touch(&mut self, conn: ConnId, id: JobId, now: Millis) -> bool {
        self.saw(now);
        if !self.holds(conn, id) {
            return false;
        }
        let job = &self.jobs[&id];
        if job.due > 0 {
            // `.max(1)` as in `lease_to`: a ttr of 0 leases for 1 s, and a touch must not
            // give less than a reserve did (with 0 the lease ended the moment it was touched).
            let due = now + job.ttr.max(1) as Millis * 1000;
            self.timers.remove(job.due, Timer::Lease(id));
            self.timers.add(due, Timer::Lease(id));
            self.jobs.get_mut(&id).expect("held job exists").due = due;
        }
        true
    }

    /// Restarts a lease's clock for `ms` from now instead of the job's time-to-run (an HTTP
    /// heartbeat that names its own lease length). False unless `conn` holds the job.
    pub fn touch_for(&mut self, conn: ConnId, id: JobId, ms: Millis, now: Millis) -> bool {
        self.saw(now);
        if !self.holds(conn, id) {
            return false;
        }
        let old = self.jobs[&id].due;
        if old > 0 {
            self.timers.remove(old, Timer::Lease(id));
        }
        let due = now + ms.max(1);
        self.timers.add(due, Timer::Lease(id));
        self.jobs.get_mut(&id).expect("held job exists").due = due;
        true
    }

    /// Kicks up to `bound` jobs of a queue: buried ones (oldest first) if it has any,
    /// otherwise delayed ones (soonest first). Returns how many were kicked.
    pub fn kick(&mut self, q: QueueId, bound: u64, now: Millis) -> u64 {
        self.saw(now);
        let queue = self.queue(q);
        let ids: Vec<JobId> = if !queue.buried.is_empty() {
            queue
                .buried
                .iter()
                .take(bound as usize)
                .map(|&(_, id)| id)
                .collect()
        } else {
            queue
                .delayed
                .iter()
                .take(bound as usize)
                .map(|&(_, id)| id)
                .collect()
        };
        for &id in &ids {
            self.kick_one(id);
        }
        self.serve_waiters(now);
        ids.len() as u64
    }

    /// Kicks one buried or delayed job, in any queue.
    pub fn kick_job(&mut self, id: JobId, now: Millis) -> bool {
        match self.jobs.get(&id).map(|j| j.state) {
            Some(JobState::Buried | JobState::Delayed) => {
                self.kick_one(id);
                self.serve_waiters(now);
                true
            }
            _ => false,
        }
    }

    /// Sets a ready or delayed job aside (an operator's action; a worker buries the job it
    /// holds with [`Engine::bury`]). A leased job is left to its holder.
    pub fn bury_job(&mut self, id: JobId) -> bool {
        if self.is_flow_engine_job(id) {
            return false;
        }
        let Some(job) = self.jobs.get(&id) else {
            return false;
        };
        if !matches!(job.state, JobState::Ready | JobState::Delayed) {
            return false;
        }
        let (pri, durable) = (job.pri, job.durable);
        self.leave_state(id);
        self.jobs.get_mut(&id).expect("checked").buries += 1;
        self.enter_buried(id);
        if durable {
            self.changes.push(Change::Bury { id, pri });
        }
        true
    }

    fn kick_one(&mut self, id: JobId) {
        self.leave_state(id);
        let job = self.jobs.get_mut(&id).expect("kicked job exists");
        job.kicks += 1;
        let durable = job.durable;
        self.enter_ready(id);
        if durable {
            self.changes.push(Change::Kick { id });
        }
    }

    pub fn reserve_job(&mut self, conn: ConnId, id: JobId, lease: Lease, now: Millis) -> bool {
        self.saw(now);
        match self.jobs.get(&id).map(|j| j.state) {
            Some(JobState::Reserved) | None => false,
            Some(state) => {
                self.leave_state(id);
                self.lease_to(id, conn, lease, now);
                // Reservations are not logged, and a reserved job must come back ready after
                // a restart (as `snapshot` brings it back). A job taken straight from buried
                // or delayed would otherwise replay as still buried/delayed, and stay so in
                // the log even after its lease ends or it is given back by a disconnect,
                // while the live engine has it ready. Log that it left that state.
                let job = &self.jobs[&id];
                if job.durable && state != JobState::Ready {
                    self.changes.push(Change::Kick { id });
                }
                true
            }
        }
    }

    /// Forgets a connection: its wait ends and every job it held is ready again.
    pub fn disconnect(&mut self, conn: ConnId, now: Millis) {
        self.saw(now);
        self.cancel_wait(conn);
        let _ = self.drop_watches(conn);
        if let Some(session) = self.sessions.remove(&conn) {
            for (id, stamp) in session.reserved {
                self.lease_closed(id, conn, Some(stamp), LeaseClose::Disconnected, None);
                self.leave_state_unowned(id);
                if self.retry_policy_of(id).is_some() {
                    let how = LeaseClose::Disconnected;
                    self.attempt_failed(id, Failure::new(now, conn, how, None), now);
                } else {
                    self.enter_ready(id);
                }
            }
        }
        self.serve_waiters(now);
    }

    /// Jobs this connection holds a lease on.
    pub fn held_by(&self, conn: ConnId) -> impl Iterator<Item = JobId> + '_ {
        self.sessions
            .get(&conn)
            .into_iter()
            .flat_map(|s| s.reserved.keys().copied())
    }

    pub(crate) fn holds(&self, conn: ConnId, id: JobId) -> bool {
        self.jobs
            .get(&id)
            .is_some_and(|j| j.state == JobState::Reserved && j.owner == conn)
    }

    pub(crate) fn soonest_lease(&self, conn: ConnId) -> Option<Millis> {
        let session = self.sessions.get(&conn)?;
        session
            .reserved
            .keys()
            .map(|id| self.jobs[id].due)
            .filter(|&due| due > 0)
            .min()
    }
}
