//! Pokes: gathered over the throttle interval, then sent as polls to every worker serving
//! a poked target (or kept until one registers).

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::{ok, Master};
use crate::protocol::validate;

impl Master {
    pub(super) fn poke(&self, data: &Value) -> Result<Value, String> {
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
            let link = w.connection.clone();
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
}
