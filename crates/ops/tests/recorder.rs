//! When the Prometheus recorder starts counting. A test binary of its own: the recorder is
//! the process's, and another test's scrape would install it first.

use axum::body::Body;
use axum::http::Request;
use jobyard_broker::Broker;
use tower::ServiceExt;

/// The value of the sample line `name` (no labels) in Prometheus text.
fn sample(text: &str, name: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
}

#[tokio::test]
async fn what_is_recorded_before_the_first_scrape_is_in_it() {
    let broker = Broker::in_memory();
    let app = jobyard_ops::router(broker.clone());
    // As storage records an fsync's latency, once the listener serves but before anything
    // has scraped.
    metrics::histogram!("jobyard_log_fsync_seconds").record(0.002);
    metrics::histogram!("jobyard_log_fsync_seconds").record(0.004);

    let res = app
        .oneshot(Request::get("/metrics").body(Body::empty()).unwrap())
        .await
        .unwrap();
    let body = axum::body::to_bytes(res.into_body(), 16 << 20)
        .await
        .unwrap();
    let text = String::from_utf8(body.to_vec()).unwrap();
    assert_eq!(
        sample(&text, "jobyard_log_fsync_seconds_count"),
        Some(2.0),
        "{text}"
    );
    assert_eq!(sample(&text, "jobyard_log_fsync_seconds_sum"), Some(0.006));
}
