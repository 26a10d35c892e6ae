//! Gearman functions: the queues Gearman knows by name, their `maxqueue` limits, and the
//! priority levels Gearman maps onto engine priorities.

use bytes::Bytes;
use jobyard_broker::Txn;
use jobyard_engine::QueueId;

use crate::registry::Registry;
use crate::{PRI_LOW, PRI_NORMAL};

/// A function known to Gearman (created by a submit, CAN_DO or `create function`).
#[derive(Debug, Default)]
pub(crate) struct Function {
    /// maxqueue limits for HIGH, NORMAL, LOW; 0 = unlimited.
    pub limits: [u32; 3],
}

/// Gearman priority level (0 HIGH, 1 NORMAL, 2 LOW) of an engine priority.
pub(crate) fn level(pri: u32) -> usize {
    match pri {
        p if p < PRI_NORMAL => 0,
        PRI_LOW => 2,
        _ => 1,
    }
}

/// Jobs in a queue: queued, delayed, buried and running.
pub(crate) fn total_jobs(txn: &Txn<'_>, q: QueueId) -> usize {
    let queue = txn.queue(q);
    queue.ready_len() + queue.delayed_len() + queue.buried_len() + queue.reserved as usize
}

/// The function's queue, registering (and pinning) it as a Gearman function if new:
/// functions are never removed implicitly, only by `drop function`.
pub(crate) fn ensure_function(txn: &mut Txn<'_>, reg: &mut Registry, name: &[u8]) -> QueueId {
    let q = txn.queue_id_or_create(name);
    if !reg.functions.contains_key(name) {
        txn.pin(q);
        reg.functions
            .insert(Bytes::copy_from_slice(name), Default::default());
    }
    q
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::PRI_HIGH;

    #[test]
    fn priority_levels_round_trip() {
        assert_eq!(level(PRI_HIGH), 0);
        assert_eq!(level(PRI_NORMAL), 1);
        assert_eq!(level(PRI_LOW), 2);
        assert_eq!(level(5000), 1);
    }
}
