//! Master run-manual: each job to one worker serving its target, the workers' answers
//! merged, a worker's error or disconnect reported per job.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use serde_json::{json, Map, Value};

use super::jobs::{id_object, job_list, merge_ids};
use super::Master;
use crate::connection::{PeerConnection, RequestError};

impl Master {
    pub(super) async fn run_manual(&self, data: &Value) -> Result<Value, String> {
        let jobs = job_list(data, false)?;
        let mut errors: BTreeMap<u64, Value> = BTreeMap::new();
        let mut results: BTreeMap<u64, Value> = BTreeMap::new();
        let mut groups: Vec<(Arc<PeerConnection>, String, Vec<u64>)> = Vec::new();
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
                        RequestError::Closed => format!("worker '{name}' disconnected"),
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
}
