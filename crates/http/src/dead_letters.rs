//! A queue's dead letters over HTTP: the jobs that failed their last attempt under a retry
//! policy and were buried there, listed with their failure histories, and retried (sent
//! back to the queue they failed in, ready, with no failures counted) or discarded, in
//! bulk: all of them, or those named.
//!
//! The engine decides and logs ([`jobyard_engine::Engine::retry_dead_letters`]); a change
//! is answered once the log holds it.

use axum::extract::State;
use axum::Json;
use jobyard_broker::{Broker, Txn};
use jobyard_engine::{Failure, FailureHistory, JobId};
use serde::Deserialize;
use serde_json::{json, Map, Value};

use crate::encoding::bytes_out;
use crate::error::ApiError;
use crate::extract::{JsonBody, PathText};
use crate::limits::MAX_PAGE;
use crate::queues::check_queue_name;
use crate::state::{Api, Command};

/// `GET /v1/queues/{queue}/dead-letters`: the first dead letters of the queue (at most a
/// page), each with its failure history.
pub async fn list(
    State(api): State<Api>,
    PathText(name): PathText,
) -> Result<Json<Value>, ApiError> {
    api.count(Command::DeadLetters);
    check_queue_name(&name)?;
    let txn = api.broker.lock();
    let ids = txn
        .queue_id(name.as_bytes())
        .map_or_else(Vec::new, |q| txn.list_dead_letters(q, MAX_PAGE));
    let jobs: Vec<Value> = ids.iter().map(|&id| dead_letter_out(&txn, id)).collect();
    Ok(Json(json!({ "queue": name, "dead_letters": jobs })))
}

fn dead_letter_out(txn: &Txn<'_>, id: JobId) -> Value {
    let mut obj = Map::new();
    obj.insert("id".into(), id.into());
    if let Some(history) = txn.failure_history(id) {
        history_out(&mut obj, history);
    }
    Value::Object(obj)
}

/// A failure history as JSON fields of its job.
pub fn history_out(obj: &mut Map<String, Value>, history: &FailureHistory) {
    bytes_out(obj, "origin", &history.origin);
    obj.insert("failed_attempts".into(), history.count.into());
    let failures: Vec<Value> = history.failures.iter().map(failure_out).collect();
    obj.insert("failures".into(), failures.into());
}

fn failure_out(failure: &Failure) -> Value {
    let mut obj = Map::new();
    obj.insert("at_ms".into(), failure.at.into());
    obj.insert("holder".into(), failure.holder.into());
    obj.insert("how".into(), failure.how.as_str().into());
    match &failure.error {
        Some(error) => bytes_out(&mut obj, "error", error),
        None => {
            obj.insert("error".into(), Value::Null);
        }
    }
    Value::Object(obj)
}

/// The body of the bulk routes: `ids` names the dead letters; left out, the route takes
/// them all.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct Chosen {
    pub ids: Option<Vec<JobId>>,
}

impl Chosen {
    fn ids(&self) -> Result<Option<&[JobId]>, ApiError> {
        match &self.ids {
            Some(ids) if ids.len() > MAX_PAGE => Err(ApiError::bad_request(format!(
                "at most {MAX_PAGE} ids at once"
            ))),
            ids => Ok(ids.as_deref()),
        }
    }
}

/// Which bulk action a route takes.
#[derive(Clone, Copy)]
enum Action {
    Retry,
    Discard,
}

/// `POST /v1/queues/{queue}/dead-letters/retry`.
pub async fn retry(
    State(api): State<Api>,
    PathText(name): PathText,
    JsonBody(chosen): JsonBody<Chosen>,
) -> Result<Json<Value>, ApiError> {
    api.count(Command::RetryDeadLetters);
    act(&api, &name, &chosen, Action::Retry).await
}

/// `POST /v1/queues/{queue}/dead-letters/discard`.
pub async fn discard(
    State(api): State<Api>,
    PathText(name): PathText,
    JsonBody(chosen): JsonBody<Chosen>,
) -> Result<Json<Value>, ApiError> {
    api.count(Command::DiscardDeadLetters);
    act(&api, &name, &chosen, Action::Discard).await
}

/// Retries or discards the chosen dead letters; answers with the ids it acted on once the
/// log holds the change.
async fn act(
    api: &Api,
    name: &str,
    chosen: &Chosen,
    action: Action,
) -> Result<Json<Value>, ApiError> {
    check_queue_name(name)?;
    let ids = chosen.ids()?;
    let (done, lsn) = {
        let mut txn = api.broker.lock();
        let done = match txn.queue_id(name.as_bytes()) {
            None => Vec::new(),
            Some(q) => match action {
                Action::Retry => txn.retry_dead_letters(q, ids, Broker::now()),
                Action::Discard => txn.discard_dead_letters(q, ids),
            },
        };
        (done, txn.commit())
    };
    api.broker.wait_durable(lsn).await;
    Ok(Json(
        json!({ "queue": name, "count": done.len(), "ids": done }),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_all_or_those_named_and_too_many_are_refused() {
        assert_eq!(Chosen::default().ids().unwrap(), None);
        let named = Chosen {
            ids: Some(vec![3, 17]),
        };
        assert_eq!(named.ids().unwrap(), Some(&[3, 17][..]));
        assert!(serde_json::from_str::<Chosen>(r#"{"ids": ["x"]}"#).is_err());
        let many = Chosen {
            ids: Some(vec![1; MAX_PAGE + 1]),
        };
        assert!(many.ids().is_err());
    }
}
