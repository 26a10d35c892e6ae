//! run-manual: the caller's `manual` rows claimed, queued and run like fetched ones, and
//! answered with each job's outcome once its row is stored.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;

use serde_json::{json, Map, Value};
use tokio::sync::oneshot;

use super::Worker;
use crate::launch::{self, Outcome};
use crate::protocol::js_typeof;
use crate::store::Claimed;

impl Worker {
    pub(super) async fn run_manual(&self, data: &Value) -> Result<Value, String> {
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
        self.inner.metrics.rows_taken(claim.accepted.len());
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
        Ok(manual_reply(jobs, errors))
    }
}

/// run-manual's reply: each job's outcome under `jobs`, each id not run under `errors`.
fn manual_reply(jobs: BTreeMap<u64, Outcome>, errors: BTreeMap<u64, String>) -> Value {
    let mut out = Map::new();
    if !jobs.is_empty() {
        let mut m = Map::new();
        for (id, o) in jobs {
            m.insert(
                id.to_string(),
                json!({
                    "result": if o.ok() { "ok" } else { "fail" },
                    "code": o.code,
                    "signal": o.signal.map(launch::signal_name),
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
    Value::Object(out)
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
