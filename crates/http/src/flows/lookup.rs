//! Many flow jobs in one request (`POST /v1/flow-jobs/lookup`): what a client asking for a
//! few hundred jobs at once (the Node client's `getJobs`) sends instead of one request
//! per id, each of which would want a connection of its own.

use axum::extract::State;
use axum::Json;
use serde::Deserialize;
use serde_json::Value;

use super::jobs::view;
use crate::error::ApiError;
use crate::extract::JsonBody;
use crate::limits::MAX_LOOKUP_IDS;
use crate::state::{Api, Command};

/// The body of a lookup.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LookupRequest {
    /// The flow job ids, at most [`MAX_LOOKUP_IDS`].
    ids: Vec<String>,
    /// Replace each `children:<stage>:jobs` list with the child jobs themselves.
    #[serde(default)]
    resolve_children: bool,
    /// Only these fields of each job's state; every field when absent.
    fields: Option<Vec<String>>,
}

/// `POST /v1/flow-jobs/lookup`: `{"jobs": [...], "missing": [...]}`, the jobs that exist
/// in the order asked (an id asked twice is answered twice) and the ids that name none,
/// all read under one hold of the engine lock, so they are one moment's view.
pub async fn lookup(
    State(api): State<Api>,
    JsonBody(req): JsonBody<LookupRequest>,
) -> Result<Json<Value>, ApiError> {
    api.count(Command::LookupFlowJobs);
    if req.ids.len() > MAX_LOOKUP_IDS {
        return Err(ApiError::bad_request(format!(
            "at most {MAX_LOOKUP_IDS} ids in one lookup, got {}",
            req.ids.len()
        )));
    }
    let fields = req.fields.as_deref();
    let txn = api.broker.lock();
    let mut jobs = Vec::with_capacity(req.ids.len());
    let mut missing = Vec::new();
    for id in &req.ids {
        match txn.flow_job(id) {
            Some(job) => jobs.push(view(&txn, job, fields, req.resolve_children)),
            None => missing.push(Value::from(id.as_str())),
        }
    }
    drop(txn);
    Ok(Json(
        serde_json::json!({ "jobs": jobs, "missing": missing }),
    ))
}

#[cfg(test)]
mod tests {
    use axum::http::StatusCode;
    use serde_json::{json, Value};

    use crate::limits::MAX_LOOKUP_IDS;
    use crate::test_support::{error_code, TestApi};

    /// An API with a one-stage flow `lf` and `n` jobs in it; their ids.
    async fn jobs(n: usize) -> (TestApi, Vec<String>) {
        let api = TestApi::new();
        let def = json!({ "name": "lf", "stages": [{ "name": "lf-only" }] });
        let (status, reply) = api.post("/v1/flows", def).await;
        assert_eq!(status, StatusCode::CREATED, "{reply}");
        let mut ids = Vec::new();
        for i in 0..n {
            let body = json!({ "params": { "n": i, "tag": "t" } });
            let (status, reply) = api.post("/v1/flows/lf/jobs", body).await;
            assert_eq!(status, StatusCode::CREATED, "{reply}");
            ids.push(reply["id"].as_str().expect("a flow job id").to_string());
        }
        (api, ids)
    }

    fn ids_of(reply: &Value) -> Vec<&str> {
        reply["jobs"]
            .as_array()
            .expect("a jobs list")
            .iter()
            .map(|j| j["id"].as_str().expect("an id"))
            .collect()
    }

    #[tokio::test]
    async fn found_jobs_come_in_the_order_asked_and_missing_ids_apart() {
        let (api, ids) = jobs(3).await;
        let asked = json!({ "ids": [ids[2], "lf:nope", ids[0], ids[2]] });
        let (status, reply) = api.post("/v1/flow-jobs/lookup", asked).await;
        assert_eq!(status, StatusCode::OK, "{reply}");
        assert_eq!(ids_of(&reply), [&ids[2], &ids[0], &ids[2]]);
        assert_eq!(reply["missing"], json!(["lf:nope"]));
        assert_eq!(reply["jobs"][1]["fields"]["n"], 0);
        assert_eq!(reply["jobs"][1]["fields"]["tag"], "t");
        assert_eq!(reply["jobs"][1]["stage"], "lf-only");
    }

    #[tokio::test]
    async fn fields_limit_the_state_shown() {
        let (api, ids) = jobs(1).await;
        let asked = json!({ "ids": [ids[0]], "fields": ["n", "absent"] });
        let (status, reply) = api.post("/v1/flow-jobs/lookup", asked).await;
        assert_eq!(status, StatusCode::OK, "{reply}");
        assert_eq!(reply["jobs"][0]["fields"], json!({ "n": 0 }));
    }

    #[tokio::test]
    async fn an_empty_lookup_answers_nothing() {
        let (api, _) = jobs(0).await;
        let (status, reply) = api.post("/v1/flow-jobs/lookup", json!({ "ids": [] })).await;
        assert_eq!(status, StatusCode::OK, "{reply}");
        assert_eq!(reply, json!({ "jobs": [], "missing": [] }));
    }

    #[tokio::test]
    async fn the_most_ids_are_answered_and_one_more_is_refused() {
        let (api, ids) = jobs(1).await;
        let mut asked = vec![ids[0].clone(); MAX_LOOKUP_IDS];
        let (status, reply) = api
            .post("/v1/flow-jobs/lookup", json!({ "ids": asked }))
            .await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(reply["jobs"].as_array().map(Vec::len), Some(MAX_LOOKUP_IDS));
        asked.push(ids[0].clone());
        let (status, reply) = api
            .post("/v1/flow-jobs/lookup", json!({ "ids": asked }))
            .await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{reply}");
        assert_eq!(error_code(&reply), "bad_request");
        let message = reply["error"]["message"].as_str().unwrap_or("");
        assert!(message.contains("at most 1000 ids"), "{message}");
    }

    #[tokio::test]
    async fn a_body_without_ids_or_with_unknown_keys_is_refused() {
        let (api, _) = jobs(0).await;
        for body in [json!({}), json!({ "ids": [], "limit": 3 })] {
            let (status, reply) = api.post("/v1/flow-jobs/lookup", body).await;
            assert_eq!(status, StatusCode::BAD_REQUEST, "{reply}");
            assert_eq!(error_code(&reply), "bad_json");
        }
    }
}
