//! Running jobs: each job the scheduler lets start gets a task that marks its row
//! `running` (unless its fetch already did), launches it (again after a failed attempt,
//! under its target's retry policy), and stores its end.

use std::sync::atomic::Ordering;
use std::time::Duration;

use jobyard_broker::{LabelledRow, ProtocolMetrics};

use super::metrics;
use super::retries::{Attempts, Next};
use super::scheduler::EngineScheduler;
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

    /// Runs one started job to its stored end, then answers its run-manual caller, if any.
    pub(super) async fn run_job(&self, start: Start) {
        let id = start.id;
        let premarked = self.inner.state.lock().unwrap().premarked.remove(&id);
        let mut clock = JobClock::new(premarked);
        let marked = match premarked {
            Some(_) => Some(true),
            None => self.mark_running(id).await,
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
            Some(true) => Ok(self.attempts(&start, figures.as_deref(), &mut clock).await),
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
            self.count_end(figures.as_deref(), o);
        }
        let waiter = self.inner.state.lock().unwrap().waiters.remove(&id);
        if let Some(tx) = waiter {
            let _ = tx.send(outcome);
        }
    }

    /// Marks a row no fetch marked `running`, retrying with growing pauses while the
    /// database fails: whether the row was still there to mark, `None` if shutdown came
    /// first.
    async fn mark_running(&self, id: u64) -> Option<bool> {
        let mut pause = Duration::from_millis(100);
        loop {
            match self.inner.store.mark_running(id).await {
                Ok(m) => return Some(m),
                Err(e) => {
                    self.inner.metrics.db_error(true);
                    tracing::warn!(id, error = %e, "jobd: marking a job running failed; retrying");
                    if self.inner.shutting_down.load(Ordering::SeqCst) {
                        return None;
                    }
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(Duration::from_secs(10));
                }
            }
        }
    }

    /// Launches the job, and again after each failed attempt while its target's retry
    /// policy allows ([`retries`]); the last launch's end is the row's. After the last
    /// failed attempt under a policy with a dead-letter queue, the dead letter is in the
    /// log before this returns (so before the row is written failed).
    async fn attempts(
        &self,
        start: &Start,
        figures: Option<&LabelledRow>,
        clock: &mut JobClock,
    ) -> Outcome {
        let mut attempts = Attempts::new(&start.target);
        loop {
            let outcome = self.launch(start, figures, clock).await;
            let (policy, holder, signalled) = {
                let mut st = self.inner.state.lock().unwrap();
                let signalled = st.signalled.remove(&start.id);
                (
                    st.sched.retry_policy(&start.target),
                    st.sched.session(),
                    signalled,
                )
            };
            let counts = !signalled && !self.inner.shutting_down.load(Ordering::SeqCst);
            let policy = policy.filter(|_| counts);
            let next = attempts.after(
                &outcome,
                policy.as_ref(),
                start.job,
                holder,
                &self.inner.name,
            );
            match next {
                Next::Store => return outcome,
                Next::Retry(pause) => {
                    self.inner.state.lock().unwrap().sched.launch_ended(start);
                    tracing::info!(id = start.id, target = %start.target, ?pause,
                        "jobd: the launch failed; launching it again after the backoff");
                    if !self.backoff(pause).await {
                        return outcome;
                    }
                }
                Next::GiveUp(dead_letter) => {
                    if let Some(queue) = dead_letter {
                        let broker = self.inner.state.lock().unwrap().sched.broker().clone();
                        let history = attempts.into_history();
                        let job =
                            EngineScheduler::put_dead_letter(broker, start, &queue, history).await;
                        tracing::info!(id = start.id, target = %start.target, dead_letter = job,
                            "jobd: the last attempt failed; a dead letter keeps its failures");
                    }
                    return outcome;
                }
            }
        }
    }

    /// Waits out a retry's backoff; false if the worker began shutting down meanwhile
    /// (the row is then written with the last launch's end).
    async fn backoff(&self, pause: Duration) -> bool {
        let until = tokio::time::Instant::now() + pause;
        while tokio::time::Instant::now() < until {
            if self.inner.shutting_down.load(Ordering::SeqCst) {
                return false;
            }
            let step = until - tokio::time::Instant::now();
            tokio::time::sleep(step.min(Duration::from_millis(100))).await;
        }
        !self.inner.shutting_down.load(Ordering::SeqCst)
    }

    /// Starts the job's launcher and waits for its end (a launcher that cannot start is
    /// an end too).
    async fn launch(
        &self,
        start: &Start,
        figures: Option<&LabelledRow>,
        clock: &mut JobClock,
    ) -> Outcome {
        let id = start.id;
        let running = match launch::start(&self.inner.spec, id) {
            Ok(running) => running,
            Err(msg) => {
                tracing::error!(id, "jobd: {msg}");
                self.inner.metrics.worker.inc(metrics::SPAWN_FAILURES);
                return Outcome::spawn_failed(msg);
            }
        };
        clock.launched();
        if let Some(f) = figures {
            f.inc(metrics::LAUNCHED);
            f.inc(metrics::RUNNING);
        }
        {
            let mut st = self.inner.state.lock().unwrap();
            st.running.insert(id, running.pgid);
            let command = launch::argv(&self.inner.spec.template, id);
            st.sched.launched(start, running.pgid, command);
        }
        let outcome = running.wait().await;
        self.inner.state.lock().unwrap().running.remove(&id);
        if let Some(f) = figures {
            f.dec(metrics::RUNNING);
        }
        outcome
    }

    /// Counts a stored end in the target's and the protocol's figures.
    fn count_end(&self, figures: Option<&LabelledRow>, outcome: &Outcome) {
        if let Some(f) = figures {
            f.inc(metrics::FINISHED);
            if !outcome.ok() {
                f.inc(metrics::FAILED);
            }
        }
        let p = &self.inner.metrics.protocol;
        ProtocolMetrics::inc(if outcome.ok() {
            &p.jobs_completed
        } else {
            &p.jobs_failed
        });
    }
}
