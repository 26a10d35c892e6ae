//! jobd-master: workers register with it; it fans poke, pause, continue, status,
//! run-manual and send-signal out to them and merges the answers (reference §6).
//!
//! Fixed on the way: pause/continue answer `"ok"`; a worker's error or disconnect during
//! run-manual becomes per-id `errors` instead of failing the whole call; status,
//! pause/continue and send-signal wait at most `worker_timeout` per worker; a worker that
//! stays silent for a whole ping interval is dropped; send-signal goes to the worker running
//! the job when known (else to every worker of the target); re-registration replaces a
//! worker's targets; a registration without targets is refused.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Map, Value};
use tokio::net::TcpListener;
use tokio::sync::oneshot;

use crate::config::MasterConfig;
use crate::link::{Handler, Link, LinkError, ReplyFuture};
use crate::memory::memory_usage;
use crate::protocol::MAX_REQUEST_FRAME;
use crate::session::{is_localhost, Session};
use crate::validate;

struct Registered {
    link: Arc<Link>,
    name: String,
    targets: Vec<String>,
}

#[derive(Default)]
struct State {
    workers: Vec<Registered>,
    to_poke: BTreeSet<String>,
    /// Poked targets no worker serves yet, sent to the first one that registers them.
    waiting_to_poke: BTreeSet<String>,
    last_flush: Option<Instant>,
    flush_armed: bool,
    /// Which worker runs each job of an in-flight run-manual (for send-signal).
    job_worker: HashMap<u64, Arc<Link>>,
    round_robin: usize,
}

struct Inner {
    state: Mutex<State>,
    throttle: Duration,
    worker_timeout: Duration,
}

/// A cheap handle on the master's state.
#[derive(Clone)]
pub struct Master {
    inner: Arc<Inner>,
}

/// A master started in this process (see [`start_master`]).
pub struct MasterHandle {
    /// The address it listens on.
    pub addr: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    done: tokio::task::JoinHandle<()>,
}

impl MasterHandle {
    /// Stops listening and closes every connection.
    pub async fn shutdown(mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        let _ = self.done.await;
    }
}

/// Starts jobd-master on the current runtime (`port = 0` picks a free port).
pub async fn start_master(config: MasterConfig) -> std::io::Result<MasterHandle> {
    let listener = TcpListener::bind((config.host.as_str(), config.port)).await?;
    let addr = listener.local_addr()?;
    let master = Master {
        inner: Arc::new(Inner {
            state: Mutex::new(State::default()),
            throttle: Duration::from_secs_f64(config.poke_throttle_interval),
            worker_timeout: Duration::from_secs(config.worker_timeout),
        }),
    };
    let (stop_tx, mut stop_rx) = oneshot::channel::<()>();
    let ping_every = Duration::from_secs(config.ping_interval);
    let done = tokio::spawn(async move {
        let handler: Arc<dyn Handler> = Arc::new(master.clone());
        let mut ticker = tokio::time::interval(ping_every);
        ticker.tick().await;
        let mut links: Vec<Arc<Link>> = Vec::new();
        loop {
            tokio::select! {
                accepted = listener.accept() => {
                    if let Ok((stream, peer)) = accepted {
                        let trusted = config.always_allow_localhost && is_localhost(&peer);
                        let session = Session::new(config.password.clone(), trusted);
                        links.retain(|l| !l.is_closed());
                        links.push(Link::spawn(stream, session, handler.clone(), MAX_REQUEST_FRAME, None));
                    }
                }
                _ = ticker.tick() => master.ping_workers(),
                _ = &mut stop_rx => break,
            }
        }
        for l in links {
            l.close();
        }
    });
    Ok(MasterHandle {
        addr,
        stop: Some(stop_tx),
        done,
    })
}

fn ok() -> Result<Value, String> {
    Ok(Value::String("ok".into()))
}

impl Master {
    async fn dispatch(&self, link: Arc<Link>, kind: &str, data: Value) -> Result<Value, String> {
        match kind {
            "register-worker" => self.register(link, &data),
            "poke" => self.poke(&data),
            "pause" => self.pause(&data, "pause").await,
            "continue" => self.pause(&data, "continue").await,
            "status" => Ok(self.status(&data).await),
            "run-manual" => self.run_manual(&data).await,
            "send-signal" => self.send_signal(&data).await,
            other => Err(format!("unknown request type: '{other}'")),
        }
    }

    /// Drops workers that sent nothing since the previous ping, then pings the rest.
    fn ping_workers(&self) {
        let st = self.inner.state.lock().unwrap();
        for w in &st.workers {
            if !w.link.ponged.swap(false, Ordering::Relaxed) {
                tracing::warn!(worker = %w.name, "jobd-master: worker did not answer the last ping; dropping it");
                w.link.close();
            } else {
                w.link.ping();
            }
        }
    }

    fn register(&self, link: Arc<Link>, data: &Value) -> Result<Value, String> {
        let targets = validate::targets(data)?.ok_or("missing required field targets")?;
        let name = match data.get("name") {
            Some(Value::String(s)) => s.clone(),
            _ => return Err("name is missing or invalid".into()),
        };
        let mut st = self.inner.state.lock().unwrap();
        let known = st.workers.iter_mut().find(|w| Arc::ptr_eq(&w.link, &link));
        match known {
            Some(w) => {
                w.name = name;
                w.targets = targets.clone();
            }
            None => {
                st.workers.push(Registered {
                    link: link.clone(),
                    name,
                    targets: targets.clone(),
                });
                let m = self.clone();
                let l = link.clone();
                tokio::spawn(async move {
                    l.closed().await;
                    let mut st = m.inner.state.lock().unwrap();
                    st.workers.retain(|w| !Arc::ptr_eq(&w.link, &l));
                    st.job_worker.retain(|_, w| !Arc::ptr_eq(w, &l));
                });
            }
        }
        let due: Vec<String> = targets
            .iter()
            .filter(|t| st.waiting_to_poke.contains(*t))
            .cloned()
            .collect();
        for t in &due {
            st.waiting_to_poke.remove(t);
        }
        drop(st);
        if !due.is_empty() {
            let timeout = self.inner.worker_timeout;
            tokio::spawn(async move {
                let _ = link
                    .request("poll", json!({"targets": due}), Some(timeout))
                    .await;
            });
        }
        ok()
    }

    fn poke(&self, data: &Value) -> Result<Value, String> {
        let targets = validate::targets(data)?.ok_or("missing required field targets")?;
        let flush_now = {
            let mut st = self.inner.state.lock().unwrap();
            st.to_poke.extend(targets);
            if st.flush_armed {
                None
            } else {
                let since = st.last_flush.map(|t| t.elapsed());
                match since {
                    Some(s) if s < self.inner.throttle => {
                        st.flush_armed = true;
                        Some(self.inner.throttle - s)
                    }
                    _ => Some(Duration::ZERO),
                }
            }
        };
        match flush_now {
            Some(Duration::ZERO) => self.flush(),
            Some(wait) => {
                let m = self.clone();
                tokio::spawn(async move {
                    tokio::time::sleep(wait).await;
                    m.inner.state.lock().unwrap().flush_armed = false;
                    m.flush();
                });
            }
            None => {}
        }
        ok()
    }

    /// Sends each worker a poll for the poked targets it serves (every such worker: with
    /// free-slot fetching and SKIP LOCKED they share the rows without hoarding).
    fn flush(&self) {
        let mut st = self.inner.state.lock().unwrap();
        st.last_flush = Some(Instant::now());
        let poked = std::mem::take(&mut st.to_poke);
        let mut served = BTreeSet::new();
        for w in &st.workers {
            let mine: Vec<String> = w
                .targets
                .iter()
                .filter(|t| poked.contains(*t))
                .cloned()
                .collect();
            if mine.is_empty() {
                continue;
            }
            served.extend(mine.iter().cloned());
            let link = w.link.clone();
            let timeout = self.inner.worker_timeout;
            tokio::spawn(async move {
                if let Err(e) = link
                    .request("poll", json!({"targets": mine}), Some(timeout))
                    .await
                {
                    tracing::warn!(error = %e, "jobd-master: poll to a worker failed");
                }
            });
        }
        for t in poked {
            if !served.contains(&t) {
                st.waiting_to_poke.insert(t);
            }
        }
    }

    async fn pause(&self, data: &Value, kind: &str) -> Result<Value, String> {
        let targets = validate::targets(data)?;
        let calls: Vec<(Arc<Link>, Value)> = {
            let st = self.inner.state.lock().unwrap();
            st.workers
                .iter()
                .filter_map(|w| match &targets {
                    None => Some((w.link.clone(), json!({}))),
                    Some(list) => {
                        let mine: Vec<&String> =
                            w.targets.iter().filter(|t| list.contains(t)).collect();
                        (!mine.is_empty()).then(|| (w.link.clone(), json!({"targets": mine})))
                    }
                })
                .collect()
        };
        let timeout = Some(self.inner.worker_timeout);
        let mut tasks = Vec::new();
        for (link, data) in calls {
            let kind = kind.to_string();
            tasks.push(tokio::spawn(async move {
                link.request(&kind, data, timeout).await
            }));
        }
        for t in tasks {
            if let Ok(Err(e)) = t.await {
                tracing::warn!(error = %e, "jobd-master: {kind} on a worker failed");
            }
        }
        ok()
    }

    async fn status(&self, data: &Value) -> Value {
        let poll = data.get("poll_workers").is_some_and(|v| match v {
            Value::Bool(b) => *b,
            Value::Number(n) => n.as_f64() != Some(0.0),
            Value::String(s) => !s.is_empty(),
            _ => false,
        });
        let workers: Vec<(Arc<Link>, String, Vec<String>)> = {
            let st = self.inner.state.lock().unwrap();
            st.workers
                .iter()
                .map(|w| (w.link.clone(), w.name.clone(), w.targets.clone()))
                .collect()
        };
        let timeout = Some(self.inner.worker_timeout);
        let mut tasks = Vec::new();
        for (link, _, _) in &workers {
            let link = link.clone();
            tasks.push(poll.then(|| {
                tokio::spawn(async move { link.request("status", json!({}), timeout).await })
            }));
        }
        let mut list = Vec::new();
        for ((link, name, targets), task) in workers.into_iter().zip(tasks) {
            let mut entry = Map::new();
            entry.insert("remoteAddr".into(), link.peer.ip().to_string().into());
            entry.insert("remotePort".into(), link.peer.port().into());
            entry.insert("targets".into(), json!(targets));
            entry.insert("name".into(), name.into());
            if let Some(task) = task {
                match task.await {
                    Ok(Ok(v)) => {
                        entry.insert("workerStatus".into(), v);
                    }
                    Ok(Err(e)) => {
                        entry.insert("workerStatus".into(), Value::Null);
                        entry.insert("workerStatusError".into(), e.to_string().into());
                    }
                    Err(e) => {
                        entry.insert("workerStatusError".into(), e.to_string().into());
                    }
                }
            }
            list.push(Value::Object(entry));
        }
        json!({"workers": list, "memoryUsage": memory_usage()})
    }

    /// One worker for `target`, rotating among those serving it.
    fn pick(&self, st: &mut State, target: &str) -> Option<(Arc<Link>, String)> {
        let serving: Vec<&Registered> = st
            .workers
            .iter()
            .filter(|w| w.targets.iter().any(|t| t == target))
            .collect();
        if serving.is_empty() {
            return None;
        }
        let w = serving[st.round_robin % serving.len()];
        let chosen = (w.link.clone(), w.name.clone());
        st.round_robin = st.round_robin.wrapping_add(1);
        Some(chosen)
    }

    async fn run_manual(&self, data: &Value) -> Result<Value, String> {
        let jobs = job_list(data, false)?;
        let mut errors: BTreeMap<u64, Value> = BTreeMap::new();
        let mut results: BTreeMap<u64, Value> = BTreeMap::new();
        let mut groups: Vec<(Arc<Link>, String, Vec<u64>)> = Vec::new();
        {
            let mut st = self.inner.state.lock().unwrap();
            let mut seen = BTreeSet::new();
            for (id, target, _) in jobs {
                if !seen.insert(id) {
                    continue;
                }
                match self.pick(&mut st, &target) {
                    None => {
                        errors.insert(
                            id,
                            format!("worker serving target '{target}' not found").into(),
                        );
                    }
                    Some((link, name)) => {
                        st.job_worker.insert(id, link.clone());
                        match groups.iter_mut().find(|g| Arc::ptr_eq(&g.0, &link)) {
                            Some(g) => g.2.push(id),
                            None => groups.push((link, name, vec![id])),
                        }
                    }
                }
            }
        }
        let mut tasks = Vec::new();
        for (link, name, ids) in groups {
            tasks.push(tokio::spawn(async move {
                let r = link.request("run-manual", json!({"ids": ids}), None).await;
                (name, ids, r)
            }));
        }
        for t in tasks {
            let Ok((name, ids, r)) = t.await else {
                continue;
            };
            {
                let mut st = self.inner.state.lock().unwrap();
                for id in &ids {
                    st.job_worker.remove(id);
                }
            }
            match r {
                Ok(v) => {
                    merge_ids(&mut results, v.get("jobs"));
                    merge_ids(&mut errors, v.get("errors"));
                }
                Err(e) => {
                    let msg = match e {
                        LinkError::Closed => format!("worker '{name}' disconnected"),
                        other => format!("worker '{name}': {other}"),
                    };
                    for id in ids {
                        errors.insert(id, msg.clone().into());
                    }
                }
            }
        }
        let mut out = Map::new();
        if !results.is_empty() {
            out.insert("jobs".into(), id_object(results));
        }
        if !errors.is_empty() {
            out.insert("errors".into(), id_object(errors));
        }
        Ok(Value::Object(out))
    }

    async fn send_signal(&self, data: &Value) -> Result<Value, String> {
        let jobs = job_list(data, true)?;
        let mut errors: BTreeMap<u64, Value> = BTreeMap::new();
        let mut delivered: BTreeMap<u64, bool> = BTreeMap::new();
        let mut calls: Vec<(Arc<Link>, String, Map<String, Value>)> = Vec::new();
        {
            let st = self.inner.state.lock().unwrap();
            for (id, target, signal) in jobs {
                let links: Vec<(Arc<Link>, String)> = match st.job_worker.get(&id) {
                    Some(l) => st
                        .workers
                        .iter()
                        .filter(|w| Arc::ptr_eq(&w.link, l))
                        .map(|w| (w.link.clone(), w.name.clone()))
                        .collect(),
                    None => st
                        .workers
                        .iter()
                        .filter(|w| w.targets.contains(&target))
                        .map(|w| (w.link.clone(), w.name.clone()))
                        .collect(),
                };
                if links.is_empty() {
                    errors.insert(
                        id,
                        format!("worker serving target '{target}' not found").into(),
                    );
                    continue;
                }
                delivered.insert(id, false);
                for (link, name) in links {
                    let entry = match calls.iter_mut().find(|c| Arc::ptr_eq(&c.0, &link)) {
                        Some(c) => c,
                        None => {
                            calls.push((link, name, Map::new()));
                            calls.last_mut().unwrap()
                        }
                    };
                    entry.2.insert(id.to_string(), signal.into());
                }
            }
        }
        let timeout = Some(self.inner.worker_timeout);
        let mut tasks = Vec::new();
        for (link, name, jobs) in calls {
            tasks.push(tokio::spawn(async move {
                let ids: Vec<u64> = jobs.keys().filter_map(|k| k.parse().ok()).collect();
                let r = link
                    .request("send-signal", json!({"jobs": jobs}), timeout)
                    .await;
                (name, ids, r)
            }));
        }
        let mut failures: BTreeMap<u64, String> = BTreeMap::new();
        for t in tasks {
            let Ok((name, ids, r)) = t.await else {
                continue;
            };
            match r {
                Ok(v) => {
                    for id in ids {
                        if v.get(id.to_string()).and_then(Value::as_bool) == Some(true) {
                            delivered.insert(id, true);
                        }
                    }
                }
                Err(e) => {
                    for id in ids {
                        failures.insert(id, format!("worker '{name}': {e}"));
                    }
                }
            }
        }
        let mut out = Map::new();
        for (id, ok) in &delivered {
            out.insert(id.to_string(), Value::Bool(*ok));
            if !ok {
                if let Some(f) = failures.remove(id) {
                    errors.insert(*id, f.into());
                }
            }
        }
        if !errors.is_empty() {
            out.insert("errors".into(), id_object(errors));
        }
        Ok(Value::Object(out))
    }
}

fn merge_ids(into: &mut BTreeMap<u64, Value>, from: Option<&Value>) {
    if let Some(Value::Object(m)) = from {
        for (k, v) in m {
            if let Ok(id) = k.parse::<u64>() {
                into.insert(id, v.clone());
            }
        }
    }
}

fn id_object(m: BTreeMap<u64, Value>) -> Value {
    Value::Object(m.into_iter().map(|(k, v)| (k.to_string(), v)).collect())
}

/// `data.jobs` of master run-manual / send-signal, checked in jobd's order.
fn job_list(data: &Value, with_signal: bool) -> Result<Vec<(u64, String, i64)>, String> {
    let Some(Value::Array(items)) = data.get("jobs") else {
        return Err("jobs must be array".into());
    };
    let mut out = Vec::new();
    for item in items {
        if !item.is_object() {
            return Err("data is not an object".into());
        }
        let id = validate::integer(item, "id")?;
        let signal = if with_signal {
            validate::integer(item, "signal")?
        } else {
            0
        };
        let target = validate::string(item, "target")?;
        let id = u64::try_from(id).map_err(|_| "'id' must be integer".to_string())?;
        out.push((id, target, signal));
    }
    Ok(out)
}

impl Handler for Master {
    fn handle(&self, link: Arc<Link>, kind: String, data: Value) -> ReplyFuture {
        let m = self.clone();
        Box::pin(async move { m.dispatch(link, &kind, data).await })
    }
}
