//! A server-wide cap on the memory held by request bodies still being received.
//!
//! A client declares a body's size before sending it (beanstalkd `put <bytes>`, a Gearman
//! packet header). Buffers grow only as bytes arrive, but many connections each sending
//! part of a large body could still hold far more memory than the machine has. Every
//! connection charges what it buffers of unfinished bodies to one [`InflightBudget`]; when
//! the budget is spent, the body is refused with the protocol's error instead of buffered.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// The default budget: 256 MiB of body bytes in flight, all connections together.
pub const DEFAULT_MAX_INFLIGHT_BYTES: u64 = 256 << 20;

/// Bytes of unfinished request bodies that all connections together may buffer.
#[derive(Debug)]
pub struct InflightBudget {
    limit: u64,
    used: AtomicU64,
}

impl InflightBudget {
    /// A budget of `limit` bytes, shared by the connections given a [`BodyCharge`] on it.
    pub fn new(limit: u64) -> Arc<InflightBudget> {
        Arc::new(InflightBudget {
            limit,
            used: AtomicU64::new(0),
        })
    }

    /// A budget that never runs out (tests, tools).
    pub fn unlimited() -> Arc<InflightBudget> {
        InflightBudget::new(u64::MAX)
    }

    pub fn limit(&self) -> u64 {
        self.limit
    }

    /// Bytes charged right now (for stats and tests).
    pub fn in_use(&self) -> u64 {
        self.used.load(Ordering::Relaxed)
    }

    /// Takes `bytes` more if they fit under the limit.
    fn take(&self, bytes: u64) -> bool {
        self.used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
                used.checked_add(bytes).filter(|&n| n <= self.limit)
            })
            .is_ok()
    }

    fn give_back(&self, bytes: u64) {
        self.used.fetch_sub(bytes, Ordering::AcqRel);
    }
}

/// What one connection holds of the budget for the body it is receiving. Dropping it (the
/// connection closing mid-body) gives it back.
#[derive(Debug)]
pub struct BodyCharge {
    budget: Arc<InflightBudget>,
    held: u64,
}

impl BodyCharge {
    pub fn new(budget: Arc<InflightBudget>) -> BodyCharge {
        BodyCharge { budget, held: 0 }
    }

    /// Raises what this connection holds to `bytes` (what it has buffered of the body so
    /// far). Returns false, holding what it held, if the budget cannot cover the rise.
    pub fn hold(&mut self, bytes: u64) -> bool {
        if bytes <= self.held {
            return true;
        }
        if !self.budget.take(bytes - self.held) {
            return false;
        }
        self.held = bytes;
        true
    }

    /// Gives everything held back: the body is complete (or refused).
    pub fn release(&mut self) {
        if self.held > 0 {
            self.budget.give_back(self.held);
            self.held = 0;
        }
    }

    /// Bytes held now.
    pub fn held(&self) -> u64 {
        self.held
    }
}

impl Drop for BodyCharge {
    fn drop(&mut self) {
        self.release();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn charges_share_one_limit_and_are_given_back() {
        let budget = InflightBudget::new(100);
        let mut a = BodyCharge::new(budget.clone());
        let mut b = BodyCharge::new(budget.clone());
        assert!(a.hold(60));
        assert!(a.hold(60), "holding the same again costs nothing");
        assert!(!b.hold(41), "over the limit together");
        assert_eq!(b.held(), 0);
        assert!(b.hold(40));
        assert_eq!(budget.in_use(), 100);
        a.release();
        assert_eq!(budget.in_use(), 40);
        drop(b);
        assert_eq!(budget.in_use(), 0);
    }

    #[test]
    fn an_unlimited_budget_never_refuses() {
        let mut c = BodyCharge::new(InflightBudget::unlimited());
        assert!(c.hold(1 << 40));
        assert!(c.hold(u64::MAX));
    }
}
