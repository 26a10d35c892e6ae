//! Periodic jobs over HTTP: schedules declared, listed, paused, resumed and deleted.
//!
//! The engine keeps and logs the schedules ([`jobyard_engine::Schedule`]) and the broker's
//! scheduler fires their ticks; these routes only translate. A change is answered once the
//! log holds it.

use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::{delete, get, post, put, MethodRouter};
use axum::Json;
use bytes::Bytes;
use jobyard_broker::Broker;
use jobyard_engine::{Millis, MissedTicks, Overlap, Schedule, Timing};
use serde::Deserialize;
use serde_json::{json, Value};

use crate::error::ApiError;
use crate::extract::{JsonBody, PathText};
use crate::jobs::{DEFAULT_PRIORITY, DEFAULT_TTR};
use crate::queues::check_queue_name;
use crate::state::Api;

/// (method, path, handler) of the schedules' routes, for the API's table.
pub fn table() -> Vec<(&'static str, &'static str, MethodRouter<Api>)> {
    vec![
        ("GET", "/v1/schedules", get(list)),
        ("GET", "/v1/schedules/{schedule}", get(show)),
        ("PUT", "/v1/schedules/{schedule}", put(declare)),
        ("DELETE", "/v1/schedules/{schedule}", delete(remove)),
        ("POST", "/v1/schedules/{schedule}/pause", post(pause)),
        ("POST", "/v1/schedules/{schedule}/resume", post(resume)),
    ]
}

/// The body of `PUT /v1/schedules/{schedule}`: what the config's `[[schedules]]` table
/// holds, as JSON.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScheduleRequest {
    queue: String,
    cron: Option<String>,
    time_zone: Option<String>,
    interval: Option<String>,
    #[serde(default)]
    body: String,
    priority: Option<u32>,
    ttr: Option<u32>,
    overlap: Option<String>,
    missed: Option<String>,
}

impl ScheduleRequest {
    /// The schedule it declares, or why it cannot be.
    fn checked(self, name: &str, max_job_size: u32) -> Result<Schedule, ApiError> {
        check_queue_name(&self.queue)?;
        if self.body.len() > max_job_size as usize {
            return Err(ApiError::job_too_big(max_job_size));
        }
        let timing = match (self.cron, self.interval, self.time_zone) {
            (Some(expr), None, time_zone) => Timing::Cron {
                expr,
                time_zone: time_zone.unwrap_or_else(|| "UTC".into()),
            },
            (None, Some(interval), None) => Timing::Interval(interval),
            _ => {
                return Err(ApiError::bad_request(
                    "give cron (and time_zone) or interval, not both",
                ))
            }
        };
        jobyard_broker::when_of(&timing).map_err(|e| ApiError::bad_request(e.to_string()))?;
        let overlap = match self.overlap.as_deref() {
            None | Some("allow") => Overlap::Allow,
            Some("skip") => Overlap::Skip,
            Some(_) => return Err(ApiError::bad_request("overlap is \"skip\" or \"allow\"")),
        };
        let missed = match self.missed.as_deref() {
            None | Some("skip") => MissedTicks::Skip,
            Some("catch_up") => MissedTicks::CatchUp,
            Some(_) => return Err(ApiError::bad_request("missed is \"skip\" or \"catch_up\"")),
        };
        Ok(Schedule {
            name: Bytes::copy_from_slice(name.as_bytes()),
            queue: Bytes::from(self.queue),
            body: Bytes::from(self.body),
            pri: self.priority.unwrap_or(DEFAULT_PRIORITY),
            ttr: self.ttr.unwrap_or(DEFAULT_TTR).max(1),
            timing,
            overlap,
            missed,
            paused: false,
            last_tick: 0,
            last_job: 0,
        })
    }
}

/// A schedule as JSON, with its next tick after `now` (none while paused).
fn schedule_out(s: &Schedule, now: Millis) -> Value {
    let mut out = json!({
        "name": String::from_utf8_lossy(&s.name),
        "queue": String::from_utf8_lossy(&s.queue),
        "body": String::from_utf8_lossy(&s.body),
        "priority": s.pri,
        "ttr": s.ttr,
        "overlap": match s.overlap { Overlap::Allow => "allow", Overlap::Skip => "skip" },
        "missed": match s.missed { MissedTicks::Skip => "skip", MissedTicks::CatchUp => "catch_up" },
        "paused": s.paused,
        "last_tick_ms": s.last_tick,
        "last_job": (s.last_job != 0).then_some(s.last_job),
        "next_tick_ms": next_tick(s, now),
    });
    match &s.timing {
        Timing::Cron { expr, time_zone } => {
            out["cron"] = json!(expr);
            out["time_zone"] = json!(time_zone);
        }
        Timing::Interval(text) => out["interval"] = json!(text),
    }
    out
}

fn next_tick(s: &Schedule, now: Millis) -> Option<Millis> {
    if s.paused {
        return None;
    }
    let when = jobyard_broker::when_of(&s.timing).ok()?;
    when.next_after(now.max(s.last_tick))
}

fn check_name(name: &str) -> Result<(), ApiError> {
    check_queue_name(name)
}

fn no_schedule(name: &str) -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        "not_found",
        format!("no schedule {name:?}"),
    )
}

/// `GET /v1/schedules`: every schedule, by name.
pub async fn list(State(api): State<Api>) -> Json<Value> {
    let now = Broker::now();
    let txn = api.broker.lock();
    let schedules: Vec<Value> = txn.schedules().map(|s| schedule_out(s, now)).collect();
    Json(json!({ "schedules": schedules }))
}

/// `GET /v1/schedules/{schedule}`.
pub async fn show(
    State(api): State<Api>,
    PathText(name): PathText,
) -> Result<Json<Value>, ApiError> {
    let txn = api.broker.lock();
    let schedule = txn
        .schedule(name.as_bytes())
        .ok_or_else(|| no_schedule(&name))?;
    Ok(Json(schedule_out(schedule, Broker::now())))
}

/// `PUT /v1/schedules/{schedule}`: declares a schedule, or changes the declaration of the
/// one of that name (keeping its last tick and pause); 201 when it is new.
pub async fn declare(
    State(api): State<Api>,
    PathText(name): PathText,
    JsonBody(req): JsonBody<ScheduleRequest>,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    check_name(&name)?;
    if api.broker.draining() {
        return Err(ApiError::draining());
    }
    let schedule = req.checked(&name, api.config.max_job_size)?;
    let now = Broker::now();
    let (created, out, lsn) = {
        let mut txn = api.broker.lock();
        let created = txn.declare_schedule(schedule, now);
        let out = schedule_out(txn.schedule(name.as_bytes()).expect("declared"), now);
        (created, out, txn.commit())
    };
    api.broker.wait_durable(lsn).await;
    api.broker.schedules_changed();
    let status = if created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok((status, Json(out)))
}

/// `DELETE /v1/schedules/{schedule}`: the schedule goes; the jobs it put stay.
pub async fn remove(
    State(api): State<Api>,
    PathText(name): PathText,
) -> Result<Json<Value>, ApiError> {
    let lsn = {
        let mut txn = api.broker.lock();
        if !txn.delete_schedule(name.as_bytes()) {
            return Err(no_schedule(&name));
        }
        txn.commit()
    };
    api.broker.wait_durable(lsn).await;
    Ok(Json(json!({ "deleted": name })))
}

/// `POST /v1/schedules/{schedule}/pause`: no tick enqueues until it is resumed.
pub async fn pause(State(api): State<Api>, path: PathText) -> Result<Json<Value>, ApiError> {
    set_paused(api, path, true).await
}

/// `POST /v1/schedules/{schedule}/resume`: ticks enqueue again from the next one on.
pub async fn resume(State(api): State<Api>, path: PathText) -> Result<Json<Value>, ApiError> {
    set_paused(api, path, false).await
}

async fn set_paused(
    api: Api,
    PathText(name): PathText,
    paused: bool,
) -> Result<Json<Value>, ApiError> {
    let now = Broker::now();
    let (out, lsn) = {
        let mut txn = api.broker.lock();
        if !txn.pause_schedule(name.as_bytes(), paused, now) {
            return Err(no_schedule(&name));
        }
        let out = schedule_out(txn.schedule(name.as_bytes()).expect("paused"), now);
        (out, txn.commit())
    };
    api.broker.wait_durable(lsn).await;
    api.broker.schedules_changed();
    Ok(Json(out))
}
