//! Who is working: the workers and worker processes the front ends know of, in one
//! protocol-neutral registry that the dashboard lists (`/admin/api/workers`,
//! `/admin/api/processes`).
//!
//! The engine knows sessions and leases, not who a worker is to its protocol (a WMP
//! worker's routing path and roles, a jobd worker's targets, a launcher's pid). A front end
//! publishes that here at a few clear points (a worker announces itself, takes a job, ends
//! it; a process starts, exits), and the operations view reads it without depending on any
//! front end. Nothing here is on the engine's lock or a put's path.
//!
//! Bounded: at most [`MAX_WORKERS`] workers and [`MAX_PROCESSES`] processes (more are not
//! listed, and counted), at most [`MAX_IN_FLIGHT`] jobs listed per worker; a worker that
//! does not say goodbye (WMP) carries a time to live after which, holding nothing, it is
//! forgotten. Listings are paged by key and cost what they return.

use std::collections::{BTreeMap, HashMap};
use std::ops::Bound;
use std::sync::Mutex;

use jobyard_engine::{JobId, Millis};

/// Most workers listed at once; more are counted in [`Workers::unlisted`].
pub const MAX_WORKERS: usize = 100_000;
/// Most worker processes listed at once.
pub const MAX_PROCESSES: usize = 100_000;
/// Most in-flight jobs listed per worker (the oldest give way).
pub const MAX_IN_FLIGHT: usize = 1024;

/// One worker as its front end describes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WorkerInfo {
    /// The front end (`wmp`, `jobd`, ...).
    pub protocol: &'static str,
    /// Its identity to that protocol (a WMP routing path, a jobd worker's name and address).
    pub id: String,
    /// Queues it takes jobs from (roles, targets, functions); see `any_queue`.
    pub queues: Vec<String>,
    /// It takes jobs from any queue (a WMP READY without roles).
    pub any_queue: bool,
    /// Protocol-specific facts shown beside it (`manager`, `listen`, ...).
    pub detail: Vec<(&'static str, String)>,
    /// Engine jobs it holds now, oldest first.
    pub in_flight: Vec<JobId>,
    pub first_seen: Millis,
    pub last_seen: Millis,
    /// Forgotten this long after `last_seen` while it holds nothing (`None`: kept until
    /// its front end removes it).
    pub ttl: Option<Millis>,
}

impl WorkerInfo {
    fn expired(&self, now: Millis) -> bool {
        self.in_flight.is_empty()
            && self
                .ttl
                .is_some_and(|ttl| now.saturating_sub(self.last_seen) >= ttl)
    }
}

/// A process a front end started for a job (a jobd launcher).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProcessInfo {
    pub protocol: &'static str,
    /// The engine job it runs (the registry's key with the protocol).
    pub job: JobId,
    pub pid: i32,
    /// The job's id as its protocol names it (a jobd row id).
    pub label: String,
    /// Its queue (a jobd target).
    pub queue: String,
    pub started: Millis,
    /// Its command line, word by word.
    pub command: Vec<String>,
}

/// A page of a listing, and where the next begins.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Listed<T> {
    pub items: Vec<T>,
    /// Everything listed (all pages) in the asked protocol.
    pub total: usize,
    /// Pass as `after` for the next page; `None` on the last.
    pub next: Option<String>,
}

type WorkerKey = (String, String);

#[derive(Debug, Default)]
struct Inner {
    workers: BTreeMap<WorkerKey, WorkerInfo>,
    /// Who holds each in-flight job, so a job's end needs no worker id.
    holders: HashMap<(&'static str, JobId), String>,
    processes: BTreeMap<(String, JobId), ProcessInfo>,
    unlisted: u64,
    /// Workers after the last sweep of expired ones: the next sweep waits for twice as many.
    swept_at: usize,
}

impl Inner {
    fn sweep(&mut self, now: Millis) {
        let expired: Vec<WorkerKey> = self
            .workers
            .iter()
            .filter(|(_, w)| w.expired(now))
            .map(|(k, _)| k.clone())
            .collect();
        for key in expired {
            self.workers.remove(&key);
        }
        self.swept_at = self.workers.len();
    }

    /// The worker under `key`, created (with no queues) if new, its `last_seen` set to
    /// `now`; `None` if it is new and the registry is full (it is counted, not listed).
    fn admit(
        &mut self,
        protocol: &'static str,
        key: &WorkerKey,
        now: Millis,
    ) -> Option<&mut WorkerInfo> {
        if !self.workers.contains_key(key) {
            if self.workers.len() >= (2 * self.swept_at).max(1024) {
                self.sweep(now);
            }
            if self.workers.len() >= MAX_WORKERS {
                self.unlisted += 1;
                return None;
            }
            self.workers.insert(
                key.clone(),
                WorkerInfo {
                    protocol,
                    id: key.1.clone(),
                    queues: Vec::new(),
                    any_queue: false,
                    detail: Vec::new(),
                    in_flight: Vec::new(),
                    first_seen: now,
                    last_seen: now,
                    ttl: None,
                },
            );
        }
        let w = self.workers.get_mut(key).expect("present");
        w.last_seen = now;
        Some(w)
    }

    fn forget_job(&mut self, protocol: &'static str, job: JobId) {
        if let Some(id) = self.holders.remove(&(protocol, job)) {
            if let Some(w) = self.workers.get_mut(&(protocol.to_string(), id)) {
                w.in_flight.retain(|&j| j != job);
            }
        }
    }
}

/// The registry (one per broker: [`crate::Broker::workers`]).
#[derive(Debug, Default)]
pub struct Workers {
    inner: Mutex<Inner>,
}

impl Workers {
    fn inner(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Records that worker `id` of `protocol` was seen now, creating it if new (with no
    /// queues), and lets `update` change what it says about itself. False if the registry
    /// is full and the worker is new (it is counted, not listed).
    pub fn seen(
        &self,
        protocol: &'static str,
        id: &str,
        now: Millis,
        update: impl FnOnce(&mut WorkerInfo),
    ) -> bool {
        let mut inner = self.inner();
        let key = (protocol.to_string(), id.to_string());
        let Some(w) = inner.admit(protocol, &key, now) else {
            return false;
        };
        update(w);
        true
    }

    /// Forgets a worker (it said goodbye, its connection closed) and its jobs.
    pub fn remove(&self, protocol: &'static str, id: &str) {
        let mut inner = self.inner();
        if let Some(w) = inner
            .workers
            .remove(&(protocol.to_string(), id.to_string()))
        {
            for job in w.in_flight {
                inner.holders.remove(&(protocol, job));
            }
        }
    }

    /// Forgets every worker and process of a protocol (its front end stopped).
    pub fn remove_protocol(&self, protocol: &'static str) {
        let mut inner = self.inner();
        inner.workers.retain(|(p, _), _| p != protocol);
        inner.holders.retain(|(p, _), _| *p != protocol);
        inner.processes.retain(|(p, _), _| p != protocol);
    }

    /// Worker `id` took engine job `job` (it is seen now, too).
    pub fn took(&self, protocol: &'static str, id: &str, job: JobId, now: Millis) {
        // One lock turn and one key per job: a WMP manager calls this for every TAKE.
        let mut inner = self.inner();
        let key = (protocol.to_string(), id.to_string());
        let Some(w) = inner.admit(protocol, &key, now) else {
            return;
        };
        if !w.in_flight.contains(&job) {
            w.in_flight.push(job);
        }
        let oldest = (w.in_flight.len() > MAX_IN_FLIGHT).then(|| w.in_flight.remove(0));
        if let Some(old) = oldest {
            inner.holders.remove(&(protocol, old));
        }
        // A job handed to another worker (its lease ran out) leaves the first one's list.
        let (protocol_key, holder) = key;
        if let Some(before) = inner.holders.insert((protocol, job), holder) {
            if before != id {
                if let Some(w) = inner.workers.get_mut(&(protocol_key, before)) {
                    w.in_flight.retain(|&j| j != job);
                }
            }
        }
    }

    /// Engine job `job` is no longer held by the worker that took it (done, given back,
    /// lease ended).
    pub fn job_ended(&self, protocol: &'static str, job: JobId) {
        self.inner().forget_job(protocol, job);
    }

    /// A process was started for a job.
    pub fn process_started(&self, process: ProcessInfo) {
        let mut inner = self.inner();
        if inner.processes.len() >= MAX_PROCESSES {
            inner.unlisted += 1;
            return;
        }
        inner
            .processes
            .insert((process.protocol.to_string(), process.job), process);
    }

    /// The process of a job ended.
    pub fn process_ended(&self, protocol: &'static str, job: JobId) {
        self.inner().processes.remove(&(protocol.to_string(), job));
    }

    /// Workers and processes that could not be listed because the registry was full.
    pub fn unlisted(&self) -> u64 {
        self.inner().unlisted
    }

    /// A page of workers (of `protocol`, or all), by protocol and id, after the `next` of
    /// the previous page. Workers past their time to live are forgotten first.
    pub fn workers(
        &self,
        protocol: Option<&str>,
        after: Option<&str>,
        limit: usize,
        now: Millis,
    ) -> Listed<WorkerInfo> {
        let mut inner = self.inner();
        inner.sweep(now);
        let in_protocol = |k: &WorkerKey| protocol.is_none_or(|p| p == k.0);
        let start = match after.and_then(|a| a.split_once('/')) {
            Some((p, id)) => Bound::Excluded((p.to_string(), id.to_string())),
            // The first page of one protocol starts at its first key.
            None => match protocol {
                Some(p) => Bound::Included((p.to_string(), String::new())),
                None => Bound::Unbounded,
            },
        };
        let mut items: Vec<WorkerInfo> = inner
            .workers
            .range((start, Bound::Unbounded))
            .take_while(|(k, _)| in_protocol(k))
            .take(limit + 1)
            .map(|(_, w)| w.clone())
            .collect();
        let next = (items.len() > limit).then(|| {
            items.truncate(limit);
            let last = items.last().expect("a full page");
            format!("{}/{}", last.protocol, last.id)
        });
        let total = inner.workers.keys().filter(|k| in_protocol(k)).count();
        Listed { items, total, next }
    }

    /// A page of processes (of `protocol`, or all), by protocol and job, after the `next`
    /// of the previous page.
    pub fn processes(
        &self,
        protocol: Option<&str>,
        after: Option<&str>,
        limit: usize,
    ) -> Listed<ProcessInfo> {
        let inner = self.inner();
        let in_protocol = |p: &str| protocol.is_none_or(|want| want == p);
        let start = match after
            .and_then(|a| a.split_once('/'))
            .and_then(|(p, j)| Some((p.to_string(), j.parse::<JobId>().ok()?)))
        {
            Some(key) => Bound::Excluded(key),
            None => match protocol {
                Some(p) => Bound::Included((p.to_string(), 0)),
                None => Bound::Unbounded,
            },
        };
        let mut items: Vec<ProcessInfo> = inner
            .processes
            .range((start, Bound::Unbounded))
            .take_while(|((p, _), _)| in_protocol(p))
            .take(limit + 1)
            .map(|(_, p)| p.clone())
            .collect();
        let next = (items.len() > limit).then(|| {
            items.truncate(limit);
            let last = items.last().expect("a full page");
            format!("{}/{}", last.protocol, last.job)
        });
        let total = inner
            .processes
            .keys()
            .filter(|(p, _)| in_protocol(p))
            .count();
        Listed { items, total, next }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_worker_is_seen_takes_jobs_and_ends_them() {
        let w = Workers::default();
        w.seen("wmp", "a", 10, |i| i.queues = vec!["emails".into()]);
        w.took("wmp", "a", 7, 20);
        w.took("wmp", "a", 8, 20);
        w.job_ended("wmp", 7);
        let page = w.workers(Some("wmp"), None, 10, 30);
        assert_eq!(page.total, 1);
        let a = &page.items[0];
        assert_eq!((a.first_seen, a.last_seen), (10, 20));
        assert_eq!(a.queues, vec!["emails".to_string()]);
        assert_eq!(a.in_flight, vec![8]);
    }

    #[test]
    fn a_job_handed_to_another_worker_leaves_the_first() {
        let w = Workers::default();
        w.took("wmp", "a", 7, 1);
        w.took("wmp", "b", 7, 2);
        let page = w.workers(None, None, 10, 3);
        assert_eq!(page.items[0].in_flight, Vec::<JobId>::new());
        assert_eq!(page.items[1].in_flight, vec![7]);
    }

    #[test]
    fn idle_workers_past_their_ttl_are_forgotten_busy_ones_kept() {
        let w = Workers::default();
        w.seen("wmp", "idle", 0, |i| i.ttl = Some(100));
        w.seen("wmp", "busy", 0, |i| i.ttl = Some(100));
        w.took("wmp", "busy", 1, 0);
        w.seen("jobd", "daemon", 0, |_| {});
        let ids: Vec<String> = w
            .workers(None, None, 10, 100)
            .items
            .into_iter()
            .map(|i| i.id)
            .collect();
        assert_eq!(ids, vec!["daemon", "busy"]);
    }

    #[test]
    fn listings_are_paged_by_key() {
        let w = Workers::default();
        for i in 0..5 {
            w.seen("wmp", &format!("w{i}"), 0, |_| {});
        }
        w.seen("jobd", "d", 0, |_| {});
        let first = w.workers(Some("wmp"), None, 2, 0);
        assert_eq!(first.total, 5);
        assert_eq!(first.next.as_deref(), Some("wmp/w1"));
        let second = w.workers(Some("wmp"), first.next.as_deref(), 2, 0);
        let ids: Vec<_> = second.items.iter().map(|i| i.id.as_str()).collect();
        assert_eq!(ids, vec!["w2", "w3"]);
        let last = w.workers(Some("wmp"), second.next.as_deref(), 2, 0);
        assert_eq!(last.items.len(), 1);
        assert_eq!(last.next, None);
        let all = w.workers(None, None, 10, 0);
        assert_eq!(all.total, 6);
    }

    #[test]
    fn processes_come_and_go_and_are_paged() {
        let w = Workers::default();
        for job in [5, 3, 9] {
            w.process_started(ProcessInfo {
                protocol: "jobd",
                job,
                pid: 100 + job as i32,
                label: format!("row {job}"),
                queue: "t".into(),
                started: 1,
                command: vec!["run".into(), job.to_string()],
            });
        }
        w.process_ended("jobd", 5);
        let page = w.processes(Some("jobd"), None, 1);
        assert_eq!((page.total, page.items[0].job), (2, 3));
        let rest = w.processes(Some("jobd"), page.next.as_deref(), 1);
        assert_eq!(rest.items[0].pid, 109);
        assert_eq!(rest.next, None);
        w.remove_protocol("jobd");
        assert_eq!(w.processes(None, None, 10).total, 0);
    }
}
