//! What this node knows of the cluster sharing its PostgreSQL storage, whatever its role:
//! who leads, where the leader's listeners are, how far this node's engine is behind, and
//! the live nodes. Written by the storage (standby follower, lease keeper), read by
//! `GET /v1/cluster`, `GET /v1/health`, the dashboard and a standby's forwarders. Plain
//! data, so it exists with or without the `postgres` feature.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::RwLock;
use std::time::{Duration, Instant};

use super::leadership::ClusterNode;

/// A node's role in the cluster.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// Connecting to PostgreSQL, or recovering: serves nothing yet.
    Starting,
    /// Follows the log; forwards clients to the leader.
    Standby,
    /// Holds the lease: runs the engine and writes the log.
    Leader,
}

impl Role {
    /// The role as `GET /v1/cluster` and the `nodes` table spell it.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Starting => "starting",
            Role::Standby => "standby",
            Role::Leader => "leader",
        }
    }
}

/// Where a node's listeners accept clients (`HOST:PORT`), as it advertises them in the
/// `nodes` table (`addrs`, JSON) so standbys can forward to the leader. `None`: that
/// protocol's listener is off.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Addrs {
    pub beanstalk: Option<String>,
    pub gearman: Option<String>,
    pub http: Option<String>,
}

/// A snapshot of [`ClusterView`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClusterState {
    /// This node's name (`--node-name`).
    pub node: String,
    pub role: Role,
    /// The current leader's fencing epoch as this node last saw it (0: none yet).
    pub epoch: u64,
    /// The leading node's name, if one leads.
    pub leader: Option<String>,
    /// The leader's advertised listeners (empty while unknown).
    pub leader_addrs: Addrs,
    /// How far this node's engine is behind the last committed batch, in milliseconds
    /// (0 on the leader).
    pub lag_ms: u64,
    /// The live nodes, sorted by name.
    pub nodes: Vec<ClusterNode>,
}

/// This node's view of the cluster, shared between the storage that updates it and the
/// front ends that show it.
///
/// The contract with the server: while [`Role::Starting`] or [`Role::Standby`], the
/// storage (inside `Broker::open`, which blocks until this node leads) keeps it current
/// at least every 250 ms (the lease poll): the leader, its advertised [`Addrs`], the live
/// nodes; `lag_ms` is computed at each [`ClusterView::get`], so it grows even while the
/// follower is busy applying a large batch. Once `Broker::open` returns the role is
/// [`Role::Leader`] for good (a leader that loses the lease exits), and the lease keeper
/// refreshes the live nodes every second.
#[derive(Debug)]
pub struct ClusterView {
    state: RwLock<ClusterState>,
    /// Origin of `behind_since_ns`.
    base: Instant,
    /// When the oldest committed batch this node's engine has not applied was first known
    /// to exist, in nanoseconds after `base`; [`CAUGHT_UP`] when there is none.
    behind_since_ns: AtomicU64,
}

/// `behind_since_ns` when the engine has applied every batch it knows of.
const CAUGHT_UP: u64 = u64::MAX;

impl ClusterView {
    /// A node named `node` that has not reached PostgreSQL yet.
    pub fn new(node: String) -> ClusterView {
        ClusterView {
            state: RwLock::new(ClusterState {
                node,
                role: Role::Starting,
                epoch: 0,
                leader: None,
                leader_addrs: Addrs::default(),
                lag_ms: 0,
                nodes: Vec::new(),
            }),
            base: Instant::now(),
            behind_since_ns: AtomicU64::new(CAUGHT_UP),
        }
    }

    /// The current state (a copy: readers never hold the lock), with `lag_ms` as of now.
    pub fn get(&self) -> ClusterState {
        let mut state = self.state.read().unwrap_or_else(|e| e.into_inner()).clone();
        state.lag_ms = self.lag().as_millis() as u64;
        state
    }

    /// How far this node's engine is behind the log: the time since the oldest committed
    /// batch it has not applied was first known to exist (a notification of the leader's
    /// commit, or a read that found it), on this node's monotonic clock; zero when it has
    /// applied every batch it knows of, and always on the leader. One atomic and a clock
    /// read (vDSO), so front ends may ask as often as they like.
    pub fn lag(&self) -> Duration {
        match self.behind_since_ns.load(Ordering::Acquire) {
            CAUGHT_UP => Duration::ZERO,
            since => self
                .base
                .elapsed()
                .saturating_sub(Duration::from_nanos(since)),
        }
    }

    /// Records when the oldest batch not yet applied was first known to exist (`None`:
    /// every known batch is applied).
    pub fn set_behind_since(&self, since: Option<Instant>) {
        let ns = match since {
            Some(at) => at.saturating_duration_since(self.base).as_nanos() as u64,
            None => CAUGHT_UP,
        };
        self.behind_since_ns.store(ns, Ordering::Release);
    }

    /// Changes the state in place.
    pub fn update(&self, change: impl FnOnce(&mut ClusterState)) {
        change(&mut self.state.write().unwrap_or_else(|e| e.into_inner()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lag_counts_from_the_oldest_unapplied_batch_and_is_zero_when_caught_up() {
        let view = ClusterView::new("a:1".into());
        assert_eq!(view.get().lag_ms, 0);
        view.set_behind_since(Some(Instant::now()));
        std::thread::sleep(Duration::from_millis(30));
        let lag = view.get().lag_ms;
        assert!((30..60_000).contains(&lag), "{lag}");
        view.set_behind_since(None);
        assert_eq!(view.get().lag_ms, 0);
    }

    #[test]
    fn updates_are_seen_by_readers() {
        let view = ClusterView::new("a:1".into());
        assert_eq!(view.get().role, Role::Starting);
        view.update(|s| {
            s.role = Role::Standby;
            s.leader = Some("b:2".into());
        });
        let state = view.get();
        assert_eq!(
            (state.role, state.leader.as_deref()),
            (Role::Standby, Some("b:2"))
        );
    }
}
