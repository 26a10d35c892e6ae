//! Running jobs: each job the scheduler lets start gets a task that marks its row
//! `running` (unless its fetch already did), launches it, and stores its end.

use std::sync::atomic::Ordering;
use std::time::Duration;

use jobyard_broker::ProtocolMetrics;

use super::metrics;
use super::targets::Start;
use super::timing::JobClock;
use super::Worker;
use crate::launch::{self, Outcome};

impl Worker {
    pub(super) fn start_ready(&self) {
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

    pub(super) async fn run_job(&self, start: Start) {
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
            Some(true) => match launch::start(&self.inner.spec, id) {
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
                        let command = launch::argv(&self.inner.spec.template, id);
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
}
