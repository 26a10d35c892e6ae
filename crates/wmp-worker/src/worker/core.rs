//! The worker's protocol state (spec §3.7) as a plain state machine: events in
//! (link up, message, job finished, clock), frames out. No sockets and no clock of its own,
//! so every rule — locks and their timeout, READY on free capacity, late TAKE, reject while
//! stopping — is unit-tested directly.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use bytes::Bytes;

use jobyard_wmp_wire::encode;
use jobyard_wmp_wire::message::*;

use super::{Job, Outcome, WorkerConfig};

pub use crate::link::LinkId;

/// A message to send: on which link, which frames.
pub type Out = (LinkId, Vec<Bytes>);

/// Identifies one hand-out: (manager, job, attempt).
pub type JobKey = (String, u64, u64);

/// A job the driver must start now.
#[derive(Debug)]
pub struct Start {
    /// Its key, to report the outcome with.
    pub key: JobKey,
    /// What the handler gets.
    pub job: Job,
}

#[derive(Debug)]
struct LinkState {
    up: bool,
    backoff: Duration,
    retry_at: Option<Instant>,
}

#[derive(Debug)]
struct Lock {
    link: LinkId,
    deadline: Instant,
    /// Sent as a hot GIVE (after a DONE, answering no WAKE): a NO to it is followed by
    /// READY on its socket (docs/wmp.md, worker rule 5).
    hot: bool,
}

#[derive(Debug)]
struct Running {
    link: LinkId,
    path: Path,
    queue: String,
    /// The TAKE said `more=1`: the manager had another job ready for us.
    more: bool,
    /// The TAKE answered a hot GIVE (bounds hot-GIVE streaks when several managers are up).
    from_hot: bool,
}

/// Counters a worker reports when it stops.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct WorkerStats {
    /// Jobs run to an outcome (any status).
    pub jobs_done: u64,
    /// DONE status=ok sent.
    pub ok: u64,
    /// DONE status=fail sent.
    pub failed: u64,
    /// DONE status=reject sent (late TAKE without a free slot, wrong queue, stopping).
    pub rejected: u64,
    /// Locks that timed out waiting for TAKE or NO.
    pub locks_expired: u64,
    /// Messages dropped as malformed, unknown or unexpected.
    pub dropped: u64,
}

/// The worker's protocol state.
pub struct Core {
    capacity: usize,
    roles: Option<Vec<String>>,
    name: Option<String>,
    lock_timeout: Duration,
    retry_min: Duration,
    retry_max: Duration,
    links: Vec<LinkState>,
    locks: HashMap<String, Lock>,
    running: HashMap<JobKey, Running>,
    next_lock: u64,
    stopping: bool,
    rng: u64,
    /// Counters.
    pub stats: WorkerStats,
}

impl Core {
    /// A fresh state for `links` manager connections, all down.
    pub fn new(cfg: &WorkerConfig, roles: Option<Vec<String>>, links: usize) -> Core {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0);
        let seed = (std::process::id() as u64) ^ nanos ^ 0x9E37_79B9_7F4A_7C15;
        Core {
            capacity: cfg.concurrency.max(1),
            roles,
            name: cfg.name.clone(),
            lock_timeout: cfg.lock_timeout,
            retry_min: cfg.ready_retry_min,
            retry_max: cfg.ready_retry_max.max(cfg.ready_retry_min),
            links: (0..links)
                .map(|_| LinkState {
                    up: false,
                    backoff: cfg.ready_retry_min,
                    retry_at: None,
                })
                .collect(),
            locks: HashMap::new(),
            running: HashMap::new(),
            next_lock: 0,
            stopping: false,
            rng: seed | 1,
            stats: WorkerStats::default(),
        }
    }

    /// Slots neither running a job nor locked for a manager.
    pub fn free(&self) -> usize {
        self.capacity
            .saturating_sub(self.running.len() + self.locks.len())
    }

    /// Jobs running now.
    pub fn running(&self) -> usize {
        self.running.len()
    }

    /// Open locks now.
    pub fn locks(&self) -> usize {
        self.locks.len()
    }

    /// True once stopping and nothing is running or locked: the driver may exit.
    pub fn finished(&self) -> bool {
        self.stopping && self.running.is_empty() && self.locks.is_empty()
    }

    /// Stop asking for work; later TAKEs are rejected; running jobs finish.
    pub fn stop(&mut self) {
        self.stopping = true;
    }

    /// A connection (re)opened: announce ourselves there if we have room.
    pub fn link_up(&mut self, link: LinkId, now: Instant) -> Vec<Out> {
        self.links[link].up = true;
        self.links[link].backoff = self.retry_min;
        let mut out = Vec::new();
        self.ready_on(link, now, &mut out);
        out
    }

    /// A connection was lost: nothing to send there until it is back.
    pub fn link_down(&mut self, link: LinkId) {
        self.links[link].up = false;
        self.links[link].retry_at = None;
    }

    /// One decoded message from `link`.
    pub fn on_message(
        &mut self,
        link: LinkId,
        msg: Message,
        now: Instant,
    ) -> (Vec<Out>, Option<Start>) {
        let mut out = Vec::new();
        // Any valid message shows the manager is there: READY retries start over.
        if let Some(l) = self.links.get_mut(link) {
            l.backoff = self.retry_min;
            if l.retry_at.is_some() {
                l.retry_at = Some(now + self.retry_min);
            }
        }
        let free_before = self.free();
        let mut start = None;
        let mut hot_no = false;
        match msg.command {
            Command::Wake(wake) => self.on_wake(link, msg.path, wake, now, &mut out),
            Command::Take(take) => {
                start = self.on_take(link, msg.path, take, msg.extra, now, &mut out)
            }
            Command::No(no) => {
                if let Some(lock) = self.locks.get(&no.lock) {
                    if lock.link == link {
                        hot_no = lock.hot;
                        self.locks.remove(&no.lock);
                    }
                }
            }
            // CANCEL is advisory (spec §3.9); handlers are not interruptible here, so the
            // job runs to its outcome and the manager ignores a DONE it no longer wants.
            Command::Cancel(_) => {}
            _ => self.stats.dropped += 1,
        }
        let announced = self.after_capacity_change(free_before, now, &mut out);
        if hot_no && !announced {
            // The queue ran dry under a hot GIVE: this manager holds no READY of ours
            // unless we send one, and only a remembered READY gets the next WAKE.
            self.ready_on(link, now, &mut out);
        }
        (out, start)
    }

    fn on_wake(&mut self, link: LinkId, path: Path, wake: Wake, now: Instant, out: &mut Vec<Out>) {
        if self.stopping || self.free() == 0 {
            return;
        }
        if let Some(q) = &wake.queue {
            if !self.serves(q) {
                return;
            }
        }
        self.send_give(link, path, wake.queue, false, now, out);
    }

    /// Locks a free slot for the manager on `link` and asks it for a job.
    fn send_give(
        &mut self,
        link: LinkId,
        path: Path,
        queue: Option<String>,
        hot: bool,
        now: Instant,
        out: &mut Vec<Out>,
    ) {
        self.next_lock += 1;
        let token = self.next_lock.to_string();
        self.locks.insert(
            token.clone(),
            Lock {
                link,
                deadline: now + self.lock_timeout,
                hot,
            },
        );
        let give = Give {
            lock: token,
            roles: self.roles.clone(),
            queue,
        };
        out.push((link, encode(&Message::new(path, Command::Give(give)))));
    }

    fn on_take(
        &mut self,
        link: LinkId,
        path: Path,
        take: Take,
        extra: jobyard_wmp_wire::Headers,
        now: Instant,
        out: &mut Vec<Out>,
    ) -> Option<Start> {
        let (had_lock, from_hot) = match self.locks.get(&take.lock) {
            Some(lock) if lock.link == link => {
                let hot = lock.hot;
                self.locks.remove(&take.lock);
                (true, hot)
            }
            _ => (false, false),
        };
        let key: JobKey = (take.manager.clone(), take.job, take.attempt);
        if self.running.contains_key(&key) {
            // The same hand-out twice (a duplicated TAKE): it is already running.
            self.stats.dropped += 1;
            return None;
        }
        let can_run = !self.stopping && self.serves(&take.queue) && (had_lock || self.free() > 0);
        if !can_run {
            self.stats.rejected += 1;
            let done = Done {
                manager: take.manager,
                job: take.job,
                attempt: take.attempt,
                status: Status::Reject,
                error: None,
                result: Bytes::new(),
            };
            out.push((link, encode(&Message::new(path, Command::Done(done)))));
            return None;
        }
        self.running.insert(
            key.clone(),
            Running {
                link,
                path: path.clone(),
                queue: take.queue.clone(),
                more: extra.get("more") == Some("1"),
                from_hot,
            },
        );
        // RFC "Multiple jobs": ask this manager for the next one before processing.
        if self.free() > 0 && !self.stopping {
            self.send_ready(link, now, out);
        }
        Some(Start {
            key,
            job: Job {
                manager: take.manager,
                job: take.job,
                attempt: take.attempt,
                queue: take.queue,
                timeout_ms: take.timeout_ms,
                body: take.body,
                extra,
            },
        })
    }

    /// A handler finished: report it on the link and path the TAKE came from.
    pub fn job_finished(&mut self, key: JobKey, outcome: Outcome, now: Instant) -> Vec<Out> {
        let mut out = Vec::new();
        let free_before = self.free();
        let Some(run) = self.running.remove(&key) else {
            return out;
        };
        self.stats.jobs_done += 1;
        let (status, error, result) = match outcome {
            Outcome::Ok(result) => {
                self.stats.ok += 1;
                (Status::Ok, None, result)
            }
            Outcome::Fail { error, message } => {
                self.stats.failed += 1;
                (Status::Fail, error, message)
            }
            Outcome::Reject => {
                self.stats.rejected += 1;
                (Status::Reject, None, Bytes::new())
            }
        };
        let (manager, job, attempt) = key;
        let done = Done {
            manager,
            job,
            attempt,
            status,
            error,
            result,
        };
        out.push((
            run.link,
            encode(&Message::new(run.path.clone(), Command::Done(done))),
        ));
        // After a reject the job went back to the queue: asking at once would likely fetch
        // the very job this worker just refused.
        if status != Status::Reject && self.hot_give_allowed(&run) {
            self.send_give(run.link, run.path, Some(run.queue), true, now, &mut out);
        }
        self.after_capacity_change(free_before, now, &mut out);
        out
    }

    /// Docs/wmp.md worker rule 5: after a DONE, ask the same manager for the next job at
    /// once (a hot GIVE, three messages per job instead of five) when its TAKE said `more=1`
    /// and a slot is free. When another manager may be reachable (another socket is up, or
    /// the job came through a device, which fans READY out to several), a job that came
    /// from a hot GIVE is followed by READY instead, so one busy manager cannot keep the
    /// worker from the others.
    fn hot_give_allowed(&self, run: &Running) -> bool {
        let other_managers = !run.path.is_empty()
            || self
                .links
                .iter()
                .enumerate()
                .any(|(i, l)| i != run.link && l.up);
        run.more
            && !self.stopping
            && self.free() > 0
            && self.links.get(run.link).is_some_and(|l| l.up)
            && !(run.from_hot && other_managers)
    }

    /// The clock moved: expire locks, retry READY where due.
    pub fn tick(&mut self, now: Instant) -> Vec<Out> {
        let mut out = Vec::new();
        let free_before = self.free();
        let before = self.locks.len();
        self.locks.retain(|_, l| l.deadline > now);
        self.stats.locks_expired += (before - self.locks.len()) as u64;
        self.after_capacity_change(free_before, now, &mut out);
        if self.free() > 0 && !self.stopping {
            for link in 0..self.links.len() {
                let l = &self.links[link];
                if l.up && l.retry_at.is_some_and(|t| t <= now) {
                    let next = (l.backoff * 2).min(self.retry_max);
                    self.send_ready(link, now, &mut out);
                    self.links[link].backoff = next;
                    let at = now + self.jitter(next);
                    self.links[link].retry_at = Some(at);
                }
            }
        }
        out
    }

    /// The next instant [`Core::tick`] has something to do, if any.
    pub fn next_deadline(&self) -> Option<Instant> {
        let locks = self.locks.values().map(|l| l.deadline).min();
        let retries = if self.free() > 0 && !self.stopping {
            self.links
                .iter()
                .filter(|l| l.up)
                .filter_map(|l| l.retry_at)
                .min()
        } else {
            None
        };
        match (locks, retries) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    fn serves(&self, queue: &str) -> bool {
        match &self.roles {
            None => true,
            Some(roles) => roles.iter().any(|r| r == queue),
        }
    }

    /// Free capacity rose from none: every manager may have forgotten us, tell them all.
    /// True when READY went out.
    fn after_capacity_change(
        &mut self,
        free_before: usize,
        now: Instant,
        out: &mut Vec<Out>,
    ) -> bool {
        if free_before == 0 && self.free() > 0 && !self.stopping {
            for link in 0..self.links.len() {
                self.ready_on(link, now, out);
            }
            return true;
        }
        false
    }

    fn ready_on(&mut self, link: LinkId, now: Instant, out: &mut Vec<Out>) {
        if self.links[link].up && self.free() > 0 && !self.stopping {
            self.send_ready(link, now, out);
        }
    }

    fn send_ready(&mut self, link: LinkId, now: Instant, out: &mut Vec<Out>) {
        let ready = Ready {
            roles: self.roles.clone(),
            worker: self.name.clone(),
        };
        out.push((
            link,
            encode(&Message::new(Vec::new(), Command::Ready(ready))),
        ));
        let l = &mut self.links[link];
        let wait = l.backoff;
        let at = now + self.jitter(wait);
        self.links[link].retry_at = Some(at);
    }

    /// ±20 % jitter so that many workers restarted together do not retry in step.
    fn jitter(&mut self, d: Duration) -> Duration {
        // xorshift64: statistical quality is irrelevant here, only spreading.
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 7;
        self.rng ^= self.rng << 17;
        let permille = 800 + (self.rng % 401);
        d * permille as u32 / 1000
    }
}
