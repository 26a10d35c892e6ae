//! Time: what happens when a delay, lease, pause, rate limit's wait or reserve's wait runs out.

use crate::notice::{Notice, NoticeKind};
use crate::timers::Timer;
use crate::{ConnId, Engine, JobId, Millis};

impl Engine {
    /// When [`Engine::tick`] next has work to do.
    pub(crate) fn next_deadline(&self) -> Option<Millis> {
        match (self.timers.next(), self.next_flow_purge()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Does everything that was due at or before `now`: delayed jobs become ready, leases
    /// end, pauses end, waits time out.
    pub(crate) fn tick(&mut self, now: Millis) {
        self.saw(now);
        while let Some((_, timer)) = self.timers.pop_due(now) {
            match timer {
                Timer::Delay(id) => {
                    self.leave_state(id);
                    self.enter_ready(id);
                }
                Timer::Lease(id) => self.expire_lease(id, now),
                Timer::Unpause(q) => {
                    let queue = self.queue_mut(q);
                    queue.paused_until = 0;
                    queue.pause_secs = 0;
                    self.to_serve.push(q);
                    self.drop_queue_if_unreferenced(q);
                }
                Timer::RateToken(q) => self.rate_token_due(q, now),
                Timer::WaitTimeout(conn) => self.end_wait(conn, NoticeKind::TimedOut),
                Timer::DeadlineSoon(conn) => self.end_wait(conn, NoticeKind::DeadlineSoon),
            }
            self.serve_waiters(now);
        }
        if self.next_flow_purge().is_some_and(|at| at <= now) {
            self.purge_flow_jobs(now);
        }
    }

    fn end_wait(&mut self, conn: ConnId, kind: NoticeKind) {
        if self.cancel_wait(conn) {
            self.notices.push(Notice { conn, kind });
        }
    }

    fn expire_lease(&mut self, id: JobId, now: Millis) {
        let job = self.jobs.get_mut(&id).expect("leased job exists");
        job.timeouts += 1;
        let (owner, q) = (job.owner, job.queue);
        if self.flows.by_engine.contains_key(&id) {
            return self.flow_lease_expired(id, owner, now);
        }
        let stamp = self.leave_state(id);
        self.lease_closed(id, owner, stamp, crate::LeaseClose::Expired, None);
        if self.retry_policy_of(id).is_some() {
            let how = crate::LeaseClose::Expired;
            self.attempt_failed(id, crate::Failure::new(now, owner, how, None), now);
        } else {
            self.enter_ready(id);
        }
        self.job_timeouts += 1;
        self.queue_mut(q).total_timeouts += 1;
        self.notices.push(Notice {
            conn: owner,
            kind: NoticeKind::LeaseExpired(id),
        });
    }
}
