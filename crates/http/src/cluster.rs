//! `GET /v1/cluster`: this node's place among the nodes sharing its storage (docs/postgres.md).
//! The document is built by [`cluster_document`] from a [`ClusterState`], so a leader's
//! route and a standby's front door (which answers without an engine) say the same thing;
//! a server on the file log is a cluster of one, with no name and epoch 0.

use axum::extract::State;
use axum::Json;
use jobyard_broker::{ClusterNode, ClusterState};
use serde_json::{json, Value};

use crate::state::Api;

/// The `/v1/cluster` document of `state`: `role`, `epoch`, `leader`, `node`, `lag_ms` and
/// the live `nodes`, each with its `node` and `role`.
pub fn cluster_document(state: &ClusterState) -> Value {
    json!({
        "role": state.role.as_str(),
        "epoch": state.epoch,
        "leader": state.leader,
        "node": state.node,
        "lag_ms": state.lag_ms,
        "nodes": nodes_document(&state.nodes),
    })
}

fn nodes_document(nodes: &[ClusterNode]) -> Vec<Value> {
    nodes
        .iter()
        .map(|n| json!({ "node": n.node, "role": n.role }))
        .collect()
}

/// `GET /v1/cluster`: `role`, `epoch`, `leader`, `node`, `lag_ms` and the live `nodes`,
/// from the node's cluster view (which the lease keeper keeps current).
pub(crate) async fn cluster(State(api): State<Api>) -> Json<Value> {
    match api.broker.cluster_view() {
        Some(view) => Json(cluster_document(&view.get())),
        None => Json(json!({
            "role": "leader",
            "epoch": 0,
            "leader": null,
            "node": null,
            "lag_ms": 0,
            "nodes": [],
        })),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use jobyard_broker::{Addrs, Role};

    #[test]
    fn a_standby_document_names_its_leader_and_lag() {
        let state = ClusterState {
            node: "b".into(),
            role: Role::Standby,
            epoch: 4,
            leader: Some("a".into()),
            leader_addrs: Addrs::default(),
            lag_ms: 12,
            nodes: vec![
                ClusterNode {
                    node: "a".into(),
                    role: "leader".into(),
                },
                ClusterNode {
                    node: "b".into(),
                    role: "standby".into(),
                },
            ],
        };
        assert_eq!(
            cluster_document(&state),
            json!({
                "role": "standby", "epoch": 4, "leader": "a", "node": "b", "lag_ms": 12,
                "nodes": [{"node": "a", "role": "leader"}, {"node": "b", "role": "standby"}],
            })
        );
    }
}
