//! The jobd worker daemon: serves poll, pause, continue, status, run-manual, add-target,
//! remove-target, set-target-concurrency and send-signal (reference §2), runs jobs from
//! the MySQL table through the launcher, and keeps a registration with the master.
//!
//! Poll algorithm (reference §4) with jobd's bugs fixed: a poll takes at most as many rows
//! per target as it has free slots (never while paused), re-polls while a fetch came back
//! full, and parks targets that are full until a job ends or `continue` arrives. A fetch
//! that fails (database gone) is retried with growing pauses.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use jobyard_broker::{LabelledRow, ProtocolMetrics};
use jobyard_net::{Gate, Slot};
use serde_json::{json, Map, Value};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{oneshot, Notify};

use crate::batching;
use crate::carry::{Carried, Carry};
use crate::config::JobdConfig;
use crate::engine_slots::EngineScheduler;
use crate::launcher::{self, LaunchSpec, Outcome};
use crate::link::{Handler, Link, ReplyFuture};
use crate::memory::memory_usage;
use crate::metrics::{self, JobdMetrics};
use crate::protocol::{js_typeof, MAX_REQUEST_FRAME, MAX_RESPONSE_FRAME};
use crate::session::{is_localhost, Session};
use crate::slots::{Scheduler, Start};
use crate::store::{self, Claimed, Store};
use crate::timing::{Fetched, JobClock};
use crate::validate;
use crate::writer::DoneWriter;

type Waiter = oneshot::Sender<Result<Outcome, String>>;

struct State {
    sched: Box<dyn Scheduler>,
    /// Targets a poll asked for that are not fetched yet (parked while full or paused).
    pending: BTreeSet<String>,
    polling: bool,
    /// A busy target's fetch is waiting for more free slots (see [`batching`]): a timer
    /// will fetch anyway at the end of [`batching::MAX_WAIT`]; the carry stays open
    /// meanwhile, since a fetch will come.
    batch_wait_armed: bool,
    retry_armed: bool,
    retry_pause: Duration,
    /// run-manual callers, by job id.
    waiters: HashMap<u64, Waiter>,
    /// Process group of each running job.
    running: HashMap<u64, i32>,
    /// Fetched rows already marked `running` in the table (they need no second write),
    /// with the fetch that took them (for the debug timing of each job).
    premarked: BTreeMap<u64, Fetched>,
    /// Each target's figures (looked up once per target, not per job).
    target_metrics: HashMap<String, Arc<LabelledRow>>,
    /// Ends of jobs waiting to be written in a fetch's commit (see [`Carry`]).
    carry: Carry,
}

struct Inner {
    state: Mutex<State>,
    store: Store,
    /// The final UPDATEs, batched (see [`DoneWriter`]).
    writer: DoneWriter,
    metrics: JobdMetrics,
    spec: LaunchSpec,
    fetch_limit: u64,
    name: String,
    master: Mutex<Option<Arc<Link>>>,
    shutting_down: AtomicBool,
    /// run_job tasks in flight (running or writing their result).
    active: AtomicUsize,
    idle: Notify,
}

/// A cheap handle on one worker daemon's state.
#[derive(Clone)]
pub struct Worker {
    inner: Arc<Inner>,
}

/// A worker daemon started in this process (see [`start_jobd`]).
pub struct JobdHandle {
    /// The address it listens on.
    pub addr: SocketAddr,
    /// The worker itself.
    pub worker: Worker,
    stop: Option<oneshot::Sender<()>>,
    done: tokio::task::JoinHandle<()>,
}

impl JobdHandle {
    /// Graceful shutdown (as on SIGTERM); resolves when it is complete.
    pub async fn shutdown(mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        let _ = self.done.await;
    }
}

/// Starts a worker daemon on the current runtime with its targets in an engine of its own
/// (standalone `jobyard jobd`): reconciles the table, listens, connects to the master.
/// `config.port = 0` picks a free port (see [`JobdHandle::addr`]).
pub async fn start_jobd(config: JobdConfig) -> std::io::Result<JobdHandle> {
    start_jobd_with(config, Box::new(EngineScheduler::standalone())).await
}

/// [`start_jobd`] with the targets kept in `sched` (an [`EngineScheduler`] on the server's
/// broker inside `jobyard serve`); the config's targets are added to it.
pub async fn start_jobd_with(
    config: JobdConfig,
    sched: Box<dyn Scheduler>,
) -> std::io::Result<JobdHandle> {
    let listener = TcpListener::bind((config.host.as_str(), config.port)).await?;
    Ok(serve_jobd(listener, config, sched, None).await)
}

/// Runs a worker daemon on an already bound listener (see [`start_jobd_with`]). With a
/// `gate` (inside `jobyard serve`), every connection, accepted or to the master, takes a
/// place from it: the server's `--max-connections` covers them, and a connection beyond
/// the limit is closed at once (and logged by the gate).
pub async fn serve_jobd(
    listener: TcpListener,
    config: JobdConfig,
    sched: Box<dyn Scheduler>,
    gate: Option<Gate>,
) -> JobdHandle {
    let addr = listener
        .local_addr()
        .unwrap_or_else(|_| SocketAddr::from(([0, 0, 0, 0], 0)));
    let worker = Worker::with_scheduler(&config, sched);
    if config.reclaim_on_start {
        let targets: Vec<String> = config.targets.iter().map(|t| t.0.clone()).collect();
        match worker.inner.store.reclaim(&targets).await {
            Ok((released, failed)) if released + failed > 0 => tracing::warn!(
                released,
                failed,
                "jobd: reclaimed rows left by a previous run (accepted -> waiting, running -> done/fail)"
            ),
            Ok(_) => {}
            Err(e) => tracing::error!(error = %e, "jobd: startup reconciliation failed"),
        }
    }
    let (stop_tx, stop_rx) = oneshot::channel();
    let w = worker.clone();
    let grace = Duration::from_secs(config.shutdown_timeout);
    let password = config.password.clone();
    let allow_local = config.always_allow_localhost;
    let master = config.master.clone();
    let reconnect = Duration::from_secs(config.master_reconnect_timeout.max(1));
    let wakeups = worker.inner.state.lock().unwrap().sched.take_wakeups();
    let wake_task = wakeups.map(|mut mailbox| {
        let w = worker.clone();
        tokio::spawn(async move {
            while mailbox.recv().await.is_some() {
                w.start_ready();
            }
        })
    });
    let done = tokio::spawn(async move {
        let master_task = master.map(|(h, p)| {
            let w = w.clone();
            let pw = password.clone();
            let gate = gate.clone();
            tokio::spawn(async move { w.master_loop(h, p, pw, reconnect, gate).await })
        });
        let handler: Arc<dyn Handler> = Arc::new(w.clone());
        let mut stop_rx = stop_rx;
        let mut links: Vec<Arc<Link>> = Vec::new();
        loop {
            tokio::select! {
                accepted = listener.accept() => {
                    if let Ok((stream, peer)) = accepted {
                        let Some(place) = w.admit(gate.as_ref(), &peer.to_string()) else {
                            drop(stream);
                            continue;
                        };
                        let trusted = allow_local && is_localhost(&peer);
                        let session = Session::new(password.clone(), trusted);
                        links.retain(|l| !l.is_closed());
                        let link = Link::spawn(stream, session, handler.clone(), MAX_REQUEST_FRAME, None);
                        links.push(link.clone());
                        tokio::spawn(async move {
                            link.closed().await;
                            drop(place);
                        });
                    }
                }
                _ = &mut stop_rx => break,
            }
        }
        drop(listener);
        if let Some(t) = master_task {
            t.abort();
        }
        if let Some(t) = wake_task {
            t.abort();
        }
        if let Some(l) = w.inner.master.lock().unwrap().take() {
            l.close();
        }
        w.shutdown(grace).await;
        for l in links {
            l.close();
        }
    });
    JobdHandle {
        addr,
        worker,
        stop: Some(stop_tx),
        done,
    }
}

fn reply_ok() -> Result<Value, String> {
    Ok(Value::String("ok".into()))
}

impl Worker {
    /// A worker for `config` with an engine of its own (no listener; see [`start_jobd`]).
    pub fn new(config: &JobdConfig) -> Worker {
        Worker::with_scheduler(config, Box::new(EngineScheduler::standalone()))
    }

    /// A worker whose targets live in `sched` (the engine-backed scheduler plugs in here).
    pub fn with_scheduler(config: &JobdConfig, mut sched: Box<dyn Scheduler>) -> Worker {
        let metrics = match sched.registry() {
            Some(broker) => JobdMetrics::new(broker.metrics(), &config.name),
            None => JobdMetrics::new(&jobyard_broker::Metrics::default(), &config.name),
        };
        let mut target_metrics = HashMap::new();
        for (t, c) in &config.targets {
            let _ = sched.add(t, *c);
            target_metrics.insert(t.clone(), metrics.target(t));
        }
        let pool_size = config.targets.iter().map(|t| t.1).sum::<u32>().clamp(2, 16) + 2;
        let store = Store::connect(&config.mysql, pool_size).with_metrics(metrics.clone());
        Worker {
            inner: Arc::new(Inner {
                state: Mutex::new(State {
                    sched,
                    pending: BTreeSet::new(),
                    polling: false,
                    batch_wait_armed: false,
                    retry_armed: false,
                    retry_pause: Duration::from_millis(200),
                    waiters: HashMap::new(),
                    running: HashMap::new(),
                    premarked: BTreeMap::new(),
                    target_metrics,
                    carry: Carry::default(),
                }),
                writer: DoneWriter::new(store.clone()),
                store,
                metrics,
                spec: LaunchSpec {
                    template: config.launcher.clone(),
                    cwd: config.launcher_cwd.clone(),
                    env: config.launcher_env.clone(),
                    max_output: config.max_output_buffer,
                },
                fetch_limit: config.mysql_fetch_limit,
                name: config.name.clone(),
                master: Mutex::new(None),
                shutting_down: AtomicBool::new(false),
                active: AtomicUsize::new(0),
                idle: Notify::new(),
            }),
        }
    }

    /// Answers one request (the same handlers serve clients and the master).
    pub async fn dispatch(&self, kind: &str, data: Value) -> Result<Value, String> {
        self.inner.metrics.request(kind);
        match kind {
            "poll" => self.poll(&data),
            "pause" => self.pause(&data, true),
            "continue" => self.pause(&data, false),
            "status" => Ok(self.status()),
            "run-manual" => self.run_manual(&data).await,
            "add-target" => self.add_target(&data),
            "remove-target" => self.remove_target(&data),
            "set-target-concurrency" => self.set_concurrency(&data),
            "send-signal" => Ok(self.send_signal(&data)),
            other => Err(format!("unknown request type: '{other}'")),
        }
    }

    fn checked_targets(&self, data: &Value) -> Result<Vec<String>, String> {
        let st = self.inner.state.lock().unwrap();
        match validate::targets(data)? {
            None => Ok(st.sched.targets().into_iter().map(|t| t.name).collect()),
            Some(list) => {
                for t in &list {
                    if !st.sched.serves(t) {
                        return Err(format!("invalid target '{t}'"));
                    }
                }
                Ok(list)
            }
        }
    }

    fn poll(&self, data: &Value) -> Result<Value, String> {
        let targets = self.checked_targets(data)?;
        self.inner.state.lock().unwrap().pending.extend(targets);
        self.kick();
        reply_ok()
    }

    fn pause(&self, data: &Value, paused: bool) -> Result<Value, String> {
        let targets = self.checked_targets(data)?;
        {
            let mut st = self.inner.state.lock().unwrap();
            for t in &targets {
                st.sched.set_paused(t, paused);
            }
        }
        if !paused {
            self.start_ready();
            self.kick();
        }
        reply_ok()
    }

    /// The `status` reply (reference §2.1). `memoryUsage.rss` is real; the V8 heap
    /// figures have no meaning here and are 0.
    pub fn status(&self) -> Value {
        let st = self.inner.state.lock().unwrap();
        let mut targets = Map::new();
        for t in st.sched.targets() {
            targets.insert(
                t.name,
                json!({"paused": t.paused, "concurrency": t.concurrency, "length": t.length}),
            );
        }
        json!({
            "targets": targets,
            "jobPromisesCount": st.waiters.len(),
            "memoryUsage": memory_usage(),
        })
    }

    fn add_target(&self, data: &Value) -> Result<Value, String> {
        let (target, c) = validate::target_and_concurrency(data)?;
        {
            let mut st = self.inner.state.lock().unwrap();
            st.sched.add(&target, c)?;
            let m = self.inner.metrics.target(&target);
            st.target_metrics.insert(target, m);
        }
        self.reregister();
        reply_ok()
    }

    fn remove_target(&self, data: &Value) -> Result<Value, String> {
        let target = validate::string(data, "target")?;
        {
            let mut st = self.inner.state.lock().unwrap();
            st.sched.remove(&target)?;
            st.pending.remove(&target);
        }
        self.reregister();
        reply_ok()
    }

    fn set_concurrency(&self, data: &Value) -> Result<Value, String> {
        let (target, c) = validate::target_and_concurrency(data)?;
        self.inner
            .state
            .lock()
            .unwrap()
            .sched
            .set_concurrency(&target, c)?;
        self.start_ready();
        self.kick();
        reply_ok()
    }

    fn send_signal(&self, data: &Value) -> Value {
        let entries: Vec<(String, Value)> = match data.get("jobs") {
            Some(Value::Object(m)) => m.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
            Some(Value::Array(a)) => a
                .iter()
                .enumerate()
                .map(|(i, v)| (i.to_string(), v.clone()))
                .collect(),
            _ => Vec::new(),
        };
        let st = self.inner.state.lock().unwrap();
        let mut out = Map::new();
        for (key, sig) in entries {
            let signal = match &sig {
                Value::Number(n) => n.as_i64().map(|n| n as i32),
                Value::String(s) => launcher::signal_number(s),
                _ => None,
            };
            let pgid = key
                .parse::<u64>()
                .ok()
                .and_then(|id| st.running.get(&id).copied());
            let delivered = match (pgid, signal) {
                (Some(pg), Some(sig)) => launcher::signal_group(pg, sig),
                _ => false,
            };
            out.insert(key, Value::Bool(delivered));
        }
        Value::Object(out)
    }

    async fn run_manual(&self, data: &Value) -> Result<Value, String> {
        let ids = manual_ids(data)?;
        let mut receivers = Vec::new();
        let served: Vec<String> = {
            let mut st = self.inner.state.lock().unwrap();
            if self.inner.shutting_down.load(Ordering::SeqCst) {
                return Err("worker is shutting down".into());
            }
            if let Some(id) = ids.iter().find(|id| st.waiters.contains_key(id)) {
                return Err(format!("another client is already waiting for job {id}"));
            }
            for id in &ids {
                let (tx, rx) = oneshot::channel();
                st.waiters.insert(*id, tx);
                receivers.push((*id, rx));
            }
            st.sched.targets().into_iter().map(|t| t.name).collect()
        };
        let claim = self
            .inner
            .store
            .claim_manual(&ids, |t| served.iter().any(|s| s == t))
            .await;
        let claim = match claim {
            Ok(c) => c,
            Err(e) => {
                self.inner.metrics.db_error(false);
                let mut st = self.inner.state.lock().unwrap();
                for id in &ids {
                    st.waiters.remove(id);
                }
                return Err(format!("database error: {e}"));
            }
        };
        count_created(&self.inner.metrics, claim.accepted.len());
        let mut errors: BTreeMap<u64, String> = claim.errors;
        let mut orphans = Vec::new();
        {
            let mut st = self.inner.state.lock().unwrap();
            for id in errors.keys() {
                st.waiters.remove(id);
            }
            for Claimed { id, target } in &claim.accepted {
                if st.sched.serves(target) {
                    st.sched.push(target, *id);
                } else {
                    st.waiters.remove(id);
                    errors.insert(*id, format!("target '{target}' not found (job id={id})"));
                    orphans.push(*id);
                }
            }
        }
        if !orphans.is_empty() && self.inner.store.release(&orphans, "manual").await.is_err() {
            self.inner.metrics.db_error(false);
        }
        self.start_ready();
        let mut jobs = BTreeMap::new();
        for (id, rx) in receivers {
            if errors.contains_key(&id) {
                continue;
            }
            match rx.await {
                Ok(Ok(o)) => {
                    jobs.insert(id, o);
                }
                Ok(Err(e)) => {
                    errors.insert(id, e);
                }
                Err(_) => {
                    errors.insert(id, "worker is shutting down".into());
                }
            }
        }
        let mut out = Map::new();
        if !jobs.is_empty() {
            let mut m = Map::new();
            for (id, o) in jobs {
                m.insert(
                    id.to_string(),
                    json!({
                        "result": if o.ok() { "ok" } else { "fail" },
                        "code": o.code,
                        "signal": o.signal.map(launcher::signal_name),
                        "stdout": o.stdout,
                        "stderr": o.stderr,
                    }),
                );
            }
            out.insert("jobs".into(), Value::Object(m));
        }
        if !errors.is_empty() {
            let m: Map<String, Value> = errors
                .into_iter()
                .map(|(k, v)| (k.to_string(), Value::String(v)))
                .collect();
            out.insert("errors".into(), Value::Object(m));
        }
        Ok(Value::Object(out))
    }

    /// Starts a fetch for pending targets with free slots, unless one is running. A busy
    /// target waits for more free slots (see [`batching`]).
    fn kick(&self) {
        self.kick_with(false);
    }

    /// [`Worker::kick`]; `now` fetches busy targets too (the batching wait is over).
    fn kick_with(&self, now: bool) {
        if self.inner.shutting_down.load(Ordering::SeqCst) {
            return;
        }
        let (wants, arm_wait) = {
            let mut st = self.inner.state.lock().unwrap();
            if st.polling || st.pending.is_empty() {
                return;
            }
            let (wants, waiting) = fetch_wants(&mut st, now, self.inner.fetch_limit);
            if wants.is_empty() {
                let arm = waiting && !st.batch_wait_armed;
                if arm {
                    st.batch_wait_armed = true;
                    st.carry.open();
                }
                (None, arm)
            } else {
                st.polling = true;
                st.carry.open();
                (Some(wants), false)
            }
        };
        if arm_wait {
            self.fetch_after_batch_wait();
        }
        if let Some(wants) = wants {
            let w = self.clone();
            tokio::spawn(async move { w.fetch(wants).await });
        }
    }

    /// Ends a batching wait at [`batching::MAX_WAIT`]: fetches whatever is free then, and
    /// if no fetch follows, writes the ends that waited for one.
    fn fetch_after_batch_wait(&self) {
        let w = self.clone();
        tokio::spawn(async move {
            tokio::time::sleep(batching::MAX_WAIT).await;
            w.inner.state.lock().unwrap().batch_wait_armed = false;
            w.kick_with(true);
            w.close_carry_unless_fetching();
        });
    }

    async fn fetch(&self, wants: Vec<(String, u64)>) {
        let began = std::time::Instant::now();
        let (result, carried) = self.claim(&wants).await;
        // An end the database refused (a value its column rejects) failed the fetch, not a
        // lost database: fetch again at once; the done writer sanitises the end.
        let refused_end = carried && matches!(&result, Err(e) if store::is_data_error(e));
        let fetched = Fetched {
            began,
            committed: std::time::Instant::now(),
        };
        let mut retry_in = None;
        let mut orphans = Vec::new();
        {
            let mut st = self.inner.state.lock().unwrap();
            st.polling = false;
            match result {
                Ok(rows) => {
                    count_created(&self.inner.metrics, rows.len());
                    st.retry_pause = Duration::from_millis(200);
                    for (t, limit) in &wants {
                        let got = rows.iter().filter(|r| &r.target == t).count() as u64;
                        if got == *limit {
                            st.pending.insert(t.clone());
                        }
                    }
                    for r in &rows {
                        if st.sched.free(&r.target) > 0 {
                            st.sched.push(&r.target, r.id);
                            st.premarked.insert(r.id, fetched);
                        } else {
                            // The target was paused, filled by run-manual or removed while
                            // the fetch ran: hand the row back rather than hold a `running`
                            // row that has not started, and poll again later.
                            orphans.push((r.id, r.target.clone()));
                        }
                    }
                }
                Err(e) => {
                    self.inner.metrics.db_error(true);
                    for (t, _) in &wants {
                        st.pending.insert(t.clone());
                    }
                    if refused_end {
                        tracing::warn!(error = %e, "jobd: the database refused a job's end written with a fetch; writing it on its own");
                    } else {
                        tracing::warn!(error = %e, "jobd: fetching jobs failed; will retry");
                        if !st.retry_armed {
                            st.retry_armed = true;
                            retry_in = Some(st.retry_pause);
                            st.retry_pause = (st.retry_pause * 2).min(Duration::from_secs(10));
                        }
                    }
                }
            }
        }
        if !orphans.is_empty() {
            let ids: Vec<u64> = orphans.iter().map(|o| o.0).collect();
            let released = self.inner.store.release(&ids, "waiting").await;
            {
                let mut st = self.inner.state.lock().unwrap();
                for (_, t) in orphans {
                    if st.sched.serves(&t) {
                        st.pending.insert(t);
                    }
                }
            }
            if let Err(e) = released {
                self.inner.metrics.db_error(false);
                tracing::error!(error = %e, "jobd: could not hand back fetched rows; the next start reclaims them");
            }
        }
        self.start_ready();
        match retry_in {
            Some(pause) => {
                let w = self.clone();
                tokio::spawn(async move {
                    tokio::time::sleep(pause).await;
                    w.inner.state.lock().unwrap().retry_armed = false;
                    w.kick();
                });
            }
            None => self.kick(),
        }
        self.close_carry_unless_fetching();
    }

    /// When no fetch follows this one, the ends waiting for one go to the done writer.
    fn close_carry_unless_fetching(&self) {
        let left = {
            let mut st = self.inner.state.lock().unwrap();
            if st.polling || st.batch_wait_armed {
                return;
            }
            st.carry.close()
        };
        self.write_apart(left);
    }

    /// Runs one fetch: opens it, then commits it with the ends of jobs that came since the
    /// previous fetch took its own (see [`Carry`]). Those ends are acknowledged once
    /// committed, or handed to the done writer if the fetch failed. Also says whether any
    /// end rode on it.
    async fn claim(&self, wants: &[(String, u64)]) -> (Result<Vec<Claimed>, sqlx::Error>, bool) {
        let opened = self.inner.store.open_fetch(wants).await;
        let carried = self.inner.state.lock().unwrap().carry.take();
        let result = match opened {
            Ok(open) => {
                let ends: Vec<(u64, &Outcome)> =
                    carried.iter().map(|c| (c.id, &c.outcome)).collect();
                self.inner.store.commit_fetch(open, &ends).await
            }
            Err(e) => Err(e),
        };
        let any = !carried.is_empty();
        if result.is_ok() {
            carried.into_iter().for_each(Carried::stored);
        } else {
            self.write_apart(carried);
        }
        (result, any)
    }

    /// Hands ends no fetch will store (it failed, or none follows) to the done writer,
    /// each job's task hearing when its row is stored.
    fn write_apart(&self, carried: Vec<Carried>) {
        for c in carried {
            let (id, outcome, stored) = c.into_parts();
            let w = self.clone();
            tokio::spawn(async move {
                if let Some(o) = w.inner.writer.write(id, outcome).await {
                    let _ = stored.send(o);
                }
            });
        }
    }

    /// Stores a job's end: in the commit of a fetch (the running one or the next) while
    /// fetches run and other jobs are running, else through the done writer at once.
    /// `None` only if the writer's task died with its runtime.
    ///
    /// A lone job's end does not ride: the fetch it starts may find nothing, and the end
    /// would then wait a round trip (the fetch's SELECT) for a commit it need not share
    /// (1x1 latency p50 4.05 -> 5.60 ms when it rode, A/B at load 5-6).
    async fn store_end(&self, id: u64, outcome: Outcome) -> Option<Outcome> {
        let offered = {
            let mut st = self.inner.state.lock().unwrap();
            if st.sched.running() == 0 {
                Err(outcome)
            } else {
                st.carry.offer(id, outcome)
            }
        };
        match offered {
            Ok(stored) => stored.await.ok(),
            Err(outcome) => self.inner.writer.write(id, outcome).await,
        }
    }

    fn start_ready(&self) {
        if self.inner.shutting_down.load(Ordering::SeqCst) {
            return;
        }
        let starts = self.inner.state.lock().unwrap().sched.take_startable();
        for s in starts {
            self.inner.active.fetch_add(1, Ordering::SeqCst);
            let w = self.clone();
            tokio::spawn(async move {
                w.run_job(s).await;
                if w.inner.active.fetch_sub(1, Ordering::SeqCst) == 1 {
                    w.inner.idle.notify_waiters();
                }
            });
        }
    }

    async fn run_job(&self, start: Start) {
        let id = start.id;
        let mut pause = Duration::from_millis(100);
        let premarked = self.inner.state.lock().unwrap().premarked.remove(&id);
        let mut clock = JobClock::new(premarked);
        let marked = loop {
            if premarked.is_some() {
                break Some(true);
            }
            match self.inner.store.mark_running(id).await {
                Ok(m) => break Some(m),
                Err(e) => {
                    self.inner.metrics.db_error(true);
                    tracing::warn!(id, error = %e, "jobd: marking a job running failed; retrying");
                    if self.inner.shutting_down.load(Ordering::SeqCst) {
                        break None;
                    }
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(Duration::from_secs(10));
                }
            }
        };
        let figures = self
            .inner
            .state
            .lock()
            .unwrap()
            .target_metrics
            .get(&start.target)
            .cloned();
        let outcome = match marked {
            Some(true) => match launcher::start(&self.inner.spec, id) {
                Err(msg) => {
                    tracing::error!(id, "jobd: {msg}");
                    self.inner.metrics.worker.inc(metrics::SPAWN_FAILURES);
                    Ok(Outcome::spawn_failed(msg))
                }
                Ok(running) => {
                    clock.launched();
                    if let Some(f) = &figures {
                        f.inc(metrics::LAUNCHED);
                        f.inc(metrics::RUNNING);
                    }
                    {
                        let mut st = self.inner.state.lock().unwrap();
                        st.running.insert(id, running.pgid);
                        let command = launcher::argv(&self.inner.spec.template, id);
                        st.sched.launched(&start, running.pgid, command);
                    }
                    let o = running.wait().await;
                    self.inner.state.lock().unwrap().running.remove(&id);
                    if let Some(f) = &figures {
                        f.dec(metrics::RUNNING);
                    }
                    Ok(o)
                }
            },
            Some(false) => Err(format!("job {id} not found")),
            None => Err("worker is shutting down".to_string()),
        };
        clock.ended();
        self.inner
            .state
            .lock()
            .unwrap()
            .sched
            .finished(&start, outcome.as_ref().ok());
        self.start_ready();
        self.kick();
        let outcome = match outcome {
            Ok(o) => self
                .store_end(id, o)
                .await
                .ok_or_else(|| "worker is shutting down".to_string()),
            Err(e) => Err(e),
        };
        if let Ok(o) = &outcome {
            clock.stored(id);
            let p = &self.inner.metrics.protocol;
            if let Some(f) = &figures {
                f.inc(metrics::FINISHED);
                if !o.ok() {
                    f.inc(metrics::FAILED);
                }
            }
            ProtocolMetrics::inc(if o.ok() {
                &p.jobs_completed
            } else {
                &p.jobs_failed
            });
        }
        let waiter = self.inner.state.lock().unwrap().waiters.remove(&id);
        if let Some(tx) = waiter {
            let _ = tx.send(outcome);
        }
    }

    /// Graceful shutdown: take nothing new, hand back queued rows, give running jobs
    /// `grace` to end, then SIGTERM their process groups (SIGKILL 5 s later), and wait
    /// until every result is written.
    pub async fn shutdown(&self, grace: Duration) {
        self.inner.shutting_down.store(true, Ordering::SeqCst);
        let (queued, manual): (Vec<u64>, Vec<u64>) = {
            let mut st = self.inner.state.lock().unwrap();
            let queued = st.sched.drain_queued();
            for id in &queued {
                st.premarked.remove(id);
            }
            let mut manual = Vec::new();
            let mut background = Vec::new();
            for id in queued {
                if let Some(tx) = st.waiters.remove(&id) {
                    let _ = tx.send(Err("worker is shutting down".into()));
                    manual.push(id);
                } else {
                    background.push(id);
                }
            }
            (background, manual)
        };
        for (ids, to) in [(queued, "waiting"), (manual, "manual")] {
            if let Err(e) = self.inner.store.release(&ids, to).await {
                self.inner.metrics.db_error(false);
                tracing::error!(error = %e, "jobd: could not hand back queued rows; the next start reclaims them");
            }
        }
        if !self.wait_idle(grace).await {
            self.signal_all(libc::SIGTERM);
            if !self.wait_idle(Duration::from_secs(5)).await {
                self.signal_all(libc::SIGKILL);
                self.wait_idle(Duration::from_secs(60)).await;
            }
        }
        self.inner.store.close().await;
    }

    fn signal_all(&self, sig: i32) {
        let st = self.inner.state.lock().unwrap();
        for pg in st.running.values() {
            launcher::signal_group(*pg, sig);
        }
    }

    async fn wait_idle(&self, limit: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            let notified = self.inner.idle.notified();
            if self.inner.active.load(Ordering::SeqCst) == 0 {
                return true;
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                return self.inner.active.load(Ordering::SeqCst) == 0;
            }
        }
    }

    fn registration(&self) -> Value {
        let st = self.inner.state.lock().unwrap();
        let targets: Vec<String> = st.sched.targets().into_iter().map(|t| t.name).collect();
        json!({"name": self.inner.name, "targets": targets})
    }

    /// Tells the master about a change of targets (jobd never did).
    fn reregister(&self) {
        let link = self.inner.master.lock().unwrap().clone();
        if let Some(link) = link {
            let data = self.registration();
            tokio::spawn(async move {
                if let Err(e) = link.request("register-worker", data, None).await {
                    tracing::warn!(error = %e, "jobd: re-registering with the master failed");
                }
            });
        }
    }

    /// A place for one connection: from the server's gate when there is one (`None`:
    /// refused, counted and logged), and counted in the protocol's connection figures
    /// until it is dropped.
    fn admit(&self, gate: Option<&Gate>, who: &str) -> Option<Place> {
        let p = &self.inner.metrics.protocol;
        let slot = match gate {
            Some(g) => match g.try_enter(who) {
                Some(s) => Some(s),
                None => {
                    // The gate logs it (at most once a second).
                    ProtocolMetrics::inc(&p.refused);
                    return None;
                }
            },
            None => None,
        };
        ProtocolMetrics::inc(&p.connections);
        ProtocolMetrics::inc(&p.connections_total);
        Some(Place {
            _slot: slot,
            metrics: p.clone(),
        })
    }

    async fn master_loop(
        &self,
        host: String,
        port: u16,
        password: Option<String>,
        pause: Duration,
        gate: Option<Gate>,
    ) {
        let handler: Arc<dyn Handler> = Arc::new(self.clone());
        loop {
            let Some(place) = self.admit(gate.as_ref(), "the connection to the master") else {
                tokio::time::sleep(pause).await;
                continue;
            };
            match TcpStream::connect((host.as_str(), port)).await {
                Ok(stream) => {
                    let link = Link::spawn(
                        stream,
                        Session::new(None, true),
                        handler.clone(),
                        MAX_RESPONSE_FRAME,
                        password.clone(),
                    );
                    *self.inner.master.lock().unwrap() = Some(link.clone());
                    let w = &self.inner.metrics.worker;
                    w.set(metrics::MASTER_CONNECTED, 1);
                    w.inc(metrics::MASTER_CONNECTIONS);
                    match link
                        .request("register-worker", self.registration(), None)
                        .await
                    {
                        Ok(_) => tracing::info!("jobd: registered with the master"),
                        Err(e) => {
                            tracing::warn!(error = %e, "jobd: registration with the master failed")
                        }
                    }
                    link.closed().await;
                    *self.inner.master.lock().unwrap() = None;
                    self.inner.metrics.worker.set(metrics::MASTER_CONNECTED, 0);
                    tracing::warn!("jobd: connection to the master lost");
                }
                Err(e) => tracing::warn!(error = %e, "jobd: cannot reach the master"),
            }
            drop(place);
            tokio::time::sleep(pause).await;
        }
    }
}

impl Handler for Worker {
    fn handle(&self, _link: Arc<Link>, kind: String, data: Value) -> ReplyFuture {
        let w = self.clone();
        Box::pin(async move { w.dispatch(&kind, data).await })
    }
}

/// One open connection's place: a slot of the server's gate (inside `jobyard serve`) and
/// one in the `jobd` connections gauge, both given back when dropped.
struct Place {
    _slot: Option<Slot>,
    metrics: Arc<ProtocolMetrics>,
}

impl Drop for Place {
    fn drop(&mut self) {
        ProtocolMetrics::dec(&self.metrics.connections);
    }
}

/// The pending targets to fetch now and how many rows each (its free slots, capped by
/// `fetch_limit`), dropping targets no longer served; also whether a busy target was left
/// pending to wait for more free slots (never when `now`).
fn fetch_wants(st: &mut State, now: bool, fetch_limit: u64) -> (Vec<(String, u64)>, bool) {
    let pending: Vec<String> = st.pending.iter().cloned().collect();
    let mut wants = Vec::new();
    let mut waiting = false;
    for t in pending {
        if !st.sched.serves(&t) {
            st.pending.remove(&t);
            continue;
        }
        let free = st.sched.free(&t);
        if !now && batching::wait_for_more(free, st.sched.concurrency(&t), fetch_limit) {
            waiting = true;
            continue;
        }
        let free = if fetch_limit > 0 {
            free.min(fetch_limit)
        } else {
            free
        };
        if free > 0 {
            st.pending.remove(&t);
            wants.push((t, free));
        }
    }
    (wants, waiting)
}

/// Counts rows taken (the protocol's `jobs_created`).
fn count_created(m: &JobdMetrics, n: usize) {
    m.protocol
        .jobs_created
        .fetch_add(n as u64, Ordering::Relaxed);
}

fn manual_ids(data: &Value) -> Result<Vec<u64>, String> {
    let items = match data.get("ids") {
        None | Some(Value::Null) => return Err("missing required field ids".into()),
        Some(Value::Array(a)) => a,
        Some(_) => return Err("ids must be array".into()),
    };
    if items.is_empty() {
        return Err("ids are empty".into());
    }
    let mut ids: Vec<u64> = Vec::new();
    for v in items {
        let id = match v {
            Value::Number(n) => n.as_u64().ok_or_else(|| format!("invalid id {n}"))?,
            other => return Err(format!("all ids must be numbers, got {}", js_typeof(other))),
        };
        if !ids.contains(&id) {
            ids.push(id);
        }
    }
    Ok(ids)
}
