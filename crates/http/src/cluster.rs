//! `GET /v1/cluster`: this node's place among the nodes sharing its storage (docs/postgres.md).
//! Only a leading node serves HTTP today, so `role` is always `"leader"` here; a server on
//! the file log is a cluster of one, with no name and epoch 0.

use axum::extract::State;
use axum::Json;
use serde_json::{json, Value};

use crate::state::Api;

/// `GET /v1/cluster`: `role`, `epoch`, `leader`, `node`, `lag_ms` and the live `nodes`.
pub(crate) async fn cluster(State(api): State<Api>) -> Json<Value> {
    let Some(leadership) = api.broker.leadership() else {
        return Json(json!({
            "role": "leader",
            "epoch": 0,
            "leader": null,
            "node": null,
            "lag_ms": 0,
            "nodes": [],
        }));
    };
    let nodes: Vec<Value> = leadership
        .nodes()
        .into_iter()
        .map(|n| json!({ "node": n.node, "role": n.role }))
        .collect();
    Json(json!({
        "role": "leader",
        "epoch": leadership.epoch(),
        "leader": leadership.node(),
        "node": leadership.node(),
        // The leader's engine is the log's writer: it is never behind.
        "lag_ms": 0,
        "nodes": nodes,
    }))
}
