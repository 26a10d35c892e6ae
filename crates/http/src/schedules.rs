//! Periodic jobs over HTTP: schedules declared, listed, paused, resumed and deleted.
//!
//! The engine keeps and logs the schedules ([`jobyard_engine::Schedule`]) and the broker's
//! scheduler fires their ticks; these routes only translate. A change is answered once the
//! log holds it.

use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::{delete, get, post, put, MethodRouter};
use axum::Json;
use jobyard_broker::{Broker, ScheduleSpec};
use jobyard_engine::{
    Millis, MissedTicks, Overlap, Schedule, Timing, DEFAULT_PRIORITY, DEFAULT_TTR,
};
use serde_json::{json, Value};

use crate::error::ApiError;
use crate::extract::{JsonBody, PathText};
use crate::queues::check_queue_name;
use crate::state::{Api, Command};

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

/// The body of `PUT /v1/schedules/{schedule}` ([`ScheduleSpec`], read as the config's
/// `[[schedules]]` tables are) checked against this API's limits: the queue's name, the
/// body's size, and a name that, if given, is the path's.
fn checked(spec: ScheduleSpec, name: &str, max_job_size: u32) -> Result<Schedule, ApiError> {
    check_queue_name(&spec.queue)?;
    if spec.body.len() > max_job_size as usize {
        return Err(ApiError::job_too_big(max_job_size));
    }
    if spec.name.as_deref().is_some_and(|given| given != name) {
        return Err(ApiError::bad_request("the body's name is not the path's"));
    }
    spec.into_schedule(name, DEFAULT_PRIORITY, DEFAULT_TTR)
        .map_err(ApiError::bad_request)
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
    api.count(Command::ListSchedules);
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
    api.count(Command::GetSchedule);
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
    JsonBody(spec): JsonBody<ScheduleSpec>,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    api.count(Command::DeclareSchedule);
    check_name(&name)?;
    if api.broker.draining() {
        return Err(ApiError::draining());
    }
    let schedule = checked(spec, &name, api.config.max_job_size)?;
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
    api.count(Command::DeleteSchedule);
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
    api.count(Command::PauseSchedule);
    set_paused(api, path, true).await
}

/// `POST /v1/schedules/{schedule}/resume`: ticks enqueue again from the next one on.
pub async fn resume(State(api): State<Api>, path: PathText) -> Result<Json<Value>, ApiError> {
    api.count(Command::ResumeSchedule);
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
