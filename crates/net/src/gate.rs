//! The connection limit and the shutdown signal, for every kind of session.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use tokio::sync::futures::Notified;
use tokio::sync::{watch, Notify, OwnedSemaphorePermit, Semaphore};

use crate::placement::Placement;

/// Admits sessions up to a limit shared by all front ends, and tells them when to stop.
#[derive(Clone)]
pub struct Gate {
    slots: Arc<Semaphore>,
    max: usize,
    shutdown: watch::Receiver<bool>,
    stop: Arc<watch::Sender<bool>>,
    bell: Arc<StopBell>,
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
            bell: Arc::new(StopBell::default()),
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

    /// The same signal for byte-stream connections, which wait for it at every pause.
    pub fn stop_bell(&self) -> Arc<StopBell> {
        self.bell.clone()
    }

    /// Whether the server is shutting down.
    pub fn is_shutting_down(&self) -> bool {
        *self.shutdown.borrow()
    }

    /// Tells every front end and session to stop, then waits (up to `grace`) until every
    /// session has given its place back. Returns false if some did not in time.
    pub async fn shut_down(&self, grace: Duration) -> bool {
        self.bell.ring();
        let _ = self.stop.send(true);
        let all = self.max.min(u32::MAX as usize) as u32;
        tokio::time::timeout(grace, self.slots.acquire_many(all))
            .await
            .is_ok()
    }
}

/// The shutdown signal as byte-stream connections wait for it: rung once. A connection
/// polls its wait between every two turns, so the wait costs one load of a flag once it is
/// registered, where a `watch` channel's `changed()` took tokio's cooperative budget and
/// the channel's waiter lock on every poll (about 3 % of a job's instructions at moderate
/// load; docs/performance.md, "Instructions per job").
#[derive(Debug, Default)]
pub struct StopBell {
    rung: AtomicBool,
    bell: Notify,
}

impl StopBell {
    /// Tells every wait, now and later, that the server is stopping.
    pub fn ring(&self) {
        self.rung.store(true, Ordering::SeqCst);
        self.bell.notify_waiters();
    }

    /// Whether the bell has rung.
    pub fn rung(&self) -> bool {
        self.rung.load(Ordering::SeqCst)
    }

    /// Resolves once the bell rings (at once if it has). It registers the waker of its
    /// first poll and only checks the flag after that, so poll it from one task.
    pub fn wait(&self) -> StopWait<'_> {
        StopWait {
            bell: self,
            // Made before the flag is checked: a ring in between still completes it.
            notified: self.bell.notified(),
            registered: false,
        }
    }
}

pin_project_lite::pin_project! {
    /// See [`StopBell::wait`].
    pub struct StopWait<'a> {
        bell: &'a StopBell,
        #[pin]
        notified: Notified<'a>,
        registered: bool,
    }
}

impl Future for StopWait<'_> {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = self.project();
        if this.bell.rung() {
            return Poll::Ready(());
        }
        if !*this.registered {
            // Registers this task's waker with the bell; `ring` wakes it.
            if this.notified.poll(cx).is_ready() {
                return Poll::Ready(());
            }
            *this.registered = true;
        }
        Poll::Pending
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

    #[tokio::test]
    async fn a_stop_wait_polled_again_and_again_still_wakes_when_the_bell_rings() {
        let bell = Arc::new(StopBell::default());
        let waiting = bell.clone();
        let polls = Arc::new(AtomicU64::new(0));
        let counted = polls.clone();
        let waiter = tokio::spawn(async move {
            let wait = waiting.wait();
            tokio::pin!(wait);
            // Polled with a timer beside it, as the connection loop polls it beside its
            // socket: after the first poll only the flag is looked at.
            loop {
                tokio::select! {
                    _ = &mut wait => return,
                    _ = tokio::time::sleep(Duration::from_millis(1)) => {
                        counted.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
        });
        while polls.load(Ordering::Relaxed) < 5 {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        assert!(!waiter.is_finished(), "waits while the bell is silent");
        bell.ring();
        tokio::time::timeout(Duration::from_secs(10), waiter)
            .await
            .expect("the ring wakes the wait")
            .expect("the task ran");
        tokio::time::timeout(Duration::from_secs(10), bell.wait())
            .await
            .expect("a wait made after the ring ends at once");
    }
}
