//! What this node knows of its leadership of a PostgreSQL storage: its name and fencing
//! epoch, and how long it may still hand out jobs. Shared by the lease keeper (which
//! renews) and the broker (which gates hand-outs); plain data, so it exists with or
//! without the `postgres` feature.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// How long a lease lasts past its last renewal, on PostgreSQL's clock.
pub const LEASE: Duration = Duration::from_secs(3);

/// How much sooner than the lease the leader stops handing out jobs, on its own monotonic
/// clock: covers the two clocks running at slightly different rates and the time between
/// sending a renewal and PostgreSQL executing it.
pub const HAND_OUT_MARGIN: Duration = Duration::from_secs(1);

/// One live node of the cluster, as its heartbeat row says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClusterNode {
    /// The node's name (`--node-name`).
    pub node: String,
    /// `"leader"` or `"standby"`.
    pub role: String,
}

/// This node's leadership: fixed name and epoch, and a hand-out deadline that each
/// renewal pushes on. (The live nodes are in the [`super::ClusterView`].)
#[derive(Debug)]
pub struct Leadership {
    node: String,
    epoch: u64,
    /// Origin of `hand_out_until_ns`.
    base: Instant,
    /// Nanoseconds after `base` past which no job is handed out.
    hand_out_until_ns: AtomicU64,
}

impl Leadership {
    /// The leadership of `node` at `epoch`, taken by a statement sent at `sent`.
    pub fn new(node: String, epoch: u64, sent: Instant) -> Leadership {
        let leadership = Leadership {
            node,
            epoch,
            base: sent,
            hand_out_until_ns: AtomicU64::new(0),
        };
        leadership.renewed(sent);
        leadership
    }

    /// This node's name.
    pub fn node(&self) -> &str {
        &self.node
    }

    /// The fencing epoch this node leads with.
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// Whether the lease surely still holds, so a job may be handed out. Reads the
    /// monotonic clock (vDSO, no system call) and one atomic: a node stopped past its
    /// lease (SIGSTOP, a long pause) sees the deadline passed the moment it runs again,
    /// before any thread of its own could have noticed.
    pub fn may_hand_out(&self) -> bool {
        let now = self.base.elapsed().as_nanos() as u64;
        now < self.hand_out_until_ns.load(Ordering::Acquire)
    }

    /// A renewal sent at `sent` succeeded: PostgreSQL set the lease's end at least
    /// [`LEASE`] after that instant, so hand-outs may go on until the lease minus the margin.
    pub fn renewed(&self, sent: Instant) {
        let until = sent.saturating_duration_since(self.base) + LEASE - HAND_OUT_MARGIN;
        self.hand_out_until_ns
            .fetch_max(until.as_nanos() as u64, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hands_out_until_the_lease_minus_the_margin() {
        let sent = Instant::now() - (LEASE - HAND_OUT_MARGIN) - Duration::from_millis(1);
        let leadership = Leadership::new("a:1".into(), 7, sent);
        assert!(!leadership.may_hand_out());
        leadership.renewed(Instant::now());
        assert!(leadership.may_hand_out());
        assert_eq!(leadership.epoch(), 7);
    }
}
