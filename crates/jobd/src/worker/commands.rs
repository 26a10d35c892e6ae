//! The worker's requests (docs/jobd.md, "Protocol"): poll, pause, continue, status, add-target,
//! remove-target, set-target-concurrency and send-signal here, run-manual in
//! [`super::manual`]. The same handlers serve clients and the master.

use std::sync::Arc;

use serde_json::{json, Map, Value};

use super::Worker;
use crate::connection::{PeerConnection, ReplyFuture, RequestHandler};
use crate::launch;
use crate::protocol::{memory_usage, validate};

fn reply_ok() -> Result<Value, String> {
    Ok(Value::String("ok".into()))
}

impl Worker {
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

    pub(super) fn checked_targets(&self, data: &Value) -> Result<Vec<String>, String> {
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

    pub(super) fn poll(&self, data: &Value) -> Result<Value, String> {
        let targets = self.checked_targets(data)?;
        self.inner.state.lock().unwrap().pending.extend(targets);
        self.kick();
        reply_ok()
    }

    pub(super) fn pause(&self, data: &Value, paused: bool) -> Result<Value, String> {
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

    /// The `status` reply (jobd's `status` shape). `memoryUsage.rss` is real; the V8 heap
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

    pub(super) fn add_target(&self, data: &Value) -> Result<Value, String> {
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

    pub(super) fn remove_target(&self, data: &Value) -> Result<Value, String> {
        let target = validate::string(data, "target")?;
        {
            let mut st = self.inner.state.lock().unwrap();
            st.sched.remove(&target)?;
            st.pending.remove(&target);
        }
        self.reregister();
        reply_ok()
    }

    pub(super) fn set_concurrency(&self, data: &Value) -> Result<Value, String> {
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

    pub(super) fn send_signal(&self, data: &Value) -> Value {
        let entries: Vec<(String, Value)> = match data.get("jobs") {
            Some(Value::Object(m)) => m.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
            Some(Value::Array(a)) => a
                .iter()
                .enumerate()
                .map(|(i, v)| (i.to_string(), v.clone()))
                .collect(),
            _ => Vec::new(),
        };
        let mut st = self.inner.state.lock().unwrap();
        let mut out = Map::new();
        for (key, sig) in entries {
            let signal = match &sig {
                Value::Number(n) => n.as_i64().map(|n| n as i32),
                Value::String(s) => launch::signal_number(s),
                _ => None,
            };
            let id = key.parse::<u64>().ok();
            let pgid = id.and_then(|id| st.running.get(&id).copied());
            let delivered = match (pgid, signal) {
                (Some(pg), Some(sig)) => launch::signal_group(pg, sig),
                _ => false,
            };
            if let (true, Some(id)) = (delivered, id) {
                st.signalled.insert(id);
            }
            out.insert(key, Value::Bool(delivered));
        }
        Value::Object(out)
    }
}

impl RequestHandler for Worker {
    fn handle(&self, _from: Arc<PeerConnection>, kind: String, data: Value) -> ReplyFuture {
        let w = self.clone();
        Box::pin(async move { w.dispatch(&kind, data).await })
    }
}
