//! Workers registering (and re-registering) their targets, and which of them a job of a
//! target goes to.

use std::sync::Arc;

use serde_json::{json, Value};

use super::{ok, Master, Registered, State};
use crate::connection::PeerConnection;
use crate::protocol::validate;

impl Master {
    pub(super) fn register(
        &self,
        link: Arc<PeerConnection>,
        data: &Value,
    ) -> Result<Value, String> {
        let targets = validate::targets(data)?.ok_or("missing required field targets")?;
        let name = match data.get("name") {
            Some(Value::String(s)) => s.clone(),
            _ => return Err("name is missing or invalid".into()),
        };
        let mut st = self.inner.state.lock().unwrap();
        let known = st
            .workers
            .iter_mut()
            .find(|w| Arc::ptr_eq(&w.connection, &link));
        match known {
            Some(w) => {
                w.name = name;
                w.targets = targets.clone();
            }
            None => {
                st.workers.push(Registered {
                    connection: link.clone(),
                    name,
                    targets: targets.clone(),
                });
                let m = self.clone();
                let l = link.clone();
                tokio::spawn(async move {
                    l.closed().await;
                    let mut st = m.inner.state.lock().unwrap();
                    st.workers.retain(|w| !Arc::ptr_eq(&w.connection, &l));
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

    /// One worker for `target`, rotating among those serving it.
    pub(super) fn pick(
        &self,
        st: &mut State,
        target: &str,
    ) -> Option<(Arc<PeerConnection>, String)> {
        let serving: Vec<&Registered> = st
            .workers
            .iter()
            .filter(|w| w.targets.iter().any(|t| t == target))
            .collect();
        if serving.is_empty() {
            return None;
        }
        let w = serving[st.round_robin % serving.len()];
        let chosen = (w.connection.clone(), w.name.clone());
        st.round_robin = st.round_robin.wrapping_add(1);
        Some(chosen)
    }
}
