//! Every route the API serves, in one table: the router is built from it, and a test checks
//! it against the OpenAPI description (docs/openapi.json), both ways.

use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, patch, post, MethodRouter};
use axum::{Json, Router};
use serde_json::Value;

use crate::error::ApiError;
use crate::extract::PathText;
use crate::flows::definitions;
use crate::limits::MAX_URI_BYTES;
use crate::state::{Api, Command};
use crate::{cluster, dead_letters, flows, jobs, leases, queue_policy, queues, schedules};

/// (method, path, handler) of every route.
pub fn table() -> Vec<(&'static str, &'static str, MethodRouter<Api>)> {
    vec![
        ("GET", "/v1/health", get(health)),
        ("GET", "/v1/cluster", get(cluster::cluster)),
        ("GET", "/v1/queues", get(queues::list_queues)),
        ("GET", "/v1/queues/{queue}", get(queues::queue_counts)),
        ("POST", "/v1/queues/{queue}/jobs", post(jobs::put)),
        ("GET", "/v1/queues/{queue}/jobs", get(queues::list_jobs)),
        (
            "GET",
            "/v1/queues/{queue}/policy",
            get(queue_policy::get_policy),
        ),
        (
            "PATCH",
            "/v1/queues/{queue}/policy",
            patch(queue_policy::set_policy),
        ),
        (
            "GET",
            "/v1/queues/{queue}/dead-letters",
            get(dead_letters::list),
        ),
        (
            "POST",
            "/v1/queues/{queue}/dead-letters/retry",
            post(dead_letters::retry),
        ),
        (
            "POST",
            "/v1/queues/{queue}/dead-letters/discard",
            post(dead_letters::discard),
        ),
        ("GET", "/v1/jobs/{id}", get(jobs::get)),
        ("DELETE", "/v1/jobs/{id}", delete(jobs::delete)),
        ("GET", "/v1/jobs/{id}/result", get(jobs::result)),
        ("POST", "/v1/lease", post(leases::lease)),
        ("POST", "/v1/jobs/{id}/heartbeat", post(leases::heartbeat)),
        ("POST", "/v1/jobs/{id}/complete", post(leases::complete)),
        ("POST", "/v1/jobs/{id}/fail", post(leases::fail)),
        ("POST", "/v1/jobs/{id}/release", post(leases::release)),
        ("POST", "/v1/jobs/{id}/route", post(leases::route)),
        ("POST", "/v1/workers", post(create_worker)),
        ("DELETE", "/v1/workers/{worker}", delete(delete_worker)),
        ("POST", "/v1/flows", post(definitions::declare)),
        ("GET", "/v1/flows", get(definitions::list)),
        ("GET", "/v1/flows/{flow}", get(definitions::describe)),
        ("POST", "/v1/flows/{flow}/jobs", post(flows::jobs::create)),
        ("GET", "/v1/flows/{flow}/jobs", get(flows::jobs::by_key)),
        ("POST", "/v1/flow-jobs/lookup", post(flows::lookup::lookup)),
        ("GET", "/v1/flow-jobs/{id}", get(flows::jobs::get)),
        ("DELETE", "/v1/flow-jobs/{id}", delete(flows::jobs::delete)),
        (
            "GET",
            "/v1/flow-jobs/{id}/position",
            get(flows::jobs::position),
        ),
        (
            "POST",
            "/v1/flow-jobs/{id}/heartbeat",
            post(flows::work::heartbeat),
        ),
        (
            "POST",
            "/v1/flow-jobs/{id}/complete",
            post(flows::work::complete),
        ),
        ("POST", "/v1/flow-jobs/{id}/fail", post(flows::work::fail)),
        ("POST", "/v1/flow-jobs/{id}/delay", post(flows::work::delay)),
        ("POST", "/v1/stages/{stage}/lease", post(flows::work::lease)),
        (
            "GET",
            "/v1/stages/{stage}/jobs",
            get(flows::jobs::stage_jobs),
        ),
    ]
    .into_iter()
    .chain(schedules::table())
    .collect()
}

/// The API's router over `api`.
pub fn router(api: Api) -> Router {
    let limit = api.request_limit;
    let mut router = Router::new();
    for (_, path, handler) in table() {
        router = router.route(path, handler);
    }
    router
        .fallback(|| async { ApiError::no_such_route() })
        .method_not_allowed_fallback(|| async { ApiError::method_not_allowed() })
        .layer(axum::middleware::from_fn(bound_uri))
        .layer(axum::extract::DefaultBodyLimit::max(limit))
        .with_state(api)
}

/// Refuses a path and query longer than [`MAX_URI_BYTES`] before any handler parses it.
async fn bound_uri(req: Request, next: Next) -> Response {
    let len = req.uri().path_and_query().map_or(0, |pq| pq.as_str().len());
    if len > MAX_URI_BYTES {
        return ApiError::uri_too_long().into_response();
    }
    next.run(req).await
}

/// `GET /v1/health`: the server answers, and what it is. Its `role` is `leader` here
/// (this route is served by a node that has its engine; a standby's front door answers
/// health itself), as `GET /v1/cluster` says; a server on the file log is a cluster of one.
async fn health(State(api): State<Api>) -> Json<Value> {
    api.count(Command::Health);
    let role = match api.broker.cluster_view() {
        Some(view) => view.get().role.as_str(),
        None => "leader",
    };
    Json(serde_json::json!({
        "status": if api.broker.draining() { "draining" } else { "ok" },
        "role": role,
        "version": env!("CARGO_PKG_VERSION"),
        "workers": api.workers.count(),
    }))
}

/// `POST /v1/workers`: a worker session, to lease jobs for.
async fn create_worker(State(api): State<Api>) -> Result<(StatusCode, Json<Value>), ApiError> {
    api.count(Command::CreateWorker);
    let worker = api.workers.create(&api.broker, &api.gate, &api.metrics)?;
    Ok((
        StatusCode::CREATED,
        Json(serde_json::json!({
            "worker": worker.id(),
            "idle_timeout_ms": api.workers.idle_timeout().as_millis() as u64,
        })),
    ))
}

/// `DELETE /v1/workers/{worker}`: ends a session; the jobs it holds are ready again.
async fn delete_worker(
    State(api): State<Api>,
    PathText(id): PathText,
) -> Result<Json<Value>, ApiError> {
    api.count(Command::DeleteWorker);
    let worker = api.workers.remove(&id)?;
    let held = api.broker.lock().held_by(worker.conn).count();
    Ok(Json(serde_json::json!({ "worker": id, "released": held })))
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;

    /// The OpenAPI description in docs/ lists exactly the routes the router serves.
    #[test]
    fn the_openapi_description_matches_the_routes() {
        let text = include_str!("../../../docs/openapi.json");
        let doc: Value = serde_json::from_str(text).expect("docs/openapi.json is JSON");
        let mut described = BTreeSet::new();
        for (path, item) in doc["paths"].as_object().expect("paths") {
            for method in item.as_object().expect("path item").keys() {
                if ["get", "post", "put", "delete", "patch"].contains(&method.as_str()) {
                    described.insert((method.to_uppercase(), path.clone()));
                }
            }
        }
        let served: BTreeSet<(String, String)> = table()
            .into_iter()
            .map(|(m, p, _)| (m.to_string(), p.to_string()))
            .collect();
        assert_eq!(described, served);
    }
}
