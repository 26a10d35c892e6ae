//! Flow definitions over the API: declare one at run time, list them, and read one with
//! its job counts per stage (what Guild's FlowMonitor gauges showed).

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use jobyard_engine::flows::{FlowDefinition, StageCounts};
use serde_json::{Map, Value};

use crate::error::ApiError;
use crate::extract::{JsonBody, PathText};
use crate::state::{Api, Command};

/// `POST /v1/flows`: declares a flow, or replaces the definition of one of that name.
/// Logged before the answer: the flow survives a restart.
pub async fn declare(
    State(api): State<Api>,
    JsonBody(body): JsonBody<Value>,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    api.count(Command::DeclareFlow);
    let text = serde_json::to_vec(&body).expect("a JSON value serializes");
    let def = FlowDefinition::parse_json(&text)?;
    let name = def.name.clone();
    let lsn = {
        let mut txn = api.broker.lock();
        let replaced = txn.flow_definition(&name).is_some();
        txn.define_flow(def);
        let lsn = txn.commit();
        (lsn, replaced)
    };
    api.broker.wait_durable(lsn.0).await;
    let status = if lsn.1 {
        StatusCode::OK
    } else {
        StatusCode::CREATED
    };
    Ok((
        status,
        Json(serde_json::json!({ "name": name, "replaced": lsn.1 })),
    ))
}

/// `GET /v1/flows`: every declared flow's definition.
pub async fn list(State(api): State<Api>) -> Json<Value> {
    api.count(Command::ListFlows);
    let txn = api.broker.lock();
    let flows: Vec<Value> = txn
        .flow_definitions()
        .map(|d| serde_json::to_value(d).expect("definitions serialize"))
        .collect();
    Json(serde_json::json!({ "flows": flows }))
}

/// `GET /v1/flows/{flow}`: a flow's definition and its jobs per stage and state.
pub async fn describe(
    State(api): State<Api>,
    PathText(flow): PathText,
) -> Result<Json<Value>, ApiError> {
    api.count(Command::FlowCounts);
    let txn = api.broker.lock();
    let counts = txn.flow_counts(&flow)?;
    let def = txn.flow_definition(&flow).expect("counted, so declared");
    Ok(Json(serde_json::json!({
        "flow": serde_json::to_value(def).expect("definitions serialize"),
        "stages": counts.iter().map(counts_json).collect::<Vec<_>>(),
    })))
}

fn counts_json(c: &StageCounts) -> Value {
    let by_priority: Map<String, Value> = c
        .waiting_by_priority
        .iter()
        .map(|(p, n)| (p.to_string(), Value::from(*n)))
        .collect();
    serde_json::json!({
        "stage": c.stage,
        "waiting": c.waiting_by_priority.values().sum::<u64>(),
        "waiting_by_priority": by_priority,
        "leased": c.leased,
        "delayed": c.delayed,
        "waiting_children": c.waiting_children,
        "done": c.done,
        "failed": c.failed,
    })
}
