//! The engine's clock: one task that sleeps until the engine's next deadline.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use crate::Broker;

/// Ticks the engine whenever something is due. Never relies on client traffic: this is
/// what makes a lease expire on time even when its holder is silent.
pub(crate) async fn run(broker: Arc<Broker>) {
    loop {
        let next = {
            let mut txn = broker.lock();
            let now = Broker::now();
            let engine = txn.engine_core();
            engine.tick(now);
            let next = engine.next_deadline().unwrap_or(u64::MAX);
            broker.timer_at.store(next, Ordering::Relaxed);
            next
        };
        let now = Broker::now();
        // Wake at least once a minute so a wall-clock jump cannot stall timers for long.
        let wait = next.saturating_sub(now).min(60_000);
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(wait)) => {}
            _ = broker.timer_changed.notified() => {}
        }
    }
}
