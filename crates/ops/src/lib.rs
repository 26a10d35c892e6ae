//! Operating jobyard: one view of every queue, whatever protocol fills it.
//!
//! [`router`] is mounted on the HTTP listener: `/metrics` (Prometheus text), the dashboard
//! at `/` (static files embedded in the binary), and the admin JSON API under
//! `/admin/api/` that the dashboard and `jobyard ctl` use (overview, a
//! queue's jobs page by page, a job with its last attempts, and the actions: kick, delete, bury, pause, resume,
//! drain; the workers and worker processes every front end publishes in the broker's
//! registry; the last hours of every queue's figures, sampled by the broker once a
//! second, for the charts). Everything is read from the broker: the engine's queues, the
//! metrics registry and the log's figures; nothing here is on a job's hot path. Who may reach these routes is
//! the listener's business (`jobyard_http::security` guards them with the `/v1` API).

mod admin;
mod dashboard;
mod history;
mod job_attempts;
pub mod lease_histogram;
pub mod prometheus;
mod workers;

use std::sync::Arc;

use axum::Router;
use jobyard_broker::Broker;

/// The operations routes, for the HTTP listener to serve. Installs the Prometheus recorder
/// now, as the listener starts, rather than at the first scrape: what is recorded as it
/// happens (the fsync latency histogram) counts from here, not from whenever Prometheus
/// first asks.
pub fn router(broker: Arc<Broker>) -> Router {
    prometheus::install();
    admin::routes()
        .merge(workers::routes())
        .merge(history::routes())
        .merge(prometheus::routes())
        .merge(dashboard::routes())
        .with_state(broker)
}
