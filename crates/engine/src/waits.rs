//! Reserving: picking the next job, blocking waits and serving them.

use crate::job::JobState;
use crate::notice::{Notice, NoticeKind};
use crate::queue::QueueId;
use crate::timers::Timer;
use crate::{ConnId, Engine, JobId, Millis, SAFETY_MARGIN_MS};

/// How long a reservation holds its job.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lease {
    /// The job's own time-to-run (beanstalkd).
    JobTtr,
    /// A fixed number of milliseconds (Gearman's CAN_DO_TIMEOUT).
    For(Millis),
    /// Until the holder finishes or disconnects (Gearman without a timeout).
    Unlimited,
}

/// How a blocked reserve is served when a job becomes ready.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WaitMode {
    /// Hand over the lowest (priority, id) job across the waiter's queues (beanstalkd).
    Best,
    /// Hand over a job from the first of the waiter's queues that has one (Gearman order).
    InOrder,
    /// Do not hand over anything; just wake the waiter once (Gearman PRE_SLEEP → NOOP).
    WakeOnly,
}

/// The result of [`Engine::reserve`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReserveOutcome {
    Reserved(JobId),
    /// Nothing ready and a lease of this connection ends within the safety margin.
    DeadlineSoon,
    /// Nothing ready and the timeout was zero.
    TimedOut,
    /// ([`WaitMode::WakeOnly`] only) a job could be taken now, so there is no need to sleep.
    Available,
    /// Nothing ready: the connection now waits, and will get a [`Notice`].
    Waiting,
}

/// Emptied queue lists kept for new waits; past it an ended wait's list is freed.
const SPARE_WAIT_LISTS: usize = 64;

/// A blocked reserve.
#[derive(Debug)]
pub(crate) struct Wait {
    pub(crate) queues: Vec<QueueId>,
    pub(crate) mode: WaitMode,
    pub(crate) lease: Lease,
    pub(crate) timeout_at: Option<Millis>,
    pub(crate) soon_at: Option<Millis>,
}

impl Engine {
    /// Takes a job from `queues`, or reports why not, or starts waiting.
    ///
    /// `timeout` is how long to wait (`None` = forever, `Some(0)` = not at all).
    /// With `warn_deadline`, a connection whose lease is within the safety margin gets
    /// [`ReserveOutcome::DeadlineSoon`] instead of waiting (only when nothing is ready).
    #[allow(clippy::too_many_arguments)]
    pub fn reserve(
        &mut self,
        conn: ConnId,
        queues: &[QueueId],
        mode: WaitMode,
        lease: Lease,
        timeout: Option<Millis>,
        warn_deadline: bool,
        now: Millis,
    ) -> ReserveOutcome {
        self.saw(now);
        if mode != WaitMode::WakeOnly {
            if let Some(id) = self.pick(queues, mode, now) {
                self.leave_state(id);
                self.lease_to(id, conn, lease, now);
                return ReserveOutcome::Reserved(id);
            }
        } else if self.pick(queues, WaitMode::InOrder, now).is_some() {
            return ReserveOutcome::Available;
        }
        let soonest = self.soonest_lease(conn);
        if warn_deadline {
            if let Some(due) = soonest {
                if due <= now + SAFETY_MARGIN_MS {
                    return ReserveOutcome::DeadlineSoon;
                }
            }
        }
        if timeout == Some(0) {
            return ReserveOutcome::TimedOut;
        }
        self.start_wait(
            conn,
            queues,
            mode,
            lease,
            timeout,
            warn_deadline,
            soonest,
            now,
        );
        ReserveOutcome::Waiting
    }

    /// Whether any of the queues has a job that could be handed out now.
    pub fn has_ready(&self, queues: &[QueueId], now: Millis) -> bool {
        self.pick(queues, WaitMode::InOrder, now).is_some()
    }

    #[allow(clippy::too_many_arguments)]
    pub(crate) fn start_wait(
        &mut self,
        conn: ConnId,
        queues: &[QueueId],
        mode: WaitMode,
        lease: Lease,
        timeout: Option<Millis>,
        warn_deadline: bool,
        soonest: Option<Millis>,
        now: Millis,
    ) {
        self.cancel_wait(conn);
        let timeout_at = timeout.map(|t| now + t);
        if let Some(at) = timeout_at {
            self.timers.add(at, Timer::WaitTimeout(conn));
        }
        let soon_at = soonest
            .filter(|_| warn_deadline)
            .map(|due| due.saturating_sub(SAFETY_MARGIN_MS));
        if let Some(at) = soon_at {
            self.timers.add(at, Timer::DeadlineSoon(conn));
        }
        for &q in queues {
            self.queue_mut(q).waiters.push_back(conn);
            // A ready job held back only by the rate: wake the wait when a token is due.
            self.arm_rate_timer(q, now);
        }
        let mut list = self.spare_wait_lists.pop().unwrap_or_default();
        list.extend_from_slice(queues);
        self.sessions.entry(conn).or_default().wait = Some(Wait {
            queues: list,
            mode,
            lease,
            timeout_at,
            soon_at,
        });
    }

    /// Ends a connection's wait, if it has one. Returns whether it was waiting.
    pub fn cancel_wait(&mut self, conn: ConnId) -> bool {
        match self.take_wait(conn) {
            Some(wait) => {
                self.keep_wait_list(wait.queues);
                true
            }
            None => false,
        }
    }

    /// Ends a connection's wait and returns it: its timers and its places in the queues'
    /// waiter lists are gone.
    fn take_wait(&mut self, conn: ConnId) -> Option<Wait> {
        let wait = self.sessions.get_mut(&conn).and_then(|s| s.wait.take())?;
        if let Some(at) = wait.timeout_at {
            self.timers.remove(at, Timer::WaitTimeout(conn));
        }
        if let Some(at) = wait.soon_at {
            self.timers.remove(at, Timer::DeadlineSoon(conn));
        }
        for &q in &wait.queues {
            let waiters = &mut self.queue_mut(q).waiters;
            if let Some(pos) = waiters.iter().position(|&c| c == conn) {
                waiters.remove(pos);
            }
        }
        Some(wait)
    }

    /// Keeps an ended wait's queue list for a later wait (a few: one per connection that
    /// waits at the same time is the most that can be in use).
    fn keep_wait_list(&mut self, mut list: Vec<QueueId>) {
        if self.spare_wait_lists.len() < SPARE_WAIT_LISTS {
            list.clear();
            self.spare_wait_lists.push(list);
        }
    }

    /// Whether the connection is blocked in a reserve.
    pub fn is_waiting(&self, conn: ConnId) -> bool {
        self.sessions.get(&conn).is_some_and(|s| s.wait.is_some())
    }

    /// Connections blocked in a reserve.
    pub fn waiting_count(&self) -> usize {
        self.sessions.values().filter(|s| s.wait.is_some()).count()
    }

    /// Leases a specific job that is not already leased (beanstalkd `reserve-job`).
    pub(crate) fn pick(&self, queues: &[QueueId], mode: WaitMode, now: Millis) -> Option<JobId> {
        if !self.handing_out {
            return None;
        }
        let mut best: Option<(u32, JobId)> = None;
        for &q in queues {
            let queue = self.queue(q);
            if queue.is_paused(now) || !queue.has_lease_room() || !queue.has_rate_token(now) {
                continue;
            }
            if let Some(head) = queue.head() {
                if mode == WaitMode::InOrder {
                    return Some(head.1);
                }
                if best.is_none_or(|b| head < b) {
                    best = Some(head);
                }
            }
        }
        best.map(|(_, id)| id)
    }

    /// Leases a job that has already been taken out of its previous state.
    pub(crate) fn lease_to(&mut self, id: JobId, conn: ConnId, lease: Lease, now: Millis) {
        let job = self.jobs.get_mut(&id).expect("leased job exists");
        let due = match lease {
            Lease::JobTtr => now + job.ttr.max(1) as Millis * 1000,
            Lease::For(ms) => now + ms.max(1),
            Lease::Unlimited => 0,
        };
        job.state = JobState::Reserved;
        job.owner = conn;
        job.due = due;
        job.reserves += 1;
        let q = job.queue;
        let queue = self.queue_mut(q);
        queue.reserved += 1;
        if let Some(bucket) = queue.rate.as_mut() {
            bucket.take(now);
        }
        if due > 0 {
            self.timers.add(due, Timer::Lease(id));
        }
        let stamp = self.new_lease_stamp(conn, id);
        self.sessions
            .entry(conn)
            .or_default()
            .reserved
            .insert(id, stamp);
    }

    /// Hands ready jobs to connections waiting on the queues that gained them.
    pub(crate) fn serve_waiters(&mut self, now: Millis) {
        while let Some(q) = self.to_serve.pop() {
            self.serve_queue(q, now);
        }
    }

    fn serve_queue(&mut self, q: QueueId, now: Millis) {
        while self.handing_out {
            let Some(queue) = self.queues[q as usize].as_ref() else {
                return;
            };
            if queue.ready.is_empty() || queue.is_paused(now) || !queue.has_lease_room() {
                return;
            }
            let Some(&conn) = queue.waiters.front() else {
                return;
            };
            if !queue.has_rate_token(now) {
                return self.arm_rate_timer(q, now);
            }
            let wait = self.take_wait(conn).expect("waiter has a wait");
            let (mode, lease) = (wait.mode, wait.lease);
            if mode == WaitMode::WakeOnly {
                self.keep_wait_list(wait.queues);
                self.notices.push(Notice {
                    conn,
                    kind: NoticeKind::Wake,
                });
                continue;
            }
            let id = self
                .pick(&wait.queues, mode, now)
                .expect("queue has a ready job");
            self.keep_wait_list(wait.queues);
            self.leave_state(id);
            self.lease_to(id, conn, lease, now);
            if self.is_flow_engine_job(id) {
                self.flow_fence_served(conn, id, lease, now);
            }
            self.notices.push(Notice {
                conn,
                kind: NoticeKind::Reserved(id),
            });
        }
    }
}
