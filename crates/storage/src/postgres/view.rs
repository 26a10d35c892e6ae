//! What this node knows of the cluster sharing its PostgreSQL storage, whatever its role:
//! who leads, where the leader's listeners are, how far this node's engine is behind, and
//! the live nodes. Written by the storage (standby follower, lease keeper), read by
//! `GET /v1/cluster`, `GET /v1/health`, the dashboard and a standby's forwarders. Plain
//! data, so it exists with or without the `postgres` feature.

use std::sync::RwLock;

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
#[derive(Debug)]
pub struct ClusterView {
    state: RwLock<ClusterState>,
}

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
        }
    }

    /// The current state (a copy: readers never hold the lock).
    pub fn get(&self) -> ClusterState {
        self.state.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Changes the state in place.
    pub fn update(&self, change: impl FnOnce(&mut ClusterState)) {
        change(&mut self.state.write().unwrap_or_else(|e| e.into_inner()));
    }
}
