//! pause, continue and status: sent to every worker concerned, each answer awaited at
//! most `worker_timeout`, and merged.

use std::sync::Arc;

use serde_json::{json, Map, Value};

use super::{ok, Master};
use crate::connection::PeerConnection;
use crate::protocol::{memory_usage, validate};

impl Master {
    pub(super) async fn pause(&self, data: &Value, kind: &str) -> Result<Value, String> {
        let targets = validate::targets(data)?;
        let calls: Vec<(Arc<PeerConnection>, Value)> = {
            let st = self.inner.state.lock().unwrap();
            st.workers
                .iter()
                .filter_map(|w| match &targets {
                    None => Some((w.connection.clone(), json!({}))),
                    Some(list) => {
                        let mine: Vec<&String> =
                            w.targets.iter().filter(|t| list.contains(t)).collect();
                        (!mine.is_empty()).then(|| (w.connection.clone(), json!({"targets": mine})))
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

    pub(super) async fn status(&self, data: &Value) -> Value {
        let poll = data.get("poll_workers").is_some_and(|v| match v {
            Value::Bool(b) => *b,
            Value::Number(n) => n.as_f64() != Some(0.0),
            Value::String(s) => !s.is_empty(),
            _ => false,
        });
        let workers: Vec<(Arc<PeerConnection>, String, Vec<String>)> = {
            let st = self.inner.state.lock().unwrap();
            st.workers
                .iter()
                .map(|w| (w.connection.clone(), w.name.clone(), w.targets.clone()))
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
}
