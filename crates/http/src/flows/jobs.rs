//! Flow jobs over the API: create, read (by id, or by lookup attribute with children
//! resolved and a field projection), delete, and position in line.

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use jobyard_broker::Broker;
use jobyard_engine::flows::{FlowError, FlowJob, NewFlowJob};
use jobyard_engine::Engine;
use serde::Deserialize;
use serde_json::{Map, Value};

use crate::error::ApiError;
use crate::extract::{JsonBody, Params, PathText};
use crate::limits::{MAX_FIELDS_BYTES, MAX_IDEMPOTENCY_KEY_BYTES, MAX_PAGE};
use crate::state::{Api, Command};

/// `POST /v1/flows/{flow}/jobs`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateRequest {
    /// 1 (most urgent) to the first stage's `priorities`; 1 when absent.
    priority: Option<u32>,
    /// The job's parameters: the start of its state.
    params: Option<Map<String, Value>>,
    /// Creating again with the same key returns the first job instead of a new one.
    idempotency_key: Option<String>,
}

impl CreateRequest {
    /// Checks the bounds and names the job to create.
    pub(crate) fn checked(self, flow: String) -> Result<NewFlowJob, ApiError> {
        let params = self.params.unwrap_or_default();
        check_fields_size("params", &params)?;
        if let Some(key) = &self.idempotency_key {
            if key.is_empty() || key.len() > MAX_IDEMPOTENCY_KEY_BYTES {
                return Err(ApiError::bad_request(format!(
                    "idempotency_key is 1 to {MAX_IDEMPOTENCY_KEY_BYTES} bytes"
                )));
            }
        }
        Ok(NewFlowJob {
            flow,
            priority: self.priority.unwrap_or(1),
            params,
            idempotency_key: self.idempotency_key,
        })
    }
}

/// Refuses job fields larger than [`MAX_FIELDS_BYTES`] once serialized.
pub(crate) fn check_fields_size(what: &str, fields: &Map<String, Value>) -> Result<(), ApiError> {
    let size = serde_json::to_vec(fields).map_or(usize::MAX, |v| v.len());
    if size > MAX_FIELDS_BYTES {
        return Err(ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "fields_too_big",
            format!("{what} is larger than {MAX_FIELDS_BYTES} bytes once serialized"),
        ));
    }
    Ok(())
}

/// Creates a job in the flow's first stage; 201 with its id, or 200 with the id of the
/// job an earlier request with the same idempotency key created.
pub async fn create(
    State(api): State<Api>,
    PathText(flow): PathText,
    JsonBody(req): JsonBody<CreateRequest>,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    api.count(Command::CreateFlowJob);
    let new = req.checked(flow)?;
    // Parameters are a few KB at most: the usual job size, one atomic load.
    crate::jobs::refuse_new_jobs(&api, 0)?;
    let ((id, created), (lsn, handed_off)) = {
        let mut txn = api.broker.lock();
        let out = txn.create_flow_job(new, Broker::now())?;
        (out, txn.commit_handing_off())
    };
    crate::leasing::let_handed_lease_answer_first(handed_off).await;
    api.broker.wait_durable(lsn).await;
    let status = if created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok((
        status,
        Json(serde_json::json!({ "id": id, "created": created })),
    ))
}

/// Query of the reads: resolve children, and which fields to show.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct ReadQuery {
    /// Replace each `children:<stage>:jobs` list with the child jobs themselves.
    #[serde(default)]
    resolve_children: bool,
    /// Comma-separated field names: only these of the job state are shown.
    fields: Option<String>,
}

/// `GET /v1/flows/{flow}/jobs` also takes the lookup attribute and value.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LookupQuery {
    key: String,
    value: String,
    #[serde(default)]
    resolve_children: bool,
    fields: Option<String>,
}

/// `GET /v1/flow-jobs/{id}`.
pub async fn get(
    State(api): State<Api>,
    PathText(id): PathText,
    Params(q): Params<ReadQuery>,
) -> Result<Json<Value>, ApiError> {
    api.count(Command::GetFlowJob);
    let fields = projection(q.fields.as_deref());
    let txn = api.broker.lock();
    let job = txn
        .flow_job(&id)
        .ok_or_else(|| ApiError::from(FlowError::NotFound(id.clone())))?;
    Ok(Json(view(&txn, job, fields.as_deref(), q.resolve_children)))
}

/// `GET /v1/flows/{flow}/jobs?key=&value=`: the flow's jobs whose lookup attribute had that
/// value, oldest first (at most [`MAX_PAGE`]).
pub async fn by_key(
    State(api): State<Api>,
    PathText(flow): PathText,
    Params(q): Params<LookupQuery>,
) -> Result<Json<Value>, ApiError> {
    api.count(Command::FlowJobsByKey);
    let fields = projection(q.fields.as_deref());
    let txn = api.broker.lock();
    if txn.flow_definition(&flow).is_none() {
        return Err(FlowError::UnknownFlow(flow).into());
    }
    let jobs: Vec<Value> = txn
        .flow_jobs_by_lookup(&flow, &q.key, &q.value)
        .into_iter()
        .take(MAX_PAGE)
        .map(|job| view(&txn, job, fields.as_deref(), q.resolve_children))
        .collect();
    Ok(Json(serde_json::json!({ "jobs": jobs })))
}

/// `DELETE /v1/flow-jobs/{id}`: the job, its children and their lookup entries.
pub async fn delete(
    State(api): State<Api>,
    PathText(id): PathText,
) -> Result<Json<Value>, ApiError> {
    api.count(Command::DeleteFlowJob);
    let lsn = {
        let mut txn = api.broker.lock();
        if !txn.delete_flow_job(&id, Broker::now()) {
            return Err(FlowError::NotFound(id).into());
        }
        txn.commit()
    };
    api.broker.wait_durable(lsn).await;
    Ok(Json(serde_json::json!({ "id": id, "deleted": true })))
}

/// Query of a stage listing.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StageJobsQuery {
    limit: Option<usize>,
}

/// `GET /v1/stages/{stage}/jobs`: a stage's jobs in hand-out order (waiting, then
/// delayed, then leased), at most `limit` (1 to [`MAX_PAGE`], default [`MAX_PAGE`]) of each
/// state; what Guild's FlowMonitor shows.
pub async fn stage_jobs(
    State(api): State<Api>,
    PathText(stage): PathText,
    Params(q): Params<StageJobsQuery>,
) -> Result<Json<Value>, ApiError> {
    api.count(Command::StageJobs);
    let limit = q.limit.unwrap_or(MAX_PAGE);
    if !(1..=MAX_PAGE).contains(&limit) {
        return Err(ApiError::bad_request(format!("limit is 1 to {MAX_PAGE}")));
    }
    let txn = api.broker.lock();
    let jobs: Vec<Value> = txn
        .flow_stage_jobs(&stage, limit)
        .into_iter()
        .map(|j| {
            serde_json::json!({
                "id": j.id, "state": j.state, "priority": j.priority, "ready_at_ms": j.ready_at,
            })
        })
        .collect();
    Ok(Json(serde_json::json!({ "stage": stage, "jobs": jobs })))
}

/// `GET /v1/flow-jobs/{id}/position`.
pub async fn position(
    State(api): State<Api>,
    PathText(id): PathText,
) -> Result<Json<Value>, ApiError> {
    api.count(Command::FlowJobPosition);
    let txn = api.broker.lock();
    let p = txn
        .flow_position(&id)
        .ok_or_else(|| ApiError::from(FlowError::NotFound(id.clone())))?;
    Ok(Json(serde_json::json!({
        "id": id,
        "stage": p.stage,
        "state": p.state,
        "position": p.position,
        "ready_at_ms": p.ready_at,
    })))
}

/// The field names of a `fields` query (comma-separated); `None`: every field.
pub(super) fn projection(fields: Option<&str>) -> Option<Vec<String>> {
    fields.map(|f| {
        f.split(',')
            .filter(|s| !s.is_empty())
            .map(String::from)
            .collect()
    })
}

/// A flow job as the API shows it; `fields` limits the state shown.
pub(super) fn view(e: &Engine, job: &FlowJob, fields: Option<&[String]>, resolve: bool) -> Value {
    let mut state: Map<String, Value> = match fields {
        Some(keys) => keys
            .iter()
            .filter_map(|k| job.fields.get(k).map(|v| (k.clone(), v.clone())))
            .collect(),
        None => job.fields.clone(),
    };
    if resolve {
        for (key, value) in state.iter_mut() {
            if !(key.starts_with("children:") && key.ends_with(":jobs")) {
                continue;
            }
            if let Value::Array(ids) = value {
                let children: Vec<Value> = ids
                    .iter()
                    .filter_map(|id| e.flow_job(id.as_str()?))
                    .map(|child| view(e, child, None, false))
                    .collect();
                *value = Value::Array(children);
            }
        }
    }
    let mut out = Map::new();
    out.insert("id".into(), job.id.clone().into());
    out.insert("flow".into(), job.flow.clone().into());
    out.insert("stage".into(), job.stage.clone().into());
    out.insert("state".into(), e.flow_state(job).into());
    out.insert("priority".into(), job.priority.into());
    out.insert("created_ms".into(), job.created.into());
    if let Some(end) = job.ended {
        out.insert("ended_ms".into(), end.into());
    }
    if let Some(parent) = &job.parent {
        out.insert("parent".into(), parent.clone().into());
    }
    out.insert("fields".into(), Value::Object(state));
    Value::Object(out)
}
