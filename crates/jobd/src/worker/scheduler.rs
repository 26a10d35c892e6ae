//! The scheduling core of a jobd worker: per target, a FIFO of accepted jobs, a
//! concurrency limit and a pause flag, kept as queues of jobyard's engine. Unlike jobd, a
//! paused target starts nothing: it takes no new rows and holds accepted ones until
//! `continue`.
//!
//! A target is an engine queue of the same name (so beanstalkd `list-tubes`/`stats-tube`
//! and Gearman `status` show it when the worker runs inside `jobyard serve`); its
//! concurrency is the queue's lease limit, and `pause`/`continue` are the engine's
//! `pause_forever`/`resume`. A row the worker accepted is a job in the queue; starting it
//! is a reservation by the worker's engine session, which the engine allows only while the
//! queue is not paused and has lease room; its end is `finish` with the exit code and
//! signal, so engine watchers hear how it went.
//!
//! The jobs are not logged (MySQL is the truth about rows; a restarted worker reclaims
//! them from the table), and hold the row id in their attributes (`jobd:<id>`).

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use bytes::Bytes;
use jobyard_broker::{Broker, Mailbox, ProcessInfo, Txn};
use jobyard_engine::{
    ConnId, EndStatus, FailureHistory, JobEnd, JobId, Lease, Millis, NewJob, QueueId, RetryPolicy,
    WaitMode,
};

use super::targets::{in_status_order, Start, TargetState};
use crate::launch::Outcome;

/// One target and the worker's own jobs in it.
#[derive(Debug)]
struct Target {
    name: String,
    queue: QueueId,
    concurrency: u32,
    /// Accepted rows not started yet, oldest first: (engine job, row id).
    queued: VecDeque<(JobId, u64)>,
    /// Started jobs not ended yet.
    running: usize,
}

/// The worker's targets and their jobs: one engine session (the worker), one queue per
/// target. Errors are jobd's client-visible strings.
pub struct EngineScheduler {
    broker: Arc<Broker>,
    conn: ConnId,
    /// Until the worker takes it: where the engine wakes the worker when a queue it waits
    /// on has lease room again (see [`EngineScheduler::take_wakeups`]).
    mailbox: Option<Mailbox>,
    targets: Vec<Target>,
    /// Row id of each job this worker put, for [`EngineScheduler::row_of`].
    rows: HashMap<JobId, u64>,
    /// Its name in the broker's worker registry ([`EngineScheduler::publish_as`]).
    listed_as: Option<String>,
}

/// The worker registry's name for jobd.
const PROTOCOL: &str = "jobd";

impl EngineScheduler {
    /// A scheduler whose targets are queues of `broker` (the server's, when jobd runs
    /// inside `jobyard serve`).
    pub fn new(broker: Arc<Broker>) -> EngineScheduler {
        let (conn, mailbox) = broker.connect();
        EngineScheduler {
            broker,
            conn,
            mailbox: Some(mailbox),
            targets: Vec::new(),
            rows: HashMap::new(),
            listed_as: None,
        }
    }

    /// Lists this worker in the broker's worker registry as `id`, with its targets, the
    /// jobs it runs and their launcher processes (the operator's dashboard reads it).
    pub fn publish_as(&mut self, id: String) {
        self.listed_as = Some(id);
        self.publish_targets();
    }

    fn publish_targets(&self) {
        if let Some(id) = &self.listed_as {
            let targets = self.targets.iter().map(|t| t.name.clone()).collect();
            let now = Broker::now();
            self.broker
                .workers()
                .seen(PROTOCOL, id, now, |w| w.queues = targets);
        }
    }

    /// A scheduler on an engine of its own, in memory (standalone `jobyard jobd`).
    pub fn standalone() -> EngineScheduler {
        EngineScheduler::new(Broker::in_memory())
    }

    /// The broker the targets live in.
    pub fn broker(&self) -> &Arc<Broker> {
        &self.broker
    }

    /// The row an engine job of this worker stands for.
    pub fn row_of(&self, job: JobId) -> Option<u64> {
        self.rows.get(&job).copied()
    }

    fn get(&self, name: &str) -> Option<&Target> {
        self.targets.iter().find(|t| t.name == name)
    }

    fn get_mut(&mut self, name: &str) -> Option<&mut Target> {
        self.targets.iter_mut().find(|t| t.name == name)
    }

    fn is_paused(&self, t: &Target) -> bool {
        self.broker.lock().queue(t.queue).is_paused(Broker::now())
    }
}

impl Drop for EngineScheduler {
    fn drop(&mut self) {
        // The worker's jobs (queued or, if it is dropped mid-job, running) end with it and
        // the pins are released, so a server that outlives a worker keeps no trace of it:
        // no row id is left for another protocol to take.
        let mut txn = self.broker.lock();
        txn.cancel_wait(self.conn);
        for job in self.rows.keys() {
            txn.finish(self.conn, *job, JobEnd::deleted());
        }
        let now = Broker::now();
        for t in &self.targets {
            // A limit, a pause or a pin each keep a queue alive.
            txn.set_lease_limit(t.queue, 0, now);
            if txn.queue(t.queue).is_paused(now) {
                txn.resume(t.queue, now);
            }
            txn.unpin(t.queue);
        }
        drop(txn);
        self.broker.disconnect(self.conn);
        if let Some(id) = &self.listed_as {
            self.broker.workers().remove(PROTOCOL, id);
            for job in self.rows.keys() {
                self.broker.workers().process_ended(PROTOCOL, *job);
            }
        }
    }
}

/// Asks the engine to wake `conn` (once) when one of `queues`, where jobs of this worker are
/// held back by a lease another client holds or by a pause, can hand a job out again; an
/// empty list cancels the wait.
fn wait_for_room(txn: &mut Txn<'_>, conn: ConnId, queues: &[QueueId], now: Millis) {
    if queues.is_empty() {
        txn.cancel_wait(conn);
        return;
    }
    txn.reserve(
        conn,
        queues,
        WaitMode::WakeOnly,
        Lease::Unlimited,
        None,
        false,
        now,
    );
}

/// What the engine's watchers are told about a job's end.
fn job_end(outcome: Option<&Outcome>) -> JobEnd {
    let Some(o) = outcome else {
        return JobEnd::deleted();
    };
    JobEnd {
        status: if o.ok() {
            EndStatus::Ok
        } else {
            EndStatus::Failed
        },
        result: Bytes::from(o.stdout.clone().into_bytes()),
        error: (!o.stderr.is_empty()).then(|| Bytes::from(o.stderr.clone().into_bytes())),
        exit_code: o.code,
        signal: o.signal,
    }
}

impl EngineScheduler {
    /// Adds a target; `target '<t>' already added` if it exists.
    pub fn add(&mut self, target: &str, concurrency: u32) -> Result<(), String> {
        if self.get(target).is_some() {
            return Err(format!("target '{target}' already added"));
        }
        let queue = {
            let mut txn = self.broker.lock();
            let q = txn.queue_id_or_create(target.as_bytes());
            // Pinned: a target's queue (and its limit and pause) lives as long as the
            // target, jobs or none.
            txn.pin(q);
            txn.set_lease_limit(q, concurrency, Broker::now());
            q
        };
        self.targets.push(Target {
            name: target.to_string(),
            queue,
            concurrency,
            queued: VecDeque::new(),
            running: 0,
        });
        self.publish_targets();
        Ok(())
    }

    /// Removes an idle target; `target '<t>' not found`, `queue is not empty`.
    pub fn remove(&mut self, target: &str) -> Result<(), String> {
        let t = self
            .get(target)
            .ok_or_else(|| format!("target '{target}' not found"))?;
        if t.running + t.queued.len() > 0 {
            return Err("queue is not empty".into());
        }
        let q = t.queue;
        {
            let mut txn = self.broker.lock();
            let now = Broker::now();
            // The wait for room must not keep the queue alive; the other targets' stays.
            let others: Vec<QueueId> = self
                .targets
                .iter()
                .filter(|t| t.name != target && !t.queued.is_empty())
                .map(|t| t.queue)
                .collect();
            wait_for_room(&mut txn, self.conn, &others, now);
            if txn.queue(q).is_paused(now) {
                txn.resume(q, now);
            }
            txn.set_lease_limit(q, 0, now);
            txn.unpin(q);
        }
        self.targets.retain(|t| t.name != target);
        self.publish_targets();
        Ok(())
    }

    /// Changes a target's limit; takes effect for the next start.
    pub fn set_concurrency(&mut self, target: &str, concurrency: u32) -> Result<(), String> {
        let t = self
            .get_mut(target)
            .ok_or_else(|| format!("target '{target}' not found"))?;
        t.concurrency = concurrency;
        let q = t.queue;
        self.broker
            .lock()
            .set_lease_limit(q, concurrency, Broker::now());
        Ok(())
    }

    /// Whether this worker serves `target`.
    pub fn serves(&self, target: &str) -> bool {
        self.get(target).is_some()
    }

    /// Every target, in the order `status` lists them.
    pub fn targets(&self) -> Vec<TargetState> {
        let txn = self.broker.lock();
        let now = Broker::now();
        let mut out: Vec<TargetState> = self
            .targets
            .iter()
            .map(|t| TargetState {
                name: t.name.clone(),
                paused: txn.queue(t.queue).is_paused(now),
                concurrency: t.concurrency,
                length: t.running + t.queued.len(),
            })
            .collect();
        drop(txn);
        in_status_order(&mut out);
        out
    }

    /// Stops or resumes starting jobs of `target`.
    pub fn set_paused(&mut self, target: &str, paused: bool) {
        let Some(q) = self.get(target).map(|t| t.queue) else {
            return;
        };
        let mut txn = self.broker.lock();
        let now = Broker::now();
        match (paused, txn.queue(q).is_paused(now)) {
            (true, false) => txn.pause_forever(q),
            (false, true) => txn.resume(q, now),
            _ => {}
        }
    }

    /// How many more rows the target can take now (0 when paused or full).
    pub fn free(&self, target: &str) -> u64 {
        match self.get(target) {
            Some(t) if !self.is_paused(t) => {
                (t.concurrency as usize).saturating_sub(t.running + t.queued.len()) as u64
            }
            _ => 0,
        }
    }

    /// The target's limit of jobs at once (0 if it is not served): with
    /// [`EngineScheduler::free`], how full it is, which decides whether a fetch waits for
    /// more free slots.
    pub fn concurrency(&self, target: &str) -> u64 {
        self.get(target).map_or(0, |t| u64::from(t.concurrency))
    }

    /// Queues an accepted job (FIFO per target) as a job of the target's queue.
    pub fn push(&mut self, target: &str, id: u64) {
        let Some(q) = self.get(target).map(|t| t.queue) else {
            return;
        };
        let job = self
            .broker
            .lock()
            .put_job(
                NewJob {
                    queue: q,
                    body: Bytes::from(id.to_string()),
                    durable: false,
                    attrs: Some(Bytes::from(format!("jobd:{id}"))),
                    ..NewJob::default()
                },
                Broker::now(),
            )
            .id;
        self.rows.insert(job, id);
        if let Some(t) = self.get_mut(target) {
            t.queued.push_back((job, id));
        }
    }

    /// Jobs that may start now, each counted as running (an engine lease) from here on.
    pub fn take_startable(&mut self) -> Vec<Start> {
        let mut out = Vec::new();
        let mut held_back: Vec<QueueId> = Vec::new();
        let mut txn = self.broker.lock();
        let now = Broker::now();
        for t in &mut self.targets {
            while let Some(&(job, id)) = t.queued.front() {
                let queue = txn.queue(t.queue);
                if queue.is_paused(now) || !queue.has_lease_room() {
                    break;
                }
                t.queued.pop_front();
                if !txn.reserve_job(self.conn, job, Lease::Unlimited, now) {
                    // Taken or deleted through another protocol: the row is left as it
                    // is (startup reconciliation recovers it).
                    tracing::warn!(
                        id,
                        "jobd: the job's engine entry was taken by another client"
                    );
                    self.rows.remove(&job);
                    continue;
                }
                t.running += 1;
                out.push(Start {
                    id,
                    target: t.name.clone(),
                    job,
                });
            }
            if !t.queued.is_empty() {
                held_back.push(t.queue);
            }
        }
        wait_for_room(&mut txn, self.conn, &held_back, now);
        drop(txn);
        if let Some(id) = &self.listed_as {
            for s in &out {
                self.broker.workers().took(PROTOCOL, id, s.job, now);
            }
        }
        out
    }

    /// A started job's launcher is running as process `pid` with `command` (for the
    /// operator's view of running processes; the end is [`EngineScheduler::finished`]).
    pub fn launched(&mut self, start: &Start, pid: i32, command: Vec<String>) {
        if self.listed_as.is_some() {
            self.broker.workers().process_started(ProcessInfo {
                protocol: PROTOCOL,
                job: start.job,
                pid,
                label: format!("row {}", start.id),
                queue: start.target.clone(),
                started: Broker::now(),
                command,
            });
        }
    }

    /// A started job's launch ended and it waits to be launched again (a failed attempt
    /// under a retry policy): its process leaves the operator's view meanwhile.
    pub fn launch_ended(&self, start: &Start) {
        if self.listed_as.is_some() {
            self.broker.workers().process_ended(PROTOCOL, start.job);
        }
    }

    /// A started job ended: with the launcher's outcome, or `None` when it was dropped
    /// before its launcher ran. Frees its slot and tells the engine's watchers.
    pub fn finished(&mut self, start: &Start, outcome: Option<&Outcome>) {
        self.rows.remove(&start.job);
        if self.listed_as.is_some() {
            self.broker.workers().process_ended(PROTOCOL, start.job);
            self.broker.workers().job_ended(PROTOCOL, start.job);
        }
        self.broker
            .lock()
            .finish(self.conn, start.job, job_end(outcome));
        if let Some(t) = self.get_mut(&start.target) {
            t.running = t.running.saturating_sub(1);
        }
    }

    /// The retry policy of the target's queue, if it has one (read at each failure, so a
    /// policy changed meanwhile decides the next one).
    pub fn retry_policy(&self, target: &str) -> Option<RetryPolicy> {
        let q = self.get(target)?.queue;
        self.broker.lock().queue(q).policy().retry
    }

    /// The worker's engine session: the holder its failures name.
    pub fn session(&self) -> ConnId {
        self.conn
    }

    /// After a started job's last failed attempt under a policy with a dead-letter queue:
    /// a durable dead letter in `queue` (body: the row id, as the worker's own jobs have),
    /// with the failures, for an operator to see and discard (the row itself is written
    /// failed, as without a policy, once the log holds the dead letter). An associated
    /// function: the worker awaits the log without holding its state's lock.
    pub async fn put_dead_letter(
        broker: Arc<Broker>,
        start: &Start,
        queue: &[u8],
        history: FailureHistory,
    ) -> JobId {
        let (id, lsn) = {
            let mut txn = broker.lock();
            let q = txn.queue_id_or_create(queue);
            let job = NewJob {
                queue: q,
                body: Bytes::from(start.id.to_string()),
                ttr: 60,
                ..NewJob::default()
            };
            let id = txn.put_dead_letter(job, history, Broker::now());
            (id, txn.commit())
        };
        broker.wait_durable(lsn).await;
        id
    }

    /// Removes every queued (not started) job, for shutdown.
    pub fn drain_queued(&mut self) -> Vec<u64> {
        let mut ids = Vec::new();
        let mut txn = self.broker.lock();
        for t in &mut self.targets {
            for (job, id) in t.queued.drain(..) {
                txn.finish(self.conn, job, JobEnd::deleted());
                self.rows.remove(&job);
                ids.push(id);
            }
        }
        ids
    }

    /// Jobs running now, all targets.
    pub fn running(&self) -> usize {
        self.targets.iter().map(|t| t.running).sum()
    }

    /// Where the engine says that jobs held back may start now (a slot was freed by
    /// someone else, a pause ended): the worker calls `take_startable` on each notice.
    /// Taken once, by the worker; `None` after that.
    pub fn take_wakeups(&mut self) -> Option<Mailbox> {
        self.mailbox.take()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reserved(s: &EngineScheduler, target: &str) -> u32 {
        let txn = s.broker.lock();
        txn.queue(txn.queue_id(target.as_bytes()).unwrap()).reserved
    }

    fn ids(starts: &[Start]) -> Vec<u64> {
        starts.iter().map(|s| s.id).collect()
    }

    #[test]
    fn concurrency_is_the_queue_lease_limit_fifo_by_acceptance() {
        let mut s = EngineScheduler::standalone();
        s.add("a", 2).unwrap();
        assert_eq!(s.free("a"), 2);
        for id in [3, 1, 2] {
            s.push("a", id);
        }
        let started = s.take_startable();
        assert_eq!(ids(&started), vec![3, 1]);
        assert_eq!(reserved(&s, "a"), 2, "running jobs are engine leases");
        assert_eq!(s.free("a"), 0);
        assert!(s.take_startable().is_empty());
        s.finished(&started[0], None);
        assert_eq!(ids(&s.take_startable()), vec![2]);
        assert_eq!(s.remove("a").unwrap_err(), "queue is not empty");
    }

    #[test]
    fn a_lease_taken_by_another_client_counts_against_the_limit() {
        let mut s = EngineScheduler::standalone();
        s.add("a", 1).unwrap();
        let other = {
            let mut txn = s.broker.lock();
            let q = txn.queue_id(b"a").unwrap();
            let id = txn.put(q, 0, 0, 60, Bytes::from_static(b"x"), false, 0).id;
            assert!(txn.reserve_job(999, id, Lease::Unlimited, Broker::now()));
            id
        };
        s.push("a", 7);
        let mut wakeups = s.take_wakeups().unwrap();
        assert!(s.take_startable().is_empty(), "the engine's limit is full");
        assert_eq!(wakeups.try_recv(), None);
        s.broker.lock().finish(999, other, JobEnd::ok(Bytes::new()));
        assert_eq!(
            wakeups.try_recv(),
            Some(jobyard_engine::NoticeKind::Wake),
            "the freed lease wakes the worker"
        );
        assert_eq!(ids(&s.take_startable()), vec![7]);
    }

    #[test]
    fn pause_is_the_engine_pause_and_set_concurrency_the_lease_limit() {
        let mut s = EngineScheduler::standalone();
        s.add("a", 1).unwrap();
        s.push("a", 1);
        s.push("a", 2);
        s.set_paused("a", true);
        assert!(s.targets()[0].paused);
        assert_eq!(s.free("a"), 0);
        assert!(s.take_startable().is_empty());
        s.set_paused("a", false);
        s.set_concurrency("a", 2).unwrap();
        {
            let txn = s.broker.lock();
            assert_eq!(txn.queue(txn.queue_id(b"a").unwrap()).lease_limit, 2);
        }
        assert_eq!(ids(&s.take_startable()), vec![1, 2]);
        assert_eq!(s.running(), 2);
    }

    #[test]
    fn watchers_hear_the_exit_code_and_signal() {
        let mut s = EngineScheduler::standalone();
        s.add("a", 1).unwrap();
        s.push("a", 5);
        let start = s.take_startable().remove(0);
        let (watcher, mut mailbox) = s.broker.connect();
        let _ = s.take_wakeups();
        assert!(s.broker.lock().watch(watcher, start.job));
        let outcome = Outcome {
            code: None,
            signal: Some(libc::SIGTERM),
            stdout: "out".into(),
            stderr: String::new(),
        };
        s.finished(&start, Some(&outcome));
        let notice = mailbox.try_recv().expect("an end notice");
        let jobyard_engine::NoticeKind::Ended(id, end) = notice else {
            panic!("not an end: {notice:?}");
        };
        assert_eq!(id, start.job);
        assert_eq!(end.status, EndStatus::Failed);
        assert_eq!(end.signal, Some(libc::SIGTERM));
        assert_eq!(&end.result[..], b"out");
    }

    #[test]
    fn remove_and_drain_leave_no_queue_behind() {
        let mut s = EngineScheduler::standalone();
        s.add("a", 1).unwrap();
        s.push("a", 1);
        s.push("a", 2);
        let start = s.take_startable().remove(0);
        assert_eq!(s.drain_queued(), vec![2]);
        s.finished(&start, None);
        s.set_paused("a", true);
        s.remove("a").unwrap();
        assert!(s.broker.lock().queue_id(b"a").is_none());
    }

    #[test]
    fn a_dropped_scheduler_leaves_no_job_or_queue() {
        let broker = Broker::in_memory();
        let mut s = EngineScheduler::new(broker.clone());
        s.add("a", 1).unwrap();
        s.push("a", 1);
        s.push("a", 2);
        assert_eq!(s.take_startable().len(), 1);
        s.set_paused("a", true);
        drop(s);
        let txn = broker.lock();
        assert_eq!(txn.job_count(), 0);
        assert!(txn.queue_id(b"a").is_none());
    }

    #[test]
    fn errors_are_jobds() {
        let mut s = EngineScheduler::standalone();
        s.add("a", 1).unwrap();
        assert_eq!(s.add("a", 1).unwrap_err(), "target 'a' already added");
        assert_eq!(s.remove("x").unwrap_err(), "target 'x' not found");
        assert_eq!(
            s.set_concurrency("x", 1).unwrap_err(),
            "target 'x' not found"
        );
    }
}
