//! The workers views of the admin API: who works, whatever protocol it speaks, from the
//! broker's protocol-neutral registry (`Broker::workers`), joined with what the engine
//! knows of their jobs and queues.
//!
//! - `GET /admin/api/workers?protocol=P&after=CURSOR&limit=N`: workers (a WMP worker's
//!   path, roles, manager and leases; a jobd worker's targets), each with its in-flight jobs
//!   as the engine has them now, and for each queue it serves the queue's figures (a jobd
//!   target's concurrency is its queue's lease limit).
//! - `GET /admin/api/processes?protocol=P&after=CURSOR&limit=N`: processes started for jobs
//!   (jobd launchers): pid, job, queue, start and command line.
//!
//! Both are paged (at most [`crate::admin::MAX_PAGE`] a page) and read-only.

use std::sync::Arc;

use axum::extract::{Query, State};
use axum::routing::get;
use axum::{Json, Router};
use jobyard_broker::{Broker, ProcessInfo, WorkerInfo};
use jobyard_engine::{Engine, JobState, Millis};
use serde::Deserialize;
use serde_json::{json, Value};

use crate::admin::MAX_PAGE;

/// In-flight jobs shown per worker (the count says how many there are).
const JOBS_SHOWN: usize = 20;

pub(crate) fn routes() -> Router<Arc<Broker>> {
    Router::new()
        .route("/admin/api/workers", get(workers))
        .route("/admin/api/processes", get(processes))
}

#[derive(Deserialize)]
struct ListQuery {
    protocol: Option<String>,
    after: Option<String>,
    limit: Option<usize>,
}

impl ListQuery {
    fn limit(&self) -> usize {
        self.limit.unwrap_or(50).clamp(1, MAX_PAGE)
    }
}

async fn workers(State(broker): State<Arc<Broker>>, Query(q): Query<ListQuery>) -> Json<Value> {
    let now = Broker::now();
    let page = broker
        .workers()
        .workers(q.protocol.as_deref(), q.after.as_deref(), q.limit(), now);
    let items: Vec<Value> = {
        let txn = broker.lock();
        page.items
            .iter()
            .map(|w| worker_json(&txn, w, now))
            .collect()
    };
    Json(json!({
        "workers": items,
        "total": page.total,
        "next": page.next,
        "unlisted": broker.workers().unlisted(),
        "now_ms": now,
    }))
}

fn worker_json(engine: &Engine, w: &WorkerInfo, now: Millis) -> Value {
    // The engine is the truth about leases: a job the front end has not reported ended
    // yet but that the engine no longer holds is not shown as in flight.
    let held: Vec<Value> = w
        .in_flight
        .iter()
        .filter_map(|&id| engine.job(id).filter(|j| j.state == JobState::Reserved))
        .map(|j| {
            json!({
                "id": j.id,
                "queue": String::from_utf8_lossy(&engine.queue(j.queue).name),
                "attempt": j.reserves,
                "time_left_s": engine.time_left_secs(j, now),
            })
        })
        .collect();
    let queues: Vec<Value> = w
        .queues
        .iter()
        .map(|name| match engine.queue_id(name.as_bytes()) {
            Some(id) => {
                let q = engine.queue(id);
                json!({
                    "name": name,
                    "ready": q.ready_len(),
                    "reserved": q.reserved,
                    "lease_limit": q.lease_limit,
                    "paused": q.is_paused(now),
                })
            }
            None => json!({ "name": name, "ready": 0, "reserved": 0, "lease_limit": 0, "paused": false }),
        })
        .collect();
    let detail: serde_json::Map<String, Value> = w
        .detail
        .iter()
        .map(|(k, v)| (k.to_string(), Value::from(v.as_str())))
        .collect();
    json!({
        "protocol": w.protocol,
        "id": w.id,
        "queues": queues,
        "any_queue": w.any_queue,
        "detail": detail,
        "in_flight": held.len(),
        "jobs": held.into_iter().take(JOBS_SHOWN).collect::<Vec<_>>(),
        "first_seen_ms": w.first_seen,
        "last_seen_ms": w.last_seen,
        "last_seen_s": now.saturating_sub(w.last_seen) / 1000,
    })
}

async fn processes(State(broker): State<Arc<Broker>>, Query(q): Query<ListQuery>) -> Json<Value> {
    let now = Broker::now();
    let page = broker
        .workers()
        .processes(q.protocol.as_deref(), q.after.as_deref(), q.limit());
    let items: Vec<Value> = page.items.iter().map(|p| process_json(p, now)).collect();
    Json(json!({
        "processes": items,
        "total": page.total,
        "next": page.next,
        "now_ms": now,
    }))
}

fn process_json(p: &ProcessInfo, now: Millis) -> Value {
    json!({
        "protocol": p.protocol,
        "pid": p.pid,
        "job": p.job,
        "label": p.label,
        "queue": p.queue,
        "started_ms": p.started,
        "running_s": now.saturating_sub(p.started) as f64 / 1000.0,
        "command": p.command,
    })
}
