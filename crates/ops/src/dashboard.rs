//! The web dashboard: eight static files embedded in the binary (no build step, nothing
//! fetched from the network), which read everything from the admin JSON API.

use std::sync::Arc;

use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;
use jobyard_broker::Broker;

const INDEX: &str = include_str!("../assets/index.html");
const APP: &str = include_str!("../assets/app.js");
const WORKERS: &str = include_str!("../assets/workers.js");
const CHARTS: &str = include_str!("../assets/charts.js");
const SCHEDULES: &str = include_str!("../assets/schedules.js");
const POLICY: &str = include_str!("../assets/policy.js");
const CLUSTER: &str = include_str!("../assets/cluster.js");
const STYLE: &str = include_str!("../assets/style.css");

pub(crate) fn routes() -> Router<Arc<Broker>> {
    Router::new()
        .route(
            "/",
            get(|| async { page(INDEX, "text/html; charset=utf-8") }),
        )
        .route(
            "/ui/app.js",
            get(|| async { page(APP, "text/javascript; charset=utf-8") }),
        )
        .route(
            "/ui/workers.js",
            get(|| async { page(WORKERS, "text/javascript; charset=utf-8") }),
        )
        .route(
            "/ui/charts.js",
            get(|| async { page(CHARTS, "text/javascript; charset=utf-8") }),
        )
        .route(
            "/ui/schedules.js",
            get(|| async { page(SCHEDULES, "text/javascript; charset=utf-8") }),
        )
        .route(
            "/ui/policy.js",
            get(|| async { page(POLICY, "text/javascript; charset=utf-8") }),
        )
        .route(
            "/ui/cluster.js",
            get(|| async { page(CLUSTER, "text/javascript; charset=utf-8") }),
        )
        .route(
            "/ui/style.css",
            get(|| async { page(STYLE, "text/css; charset=utf-8") }),
        )
}

fn page(body: &'static str, kind: &'static str) -> impl IntoResponse {
    (
        [
            (header::CONTENT_TYPE, kind),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        body,
    )
}
