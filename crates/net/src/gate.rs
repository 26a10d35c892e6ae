//! The connection limit and the shutdown signal, for every kind of session.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::{watch, OwnedSemaphorePermit, Semaphore};

use crate::placement::Placement;

/// Admits sessions up to a limit shared by all front ends, and tells them when to stop.
#[derive(Clone)]
pub struct Gate {
    slots: Arc<Semaphore>,
    max: usize,
    shutdown: watch::Receiver<bool>,
    stop: Arc<watch::Sender<bool>>,
    last_refusal_log: Arc<AtomicU64>,
    started: Instant,
    placement: Option<Arc<Placement>>,
}

/// One admitted session. Dropping it frees the place.
pub struct Slot {
    _permit: OwnedSemaphorePermit,
}

impl Gate {
    /// A gate for at most `max` sessions at once, across all front ends.
    pub fn new(max: usize) -> Gate {
        let (tx, rx) = watch::channel(false);
        Gate {
            slots: Arc::new(Semaphore::new(max)),
            max,
            shutdown: rx,
            stop: Arc::new(tx),
            last_refusal_log: Arc::new(AtomicU64::new(0)),
            started: Instant::now(),
            placement: None,
        }
    }

    /// The same gate with byte-stream connections served by the adaptive thread model
    /// (`None`: on the runtime their accept loop runs on, as before).
    pub fn placed_by(mut self, placement: Option<Arc<Placement>>) -> Gate {
        self.placement = placement;
        self
    }

    /// Where byte-stream connections are placed, with the adaptive thread model.
    pub fn placement(&self) -> Option<Arc<Placement>> {
        self.placement.clone()
    }

    /// A place for a new session, or `None` at the limit (logged at most once a second).
    pub fn try_enter(&self, who: &str) -> Option<Slot> {
        match self.slots.clone().try_acquire_owned() {
            Ok(permit) => Some(Slot { _permit: permit }),
            Err(_) => {
                let now = self.started.elapsed().as_millis() as u64 + 1;
                let last = self.last_refusal_log.load(Ordering::Relaxed);
                if last == 0 || now.saturating_sub(last) > 1000 {
                    self.last_refusal_log.store(now, Ordering::Relaxed);
                    tracing::warn!("connection limit of {} reached: refusing {who}", self.max);
                }
                None
            }
        }
    }

    /// Resolves when the server starts shutting down (at once if it already has).
    pub fn shutdown_signal(&self) -> watch::Receiver<bool> {
        self.shutdown.clone()
    }

    /// Whether the server is shutting down.
    pub fn is_shutting_down(&self) -> bool {
        *self.shutdown.borrow()
    }

    /// Tells every front end and session to stop, then waits (up to `grace`) until every
    /// session has given its place back. Returns false if some did not in time.
    pub async fn shut_down(&self, grace: Duration) -> bool {
        let _ = self.stop.send(true);
        let all = self.max.min(u32::MAX as usize) as u32;
        tokio::time::timeout(grace, self.slots.acquire_many(all))
            .await
            .is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn places_are_limited_and_shutdown_waits_for_them() {
        let gate = Gate::new(2);
        let a = gate.try_enter("a").unwrap();
        let _b = gate.try_enter("b").unwrap();
        assert!(gate.try_enter("c").is_none());
        drop(a);
        let c = gate.try_enter("c").unwrap();
        let mut signal = gate.shutdown_signal();
        assert!(
            !gate.shut_down(Duration::from_millis(10)).await,
            "two still open"
        );
        assert!(gate.is_shutting_down());
        signal.changed().await.unwrap_or(());
        drop(c);
        drop(_b);
        assert!(gate.shut_down(Duration::from_secs(1)).await);
    }
}
