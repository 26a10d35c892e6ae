//! Graceful shutdown: nothing new is taken, queued rows are handed back, running jobs get
//! their grace period and then signals, and every result is written before it returns.

use std::sync::atomic::Ordering;
use std::time::Duration;

use super::Worker;
use crate::launch;

impl Worker {
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

    pub(super) fn signal_all(&self, sig: i32) {
        let st = self.inner.state.lock().unwrap();
        for pg in st.running.values() {
            launch::signal_group(*pg, sig);
        }
    }

    pub(super) async fn wait_idle(&self, limit: Duration) -> bool {
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
}
