//! The engine: jobs, queues, leases and waits, and every operation on them.

use std::collections::{HashMap, HashSet};

use bytes::Bytes;

use crate::change::{Change, PutState};
use crate::job::{Job, JobState};
use crate::queue::{Queue, QueueId};
use crate::timers::{Timer, Timers};
use crate::{ConnId, JobId, Millis, SAFETY_MARGIN_MS, URGENT_PRIORITY};

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

/// Something the engine tells one connection, outside any command it sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Notice {
    pub conn: ConnId,
    pub kind: NoticeKind,
}

/// What a [`Notice`] says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NoticeKind {
    /// The connection's blocked reserve was given this job.
    Reserved(JobId),
    /// The connection's blocked reserve ran out of time.
    TimedOut,
    /// The connection's blocked reserve ended because one of its leases is about to run out.
    DeadlineSoon,
    /// A job the sleeping connection could take is ready (its wait has ended).
    Wake,
    /// The connection lost this job because its lease ran out.
    LeaseExpired(JobId),
}

/// Everything a new job is made of; [`Engine::put_job`] takes it.
#[derive(Clone, Debug)]
pub struct NewJob {
    pub queue: QueueId,
    pub pri: u32,
    /// Lease length in seconds for [`Lease::JobTtr`] reservations.
    pub ttr: u32,
    /// Not handed out before this wall-clock time (0 or past = ready now).
    pub ready_at: Millis,
    /// Seconds of delay to report in stats.
    pub delay: u32,
    pub body: Bytes,
    /// Optional key that no other live job of the queue may have.
    pub unique: Option<Bytes>,
    /// Whether the job is written to the log (and so survives a restart).
    pub durable: bool,
}

/// The result of [`Engine::put`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PutOutcome {
    pub id: JobId,
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

/// A blocked reserve.
#[derive(Debug)]
struct Wait {
    queues: Vec<QueueId>,
    mode: WaitMode,
    lease: Lease,
    timeout_at: Option<Millis>,
    soon_at: Option<Millis>,
}

#[derive(Debug, Default)]
struct Session {
    reserved: HashSet<JobId>,
    wait: Option<Wait>,
}

/// Per-state job counts across all queues.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    pub urgent: u64,
    pub ready: u64,
    pub reserved: u64,
    pub delayed: u64,
    pub buried: u64,
}

/// All jobs and queues, and every operation the protocols need.
///
/// Callers drain [`Engine::take_changes`] into the log and [`Engine::take_notices`] to
/// connections after each call, and call [`Engine::tick`] when [`Engine::next_deadline`] passes.
#[derive(Debug)]
pub struct Engine {
    /// Boxed so the table's buckets stay small: a hash table is up to half empty after it
    /// grows, and empty buckets of a 120-byte value cost more than the job's body.
    jobs: HashMap<JobId, Box<Job>>,
    queues: Vec<Option<Queue>>,
    free_queue_slots: Vec<QueueId>,
    by_name: HashMap<Bytes, QueueId>,
    /// Listing order of queues: creation order, a removed queue's slot taken by the last.
    order: Vec<QueueId>,
    sessions: HashMap<ConnId, Session>,
    timers: Timers,
    next_id: JobId,
    bury_seq: u64,
    changes: Vec<Change>,
    notices: Vec<Notice>,
    /// Queues that gained ready jobs since waiters were last served.
    to_serve: Vec<QueueId>,
    /// Jobs created since start (recovered ones not included).
    pub total_jobs: u64,
    /// Leases that ran out since start.
    pub job_timeouts: u64,
    live_bytes: u64,
    /// Unique keys of the jobs that have one, both ways.
    unique_of: HashMap<JobId, Bytes>,
    by_unique: HashMap<(QueueId, Bytes), JobId>,
}

impl Default for Engine {
    fn default() -> Self {
        Self::new()
    }
}

/// Log bytes a durable job costs besides its body and queue name: an estimate used only to
/// decide when compaction pays off.
const RECORD_OVERHEAD: u64 = 56;

impl Engine {
    pub fn new() -> Self {
        Engine {
            jobs: HashMap::new(),
            queues: Vec::new(),
            free_queue_slots: Vec::new(),
            by_name: HashMap::new(),
            order: Vec::new(),
            sessions: HashMap::new(),
            timers: Timers::default(),
            next_id: 1,
            bury_seq: 0,
            changes: Vec::new(),
            notices: Vec::new(),
            to_serve: Vec::new(),
            total_jobs: 0,
            job_timeouts: 0,
            live_bytes: 0,
            unique_of: HashMap::new(),
            by_unique: HashMap::new(),
        }
    }

    // ----- queues -------------------------------------------------------------------------

    /// The queue of that name, if it exists. Never creates one.
    pub fn queue_id(&self, name: &[u8]) -> Option<QueueId> {
        self.by_name.get(name).copied()
    }

    /// The queue of that name, created if needed.
    pub fn queue_id_or_create(&mut self, name: &[u8]) -> QueueId {
        if let Some(q) = self.queue_id(name) {
            return q;
        }
        let name = Bytes::copy_from_slice(name);
        let queue = Queue::new(name.clone());
        let q = match self.free_queue_slots.pop() {
            Some(q) => {
                self.queues[q as usize] = Some(queue);
                q
            }
            None => {
                self.queues.push(Some(queue));
                (self.queues.len() - 1) as QueueId
            }
        };
        self.by_name.insert(name, q);
        self.order.push(q);
        q
    }

    /// A queue by id. Panics on an id that does not exist: ids come from this engine.
    pub fn queue(&self, q: QueueId) -> &Queue {
        self.queues[q as usize].as_ref().expect("live queue id")
    }

    fn queue_mut(&mut self, q: QueueId) -> &mut Queue {
        self.queues[q as usize].as_mut().expect("live queue id")
    }

    /// Live queues in listing order.
    pub fn queues(&self) -> impl Iterator<Item = &Queue> + '_ {
        self.order.iter().map(|&q| self.queue(q))
    }

    pub fn queue_count(&self) -> usize {
        self.order.len()
    }

    /// Registers a producer (beanstalkd `use`) of the queue; keeps it alive.
    pub fn add_producer(&mut self, q: QueueId) {
        self.queue_mut(q).producers += 1;
    }
    pub fn remove_producer(&mut self, q: QueueId) {
        self.queue_mut(q).producers -= 1;
        self.drop_queue_if_unreferenced(q);
    }
    /// Registers a consumer (beanstalkd `watch`, Gearman `CAN_DO`); keeps it alive.
    pub fn add_consumer(&mut self, q: QueueId) {
        self.queue_mut(q).consumers += 1;
    }
    pub fn remove_consumer(&mut self, q: QueueId) {
        self.queue_mut(q).consumers -= 1;
        self.drop_queue_if_unreferenced(q);
    }
    /// Keeps a queue alive with no jobs or clients (beanstalkd's `default`, Gearman functions).
    pub fn pin(&mut self, q: QueueId) {
        self.queue_mut(q).pins += 1;
    }
    pub fn unpin(&mut self, q: QueueId) {
        self.queue_mut(q).pins -= 1;
        self.drop_queue_if_unreferenced(q);
    }

    fn drop_queue_if_unreferenced(&mut self, q: QueueId) {
        if !self.queue(q).is_unreferenced() {
            return;
        }
        let queue = self.queues[q as usize].take().expect("live queue id");
        if queue.paused_until > 0 {
            self.timers.remove(queue.paused_until, Timer::Unpause(q));
        }
        self.by_name.remove(&queue.name);
        if let Some(pos) = self.order.iter().position(|&x| x == q) {
            self.order.swap_remove(pos);
        }
        self.free_queue_slots.push(q);
    }

    /// Pauses handing out jobs from a queue for `secs` seconds (0 resumes now).
    pub fn pause(&mut self, q: QueueId, secs: u32, now: Millis) {
        let old = self.queue(q).paused_until;
        if old > 0 {
            self.timers.remove(old, Timer::Unpause(q));
        }
        let until = now + secs as Millis * 1000;
        let queue = self.queue_mut(q);
        queue.cmd_pause += 1;
        queue.pause_secs = secs;
        if secs == 0 {
            queue.paused_until = 0;
            queue.pause_secs = 0;
            self.to_serve.push(q);
        } else {
            queue.paused_until = until;
            self.timers.add(until, Timer::Unpause(q));
        }
        self.serve_waiters(now);
    }

    /// Whole seconds until a paused queue resumes (0 when not paused).
    pub fn pause_left_secs(&self, q: QueueId, now: Millis) -> u64 {
        self.queue(q).paused_until.saturating_sub(now) / 1000
    }

    // ----- jobs ---------------------------------------------------------------------------

    pub fn job(&self, id: JobId) -> Option<&Job> {
        self.jobs.get(&id).map(|job| &**job)
    }

    /// Every live job, in no particular order. For admin listings that must cover all
    /// queues at once (Gearman's `show jobs`, `prioritystatus`).
    pub fn jobs(&self) -> impl Iterator<Item = &Job> + '_ {
        self.jobs.values().map(|job| &**job)
    }

    pub fn job_count(&self) -> usize {
        self.jobs.len()
    }

    /// The id the next job will get.
    pub fn next_id(&self) -> JobId {
        self.next_id
    }

    /// Estimated bytes the durable jobs would take in a fresh log.
    pub fn live_bytes(&self) -> u64 {
        self.live_bytes
    }

    /// Creates a job. A delay of zero makes it ready at once.
    #[allow(clippy::too_many_arguments)]
    pub fn put(
        &mut self,
        q: QueueId,
        pri: u32,
        delay_secs: u32,
        ttr: u32,
        body: Bytes,
        durable: bool,
        now: Millis,
    ) -> PutOutcome {
        let ready_at = if delay_secs > 0 {
            now + delay_secs as Millis * 1000
        } else {
            0
        };
        self.put_job(
            NewJob {
                queue: q,
                pri,
                ttr,
                ready_at,
                delay: delay_secs,
                body,
                unique: None,
                durable,
            },
            now,
        )
    }

    /// Creates a job from its full description. The caller checks uniqueness first with
    /// [`Engine::find_unique`]; a key already in use is taken over by the new job.
    pub fn put_job(&mut self, job: NewJob, now: Millis) -> PutOutcome {
        let id = self.next_id;
        self.next_id += 1;
        self.total_jobs += 1;
        let state = if job.ready_at > now {
            PutState::Delayed(job.ready_at)
        } else {
            PutState::Ready
        };
        let q = job.queue;
        // A durable job keeps an exact-size copy and the record takes the caller's buffer
        // (freed once written); a job that is not logged takes the buffer itself.
        let (body, record_body): (Box<[u8]>, _) = if job.durable {
            (Box::from(&job.body[..]), Some(job.body))
        } else {
            (Vec::from(job.body).into_boxed_slice(), None)
        };
        if let Some(record_body) = record_body {
            self.changes.push(Change::Put {
                id,
                queue: self.queue(q).name.clone(),
                pri: job.pri,
                ttr: job.ttr,
                delay: job.delay,
                created: now,
                state,
                unique: job.unique.clone(),
                body: record_body,
            });
        }
        self.insert_job(
            id,
            q,
            job.pri,
            job.ttr,
            job.delay,
            now,
            state,
            body,
            job.durable,
        );
        if let Some(key) = job.unique {
            self.set_unique(id, q, key);
        }
        self.queue_mut(q).total_jobs += 1;
        self.serve_waiters(now);
        PutOutcome { id }
    }

    fn set_unique(&mut self, id: JobId, q: QueueId, key: Bytes) {
        if let Some(old) = self.by_unique.insert((q, key.clone()), id) {
            self.unique_of.remove(&old);
        }
        self.unique_of.insert(id, key);
    }

    /// The live job of this queue that has this unique key.
    pub fn find_unique(&self, q: QueueId, key: &[u8]) -> Option<JobId> {
        self.by_unique
            .get(&(q, Bytes::copy_from_slice(key)))
            .copied()
    }

    /// A job's unique key, if it has one.
    pub fn unique_of(&self, id: JobId) -> Option<&Bytes> {
        self.unique_of.get(&id)
    }

    #[allow(clippy::too_many_arguments)]
    fn insert_job(
        &mut self,
        id: JobId,
        q: QueueId,
        pri: u32,
        ttr: u32,
        delay: u32,
        created: Millis,
        state: PutState,
        body: Box<[u8]>,
        durable: bool,
    ) {
        if durable {
            self.live_bytes += self.record_cost(q, &body);
        }
        let job = Job {
            id,
            queue: q,
            pri,
            ttr,
            delay,
            state: JobState::Ready,
            due: 0,
            owner: 0,
            created,
            durable,
            reserves: 0,
            timeouts: 0,
            releases: 0,
            buries: 0,
            kicks: 0,
            body,
        };
        self.jobs.insert(id, Box::new(job));
        match state {
            PutState::Ready => self.enter_ready(id),
            PutState::Delayed(at) => self.enter_delayed(id, at),
            PutState::Buried => self.enter_buried(id),
        }
    }

    fn record_cost(&self, q: QueueId, body: &[u8]) -> u64 {
        body.len() as u64 + self.queue(q).name.len() as u64 + RECORD_OVERHEAD
    }

    /// Removes a job for good. Allowed unless someone else holds its lease.
    pub fn delete(&mut self, conn: ConnId, id: JobId) -> bool {
        match self.jobs.get(&id) {
            Some(j) if j.state != JobState::Reserved || j.owner == conn => {}
            _ => return false,
        }
        let job = self.remove_job(id);
        self.queue_mut(job.queue).cmd_delete += 1;
        if job.durable {
            self.changes.push(Change::Delete { id });
        }
        self.drop_queue_if_unreferenced(job.queue);
        true
    }

    /// Takes a job out of the engine. The caller drops its queue if that emptied it.
    fn remove_job(&mut self, id: JobId) -> Job {
        self.leave_state(id);
        let job = *self.jobs.remove(&id).expect("removed job exists");
        if let Some(key) = self.unique_of.remove(&id) {
            self.by_unique.remove(&(job.queue, key));
        }
        if job.durable {
            self.live_bytes -= self.record_cost(job.queue, &job.body);
        }
        job
    }

    /// Gives a leased job back, ready now or after a delay, with a new priority.
    pub fn release(
        &mut self,
        conn: ConnId,
        id: JobId,
        pri: u32,
        delay_secs: u32,
        now: Millis,
    ) -> bool {
        if !self.holds(conn, id) {
            return false;
        }
        self.leave_state(id);
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
        if !self.holds(conn, id) {
            return false;
        }
        self.leave_state(id);
        let job = self.jobs.get_mut(&id).expect("held job exists");
        job.pri = pri;
        job.buries += 1;
        let durable = job.durable;
        self.enter_buried(id);
        if durable {
            self.changes.push(Change::Bury { id, pri });
        }
        true
    }

    /// Restarts a lease's clock with the job's full time-to-run.
    pub fn touch(&mut self, conn: ConnId, id: JobId, now: Millis) -> bool {
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

    /// Kicks up to `bound` jobs of a queue: buried ones (oldest first) if it has any,
    /// otherwise delayed ones (soonest first). Returns how many were kicked.
    pub fn kick(&mut self, q: QueueId, bound: u64, now: Millis) -> u64 {
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

    /// The next job a reserve on this queue would get (pause ignored).
    pub fn peek_ready(&self, q: QueueId) -> Option<&Job> {
        self.queue(q).ready.first().map(|(_, id)| &*self.jobs[id])
    }
    /// The delayed job of this queue that becomes ready soonest.
    pub fn peek_delayed(&self, q: QueueId) -> Option<&Job> {
        self.queue(q).delayed.first().map(|(_, id)| &*self.jobs[id])
    }
    /// The job of this queue that was buried longest ago.
    pub fn peek_buried(&self, q: QueueId) -> Option<&Job> {
        self.queue(q).buried.first().map(|(_, id)| &*self.jobs[id])
    }

    /// Whole seconds until a delayed job is ready or a lease ends (0 otherwise).
    pub fn time_left_secs(&self, job: &Job, now: Millis) -> u64 {
        match job.state {
            JobState::Delayed | JobState::Reserved => job.due.saturating_sub(now) / 1000,
            _ => 0,
        }
    }

    // ----- reserving ----------------------------------------------------------------------

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
    fn start_wait(
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
        }
        self.sessions.entry(conn).or_default().wait = Some(Wait {
            queues: queues.to_vec(),
            mode,
            lease,
            timeout_at,
            soon_at,
        });
    }

    /// Ends a connection's wait, if it has one. Returns whether it was waiting.
    pub fn cancel_wait(&mut self, conn: ConnId) -> bool {
        let Some(wait) = self.sessions.get_mut(&conn).and_then(|s| s.wait.take()) else {
            return false;
        };
        if let Some(at) = wait.timeout_at {
            self.timers.remove(at, Timer::WaitTimeout(conn));
        }
        if let Some(at) = wait.soon_at {
            self.timers.remove(at, Timer::DeadlineSoon(conn));
        }
        for q in wait.queues {
            let waiters = &mut self.queue_mut(q).waiters;
            if let Some(pos) = waiters.iter().position(|&c| c == conn) {
                waiters.remove(pos);
            }
        }
        true
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
    pub fn reserve_job(&mut self, conn: ConnId, id: JobId, lease: Lease, now: Millis) -> bool {
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
        self.cancel_wait(conn);
        if let Some(session) = self.sessions.remove(&conn) {
            for id in session.reserved {
                self.leave_state_unowned(id);
                self.enter_ready(id);
            }
        }
        self.serve_waiters(now);
    }

    /// Jobs this connection holds a lease on.
    pub fn held_by(&self, conn: ConnId) -> impl Iterator<Item = JobId> + '_ {
        self.sessions
            .get(&conn)
            .into_iter()
            .flat_map(|s| s.reserved.iter().copied())
    }

    fn holds(&self, conn: ConnId, id: JobId) -> bool {
        self.jobs
            .get(&id)
            .is_some_and(|j| j.state == JobState::Reserved && j.owner == conn)
    }

    fn soonest_lease(&self, conn: ConnId) -> Option<Millis> {
        let session = self.sessions.get(&conn)?;
        session
            .reserved
            .iter()
            .map(|id| self.jobs[id].due)
            .filter(|&due| due > 0)
            .min()
    }

    /// The job a reserve on these queues would get now, if any.
    fn pick(&self, queues: &[QueueId], mode: WaitMode, now: Millis) -> Option<JobId> {
        let mut best: Option<(u32, JobId)> = None;
        for &q in queues {
            let queue = self.queue(q);
            if queue.is_paused(now) {
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
    fn lease_to(&mut self, id: JobId, conn: ConnId, lease: Lease, now: Millis) {
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
        self.queue_mut(q).reserved += 1;
        if due > 0 {
            self.timers.add(due, Timer::Lease(id));
        }
        self.sessions.entry(conn).or_default().reserved.insert(id);
    }

    /// Hands ready jobs to connections waiting on the queues that gained them.
    fn serve_waiters(&mut self, now: Millis) {
        while let Some(q) = self.to_serve.pop() {
            self.serve_queue(q, now);
        }
    }

    fn serve_queue(&mut self, q: QueueId, now: Millis) {
        loop {
            let Some(queue) = self.queues[q as usize].as_ref() else {
                return;
            };
            if queue.ready.is_empty() || queue.is_paused(now) {
                return;
            }
            let Some(&conn) = queue.waiters.front() else {
                return;
            };
            let wait = self.sessions[&conn]
                .wait
                .as_ref()
                .expect("waiter has a wait");
            let (mode, lease) = (wait.mode, wait.lease);
            let queues = wait.queues.clone();
            self.cancel_wait(conn);
            if mode == WaitMode::WakeOnly {
                self.notices.push(Notice {
                    conn,
                    kind: NoticeKind::Wake,
                });
                continue;
            }
            let id = self
                .pick(&queues, mode, now)
                .expect("queue has a ready job");
            self.leave_state(id);
            self.lease_to(id, conn, lease, now);
            self.notices.push(Notice {
                conn,
                kind: NoticeKind::Reserved(id),
            });
        }
    }

    // ----- state bookkeeping --------------------------------------------------------------

    fn enter_ready(&mut self, id: JobId) {
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

    fn enter_delayed(&mut self, id: JobId, at: Millis) {
        let job = self.jobs.get_mut(&id).expect("job exists");
        job.state = JobState::Delayed;
        job.due = at;
        let q = job.queue;
        self.queue_mut(q).delayed.insert((at, id));
        self.timers.add(at, Timer::Delay(id));
    }

    fn enter_buried(&mut self, id: JobId) {
        self.bury_seq += 1;
        let seq = self.bury_seq;
        let job = self.jobs.get_mut(&id).expect("job exists");
        job.state = JobState::Buried;
        job.due = seq;
        let q = job.queue;
        self.queue_mut(q).buried.insert((seq, id));
    }

    /// Takes a job out of whatever structure its state keeps it in.
    fn leave_state(&mut self, id: JobId) {
        let job = &self.jobs[&id];
        if job.state == JobState::Reserved {
            let owner = job.owner;
            if let Some(s) = self.sessions.get_mut(&owner) {
                s.reserved.remove(&id);
            }
        }
        self.leave_state_unowned(id);
    }

    /// As [`Self::leave_state`], for when the owner's session is already gone.
    fn leave_state_unowned(&mut self, id: JobId) {
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
                self.queue_mut(q).reserved -= 1;
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

    // ----- time ---------------------------------------------------------------------------

    /// When [`Engine::tick`] next has work to do.
    pub fn next_deadline(&self) -> Option<Millis> {
        self.timers.next()
    }

    /// Does everything that was due at or before `now`: delayed jobs become ready, leases
    /// end, pauses end, waits time out.
    pub fn tick(&mut self, now: Millis) {
        while let Some((_, timer)) = self.timers.pop_due(now) {
            match timer {
                Timer::Delay(id) => {
                    self.leave_state(id);
                    self.enter_ready(id);
                }
                Timer::Lease(id) => self.expire_lease(id),
                Timer::Unpause(q) => {
                    let queue = self.queue_mut(q);
                    queue.paused_until = 0;
                    queue.pause_secs = 0;
                    self.to_serve.push(q);
                    self.drop_queue_if_unreferenced(q);
                }
                Timer::WaitTimeout(conn) => self.end_wait(conn, NoticeKind::TimedOut),
                Timer::DeadlineSoon(conn) => self.end_wait(conn, NoticeKind::DeadlineSoon),
            }
            self.serve_waiters(now);
        }
    }

    fn end_wait(&mut self, conn: ConnId, kind: NoticeKind) {
        if self.cancel_wait(conn) {
            self.notices.push(Notice { conn, kind });
        }
    }

    fn expire_lease(&mut self, id: JobId) {
        let job = self.jobs.get_mut(&id).expect("leased job exists");
        job.timeouts += 1;
        let owner = job.owner;
        self.leave_state(id);
        self.enter_ready(id);
        self.job_timeouts += 1;
        self.notices.push(Notice {
            conn: owner,
            kind: NoticeKind::LeaseExpired(id),
        });
    }

    // ----- output -------------------------------------------------------------------------

    /// Takes the changes made since the last call, in order, for the log.
    pub fn take_changes(&mut self) -> std::vec::Drain<'_, Change> {
        self.changes.drain(..)
    }

    /// Whether there are changes waiting for the log.
    pub fn has_changes(&self) -> bool {
        !self.changes.is_empty()
    }

    /// Takes the notices for connections produced since the last call.
    pub fn take_notices(&mut self) -> std::vec::Drain<'_, Notice> {
        self.notices.drain(..)
    }

    /// Job counts by state across all queues.
    pub fn counts(&self) -> Counts {
        let mut c = Counts::default();
        for queue in self.queues() {
            c.urgent += queue.urgent as u64;
            c.ready += queue.ready.len() as u64;
            c.reserved += queue.reserved as u64;
            c.delayed += queue.delayed.len() as u64;
            c.buried += queue.buried.len() as u64;
        }
        c
    }

    // ----- recovery -----------------------------------------------------------------------

    /// Applies one change read back from the log. Reservations are not logged, so a job
    /// comes back ready, delayed or buried; changes to unknown jobs are ignored.
    pub fn replay(&mut self, change: Change) {
        match change {
            Change::Put {
                id,
                queue,
                pri,
                ttr,
                delay,
                created,
                state,
                unique,
                body,
            } => {
                if self.jobs.contains_key(&id) {
                    let old = self.remove_job(id);
                    self.drop_queue_if_unreferenced(old.queue);
                }
                let q = self.queue_id_or_create(&queue);
                self.insert_job(
                    id,
                    q,
                    pri,
                    ttr,
                    delay,
                    created,
                    state,
                    Box::from(&body[..]),
                    true,
                );
                if let Some(key) = unique {
                    self.set_unique(id, q, key);
                }
                self.next_id = self.next_id.max(id + 1);
            }
            Change::Delete { id } => {
                if self.jobs.contains_key(&id) {
                    let old = self.remove_job(id);
                    self.drop_queue_if_unreferenced(old.queue);
                }
            }
            Change::Release { id, pri, ready_at } => {
                if self.jobs.contains_key(&id) {
                    self.leave_state(id);
                    let job = self.jobs.get_mut(&id).expect("checked");
                    job.pri = pri;
                    if ready_at > 0 {
                        self.enter_delayed(id, ready_at);
                    } else {
                        self.enter_ready(id);
                    }
                }
            }
            Change::Bury { id, pri } => {
                if self.jobs.contains_key(&id) {
                    self.leave_state(id);
                    self.jobs.get_mut(&id).expect("checked").pri = pri;
                    self.enter_buried(id);
                }
            }
            Change::Kick { id } => {
                if self.jobs.contains_key(&id) {
                    self.leave_state(id);
                    self.enter_ready(id);
                }
            }
        }
        self.to_serve.clear();
    }

    /// Makes sure ids continue above `next` (recovery reads it from a snapshot header).
    pub fn raise_next_id(&mut self, next: JobId) {
        self.next_id = self.next_id.max(next);
    }

    /// Every durable job as a `Put` change, such that replaying them rebuilds the same
    /// queues: buried jobs come in burial order, leased jobs come back ready.
    pub fn snapshot(&self) -> Vec<Change> {
        self.snapshot_of(&self.snapshot_order())
    }

    /// The ids of every job, in the order a snapshot lists them: buried jobs first in
    /// burial order (replay rebuilds that order from it), then the rest. With
    /// [`Engine::snapshot_of`] a snapshot can be copied a chunk at a time, letting other
    /// work run between chunks; jobs gone by then are skipped.
    ///
    /// Reads only the queues' buried sets and the job table's keys, never the jobs
    /// themselves: the caller holds the engine lock meanwhile, and touching a million
    /// boxed jobs would stall every connection for a tenth of a second.
    pub fn snapshot_order(&self) -> Vec<JobId> {
        let mut ids = Vec::with_capacity(self.jobs.len());
        for queue in self.queues() {
            ids.extend(queue.buried.iter().map(|&(_, id)| id));
        }
        if ids.is_empty() {
            ids.extend(self.jobs.keys().copied());
        } else {
            let listed: HashSet<JobId> = ids.iter().copied().collect();
            ids.extend(self.jobs.keys().filter(|id| !listed.contains(id)).copied());
        }
        ids
    }

    /// `Put` changes for those of `ids` that still exist and are durable, each in its
    /// current state (leased jobs as ready).
    pub fn snapshot_of(&self, ids: &[JobId]) -> Vec<Change> {
        ids.iter()
            .filter_map(|id| self.jobs.get(id))
            .filter(|job| job.durable)
            .map(|job| {
                let state = match job.state {
                    JobState::Buried => PutState::Buried,
                    JobState::Delayed => PutState::Delayed(job.due),
                    JobState::Ready | JobState::Reserved => PutState::Ready,
                };
                self.put_change(job, state)
            })
            .collect()
    }

    fn put_change(&self, job: &Job, state: PutState) -> Change {
        Change::Put {
            id: job.id,
            queue: self.queue(job.queue).name.clone(),
            pri: job.pri,
            ttr: job.ttr,
            delay: job.delay,
            created: job.created,
            state,
            unique: self.unique_of.get(&job.id).cloned(),
            body: Bytes::copy_from_slice(&job.body),
        }
    }
}
