//! Master send-signal: to the worker running the job when known, else to every worker
//! of its target.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::{json, Map, Value};

use super::jobs::{id_object, job_list};
use super::Master;
use crate::connection::PeerConnection;

impl Master {
    pub(super) async fn send_signal(&self, data: &Value) -> Result<Value, String> {
        let jobs = job_list(data, true)?;
        let mut errors: BTreeMap<u64, Value> = BTreeMap::new();
        let mut delivered: BTreeMap<u64, bool> = BTreeMap::new();
        let mut calls: Vec<(Arc<PeerConnection>, String, Map<String, Value>)> = Vec::new();
        {
            let st = self.inner.state.lock().unwrap();
            for (id, target, signal) in jobs {
                let links: Vec<(Arc<PeerConnection>, String)> = match st.job_worker.get(&id) {
                    Some(l) => st
                        .workers
                        .iter()
                        .filter(|w| Arc::ptr_eq(&w.connection, l))
                        .map(|w| (w.connection.clone(), w.name.clone()))
                        .collect(),
                    None => st
                        .workers
                        .iter()
                        .filter(|w| w.targets.contains(&target))
                        .map(|w| (w.connection.clone(), w.name.clone()))
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
