//! `GET /admin/api/history?queue=NAME&window=SECONDS`: the server's own history of a queue
//! (or of every queue together, without `queue`) for the dashboard's charts, from the
//! broker's once-a-second samples (`jobyard_broker::history`).
//!
//! The reply is columns, one value per point, oldest first: `t` (unix seconds), `put`,
//! `completed` (ended ok or deleted), `failed` (per second), `ready`, `reserved`, `delayed`, `buried`, and `p50_ms`,
//! `p95_ms`, `p99_ms` (null where no lease completed). Windows up to 10 minutes come one
//! point a second, longer ones one per 10 seconds.

use std::sync::Arc;

use axum::extract::{Query, State};
use axum::routing::get;
use axum::{Json, Router};
use jobyard_broker::history::{Point, SeriesView, COARSE_POINTS, COARSE_STEP_S, NO_LATENCY};
use jobyard_broker::Broker;
use serde::Deserialize;
use serde_json::{json, Value};

use crate::admin::{bad_request, not_found, ApiError};

/// The window when none is asked for: the last hour.
pub const DEFAULT_WINDOW_S: u64 = 3600;
/// The longest window the history holds.
pub const MAX_WINDOW_S: u64 = COARSE_POINTS as u64 * COARSE_STEP_S;

pub(crate) fn routes() -> Router<Arc<Broker>> {
    Router::new().route("/admin/api/history", get(history))
}

#[derive(Deserialize)]
struct HistoryQuery {
    queue: Option<String>,
    window: Option<u64>,
}

async fn history(
    State(broker): State<Arc<Broker>>,
    Query(q): Query<HistoryQuery>,
) -> Result<Json<Value>, ApiError> {
    let window = q.window.unwrap_or(DEFAULT_WINDOW_S);
    if !(1..=MAX_WINDOW_S).contains(&window) {
        return Err(bad_request(format!(
            "window {window}: use 1 to {MAX_WINDOW_S} seconds"
        )));
    }
    let history = broker.history();
    let view = history.view(q.queue.as_deref().map(str::as_bytes), window);
    let view = match (view, &q.queue) {
        (Some(view), _) => view,
        (None, Some(_)) => return Err(not_found("queue history")),
        // Nothing sampled yet (the server just started): an empty series.
        (None, None) => SeriesView {
            step_s: 1,
            end_s: Broker::now() / 1000,
            points: Vec::new(),
        },
    };
    let queues: Vec<String> = history
        .queues()
        .iter()
        .map(|n| String::from_utf8_lossy(n).into_owned())
        .collect();
    Ok(Json(columns(&view, q.queue.as_deref(), window, queues)))
}

/// The view as the reply's columns.
fn columns(view: &SeriesView, queue: Option<&str>, window: u64, queues: Vec<String>) -> Value {
    let n = view.points.len() as u64;
    let t: Vec<u64> = (0..n)
        .map(|i| view.end_s.saturating_sub((n - 1 - i) * view.step_s))
        .collect();
    let col = |f: fn(&Point) -> Value| view.points.iter().map(f).collect::<Vec<Value>>();
    let ms = |us: u32| {
        if us == NO_LATENCY {
            Value::Null
        } else {
            json!(us as f64 / 1000.0)
        }
    };
    json!({
        "queue": queue,
        "window_s": window,
        "step_s": view.step_s,
        "t": t,
        "put": col(|p| json!(p.put)),
        "completed": col(|p| json!(p.completed)),
        "failed": col(|p| json!(p.failed)),
        "ready": col(|p| json!(p.ready)),
        "reserved": col(|p| json!(p.reserved)),
        "delayed": col(|p| json!(p.delayed)),
        "buried": col(|p| json!(p.buried)),
        "p50_ms": view.points.iter().map(|p| ms(p.p50_us)).collect::<Vec<_>>(),
        "p95_ms": view.points.iter().map(|p| ms(p.p95_us)).collect::<Vec<_>>(),
        "p99_ms": view.points.iter().map(|p| ms(p.p99_us)).collect::<Vec<_>>(),
        "queues": queues,
    })
}
