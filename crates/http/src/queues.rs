//! Queues: names, counts per state, and paged listings of their jobs.
//!
//! A queue is the engine's: the beanstalkd tube and the Gearman function of the same name.
//! Queues exist while something refers to them (jobs, waiting workers, other protocols'
//! clients); asking about one that does not exist answers with zeros, not an error.

use axum::extract::State;
use axum::Json;
use jobyard_broker::{Broker, Txn};
use jobyard_engine::{Cursor, JobState, Queue};
use serde::Deserialize;
use serde_json::{Map, Value};

use crate::encoding::{bytes_out, preview_out};
use crate::error::ApiError;
use crate::extract::{Params, PathText};
use crate::limits::{DEFAULT_PAGE, MAX_PAGE, MAX_QUEUE_NAME_BYTES};
use crate::state::{Api, Command};

/// Bytes of each body shown in a listing: enough to recognise a job.
const LISTING_PREVIEW_BYTES: usize = 64;

/// A queue name is 1 to [`MAX_QUEUE_NAME_BYTES`] bytes of UTF-8 without whitespace or
/// control characters (those could not be named in beanstalkd's or Gearman's admin text).
pub fn check_queue_name(name: &str) -> Result<(), ApiError> {
    if name.is_empty() || name.len() > MAX_QUEUE_NAME_BYTES {
        return Err(ApiError::bad_queue_name(format!(
            "a queue name is 1 to {MAX_QUEUE_NAME_BYTES} bytes"
        )));
    }
    if name.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(ApiError::bad_queue_name(
            "a queue name has no whitespace or control characters",
        ));
    }
    Ok(())
}

/// A queue a plain job may be put into, leased from or routed to: a valid name outside
/// the flow stages' queues (`flows/...`), whose jobs move only by flow transitions.
pub fn check_plain_queue(name: &str) -> Result<(), ApiError> {
    check_queue_name(name)?;
    if name.starts_with(jobyard_engine::flows::STAGE_QUEUE_PREFIX) {
        return Err(ApiError::bad_queue_name(format!(
            "queues named {}... hold flow stages: use /v1/stages/{{stage}}/lease",
            jobyard_engine::flows::STAGE_QUEUE_PREFIX
        )));
    }
    Ok(())
}

fn counts(name: &[u8], queue: Option<&Queue>, now: u64) -> Value {
    let mut obj = Map::new();
    bytes_out(&mut obj, "name", name);
    let n = |f: fn(&Queue) -> u64| Value::from(queue.map_or(0, f));
    obj.insert("ready".into(), n(|q| q.ready_len() as u64));
    obj.insert("urgent".into(), n(|q| q.urgent as u64));
    obj.insert("reserved".into(), n(|q| q.reserved as u64));
    obj.insert("delayed".into(), n(|q| q.delayed_len() as u64));
    obj.insert("buried".into(), n(|q| q.buried_len() as u64));
    obj.insert("waiting_workers".into(), n(|q| q.waiting() as u64));
    obj.insert("total_jobs".into(), n(|q| q.total_jobs));
    obj.insert("total_ok".into(), n(|q| q.total_ok));
    obj.insert("total_failed".into(), n(|q| q.total_failed));
    obj.insert("total_deleted".into(), n(|q| q.cmd_delete));
    obj.insert("total_timeouts".into(), n(|q| q.total_timeouts));
    obj.insert("lease_limit".into(), n(|q| q.lease_limit as u64));
    let rate = queue.and_then(Queue::rate_limit);
    obj.insert("rate_limit".into(), rate.map(|r| r.to_string()).into());
    obj.insert(
        "paused".into(),
        Value::Bool(queue.is_some_and(|q| q.is_paused(now))),
    );
    Value::Object(obj)
}

/// `GET /v1/queues/{queue}`: job counts per state (zeros for a queue that does not exist).
pub async fn queue_counts(
    State(api): State<Api>,
    PathText(name): PathText,
) -> Result<Json<Value>, ApiError> {
    api.count(Command::QueueCounts);
    check_queue_name(&name)?;
    let txn = api.broker.lock();
    let queue = txn.queue_id(name.as_bytes()).map(|q| txn.queue(q));
    Ok(Json(counts(name.as_bytes(), queue, Broker::now())))
}

/// Paging parameters of `GET /v1/queues`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QueuesQuery {
    /// List names after this one (the `next` of the previous page).
    after: Option<String>,
    limit: Option<usize>,
}

fn page_limit(limit: Option<usize>) -> Result<usize, ApiError> {
    match limit.unwrap_or(DEFAULT_PAGE) {
        n @ 1..=MAX_PAGE => Ok(n),
        _ => Err(ApiError::bad_request(format!("limit is 1 to {MAX_PAGE}"))),
    }
}

/// `GET /v1/queues`: every queue with its counts, in name order, a page at a time.
pub async fn list_queues(
    State(api): State<Api>,
    Params(q): Params<QueuesQuery>,
) -> Result<Json<Value>, ApiError> {
    api.count(Command::ListQueues);
    let limit = page_limit(q.limit)?;
    let txn = api.broker.lock();
    let now = Broker::now();
    let mut names: Vec<&[u8]> = txn
        .queues()
        .map(|queue| &queue.name[..])
        .filter(|n| q.after.as_ref().is_none_or(|a| *n > a.as_bytes()))
        .collect();
    names.sort_unstable();
    let more = names.len() > limit;
    names.truncate(limit);
    let queues: Vec<Value> = names
        .iter()
        .map(|n| counts(n, txn.queue_id(n).map(|q| txn.queue(q)), now))
        .collect();
    let next = match (more, names.last()) {
        (true, Some(last)) => Value::String(String::from_utf8_lossy(last).into_owned()),
        _ => Value::Null,
    };
    Ok(Json(serde_json::json!({ "queues": queues, "next": next })))
}

/// Paging parameters of `GET /v1/queues/{queue}/jobs`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JobsQuery {
    state: Option<String>,
    cursor: Option<String>,
    limit: Option<usize>,
}

fn parse_state(s: Option<&str>) -> Result<JobState, ApiError> {
    Ok(match s.unwrap_or("ready") {
        "ready" => JobState::Ready,
        "delayed" => JobState::Delayed,
        "reserved" => JobState::Reserved,
        "buried" => JobState::Buried,
        other => {
            return Err(ApiError::bad_request(format!(
                "state {other:?} is not one of ready, delayed, reserved, buried"
            )))
        }
    })
}

/// A cursor travels as `"<position>.<id>"`.
pub(crate) fn parse_cursor(s: &str) -> Result<Cursor, ApiError> {
    s.split_once('.')
        .and_then(|(a, b)| Some(Cursor(a.parse().ok()?, b.parse().ok()?)))
        .ok_or_else(|| ApiError::bad_request(format!("{s:?} is not a cursor")))
}

fn show_cursor(c: Cursor) -> String {
    format!("{}.{}", c.0, c.1)
}

fn summary(txn: &Txn<'_>, id: u64) -> Option<Value> {
    let job = txn.job(id)?;
    let mut obj = Map::new();
    obj.insert("id".into(), id.into());
    obj.insert("state".into(), job.state.as_str().into());
    obj.insert("priority".into(), job.pri.into());
    obj.insert("attempts".into(), job.reserves.into());
    obj.insert("created_ms".into(), job.created.into());
    // Bodies only the log holds are read back (a page in hand-out order is read a window
    // at a time); one that cannot be read is left out of the preview, not the listing.
    if let Ok(body) = txn.body(job) {
        preview_out(&mut obj, &body, LISTING_PREVIEW_BYTES);
    }
    Some(Value::Object(obj))
}

/// `GET /v1/queues/{queue}/jobs?state=ready&limit=N&cursor=C`: one page of a queue's jobs
/// in one state, in the order they would be handed out (ready), become ready (delayed),
/// were buried (buried), or by id (reserved). Costs what the page returns, not what the
/// queue holds.
pub async fn list_jobs(
    State(api): State<Api>,
    PathText(name): PathText,
    Params(q): Params<JobsQuery>,
) -> Result<Json<Value>, ApiError> {
    api.count(Command::ListJobs);
    check_queue_name(&name)?;
    let state = parse_state(q.state.as_deref())?;
    let limit = page_limit(q.limit)?;
    let cursor = q.cursor.as_deref().map(parse_cursor).transpose()?;
    let txn = api.broker.lock();
    let (jobs, next) = match txn.queue_id(name.as_bytes()) {
        None => (Vec::new(), Value::Null),
        Some(qid) => {
            let page = txn.list(qid, state, cursor, limit);
            let jobs = page
                .ids
                .iter()
                .filter_map(|&id| summary(&txn, id))
                .collect();
            (
                jobs,
                page.next.map_or(Value::Null, |c| show_cursor(c).into()),
            )
        }
    };
    Ok(Json(serde_json::json!({
        "queue": name,
        "state": state.as_str(),
        "jobs": jobs,
        "next": next,
    })))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queue_names_are_bounded_and_printable() {
        assert!(check_queue_name("emails.send-1").is_ok());
        assert!(check_queue_name(&"q".repeat(MAX_QUEUE_NAME_BYTES)).is_ok());
        for bad in ["", "a b", "a\nb", "tab\t"] {
            assert_eq!(check_queue_name(bad).unwrap_err().code, "bad_queue_name");
        }
        let long = "q".repeat(MAX_QUEUE_NAME_BYTES + 1);
        assert_eq!(check_queue_name(&long).unwrap_err().code, "bad_queue_name");
    }

    #[test]
    fn cursors_round_trip_and_bad_ones_are_refused() {
        let c = Cursor(1024, 7);
        assert_eq!(parse_cursor(&show_cursor(c)).unwrap(), c);
        for bad in ["", "1", "a.b", "1.2.3"] {
            assert!(parse_cursor(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn states_and_page_sizes_are_checked() {
        assert_eq!(parse_state(None).unwrap(), JobState::Ready);
        assert_eq!(parse_state(Some("buried")).unwrap(), JobState::Buried);
        assert!(parse_state(Some("done")).is_err());
        assert_eq!(page_limit(None).unwrap(), DEFAULT_PAGE);
        assert!(page_limit(Some(0)).is_err());
        assert!(page_limit(Some(MAX_PAGE + 1)).is_err());
        assert_eq!(page_limit(Some(MAX_PAGE)).unwrap(), MAX_PAGE);
    }
}
