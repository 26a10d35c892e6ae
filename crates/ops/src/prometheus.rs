//! `/metrics`: the broker's registry, the engine's queues and the log's figures in the
//! Prometheus text format, through the `metrics` facade and its Prometheus exporter.
//!
//! Nothing here runs per job. The hot path bumps the registry's atomics; a scrape copies
//! them into the exporter (`absolute` for counters, `set` for gauges) and renders. The one
//! metric recorded as it happens is the log's fsync latency histogram (once per sync, not
//! per job), recorded by storage through the same facade: the recorder is installed when
//! the HTTP listener starts ([`crate::router`]), so fsyncs from then on are in it, whether or
//! not anything has scraped yet. The lease-to-complete histograms are the broker's own
//! buckets, written out by [`crate::lease_histogram`].

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;
use jobyard_broker::{Broker, FigureKind};
use jobyard_engine::Millis;
use metrics::{counter, gauge};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use metrics_util::MetricKindMask;

/// Buckets (seconds) of the fsync latency histogram.
const FSYNC_BUCKETS: [f64; 10] = [
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.1, 1.0,
];

static HANDLE: OnceLock<Option<PrometheusHandle>> = OnceLock::new();

/// Installs the process's Prometheus recorder (once; later calls return the same handle).
/// `None` if another recorder was installed first.
pub fn install() -> Option<&'static PrometheusHandle> {
    HANDLE
        .get_or_init(|| {
            PrometheusBuilder::new()
                .set_buckets_for_metric(
                    Matcher::Full("jobyard_log_fsync_seconds".into()),
                    &FSYNC_BUCKETS,
                )
                .ok()?
                // A queue that is gone stops being reported a while after its last scrape.
                .idle_timeout(
                    MetricKindMask::COUNTER | MetricKindMask::GAUGE,
                    Some(Duration::from_secs(300)),
                )
                .install_recorder()
                .ok()
        })
        .as_ref()
}

pub(crate) fn routes() -> Router<Arc<Broker>> {
    Router::new().route("/metrics", get(scrape))
}

async fn scrape(State(broker): State<Arc<Broker>>) -> impl IntoResponse {
    let body = render(&broker);
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        body,
    )
}

/// The current figures in the Prometheus text format.
pub fn render(broker: &Broker) -> String {
    let Some(handle) = install() else {
        return "# another metrics recorder is installed in this process\n".into();
    };
    record_queues(broker);
    record_protocols(broker);
    record_log(broker);
    let mut out = handle.render();
    crate::lease_histogram::render(broker, &mut out);
    out
}

/// One queue's figures, copied under the engine lock so that recording them (registry
/// lookups, label strings) happens after it is released.
struct QueueFigures {
    name: String,
    states: [(&'static str, f64); 4],
    waiting: f64,
    paused: bool,
    head_age: f64,
    totals: [(&'static str, u64); 5],
    /// The policy's limits, when set: jobs per second of the rate limit, and the lease limit.
    rate_per_sec: Option<f64>,
    lease_limit: u32,
}

fn record_queues(broker: &Broker) {
    let now = Broker::now();
    let (created, expired, queues) = {
        let txn = broker.lock();
        let queues: Vec<QueueFigures> = txn
            .queues()
            .map(|q| QueueFigures {
                name: String::from_utf8_lossy(&q.name).into_owned(),
                states: [
                    ("ready", q.ready_len() as f64),
                    ("reserved", q.reserved as f64),
                    ("delayed", q.delayed_len() as f64),
                    ("buried", q.buried_len() as f64),
                ],
                waiting: q.waiting() as f64,
                paused: q.is_paused(now),
                head_age: q
                    .head()
                    .and_then(|(_, id)| txn.job(id))
                    .map_or(0.0, |j| age_secs(j.created, now)),
                totals: [
                    ("jobyard_queue_jobs_created_total", q.total_jobs),
                    ("jobyard_queue_jobs_completed_total", q.total_ok),
                    ("jobyard_queue_jobs_failed_total", q.total_failed),
                    ("jobyard_queue_jobs_deleted_total", q.cmd_delete),
                    ("jobyard_queue_leases_expired_total", q.total_timeouts),
                ],
                rate_per_sec: q
                    .rate_limit()
                    .map(|r| r.count as f64 * 1000.0 / r.per_ms as f64),
                lease_limit: q.lease_limit,
            })
            .collect();
        (txn.total_jobs(), txn.job_timeouts(), queues)
    };
    counter!("jobyard_jobs_created_total").absolute(created);
    counter!("jobyard_leases_expired_total").absolute(expired);
    for q in queues {
        for (state, n) in q.states {
            gauge!("jobyard_queue_jobs", "queue" => q.name.clone(), "state" => state).set(n);
        }
        gauge!("jobyard_queue_waiting", "queue" => q.name.clone()).set(q.waiting);
        gauge!("jobyard_queue_paused", "queue" => q.name.clone()).set(if q.paused {
            1.0
        } else {
            0.0
        });
        gauge!("jobyard_queue_next_ready_age_seconds", "queue" => q.name.clone()).set(q.head_age);
        if let Some(rate) = q.rate_per_sec {
            gauge!("jobyard_queue_rate_limit_per_second", "queue" => q.name.clone()).set(rate);
        }
        if q.lease_limit > 0 {
            gauge!("jobyard_queue_lease_limit", "queue" => q.name.clone()).set(q.lease_limit);
        }
        for (metric, n) in q.totals {
            counter!(metric, "queue" => q.name.clone()).absolute(n);
        }
    }
}

fn age_secs(created: Millis, now: Millis) -> f64 {
    now.saturating_sub(created) as f64 / 1000.0
}

fn record_protocols(broker: &Broker) {
    use std::sync::atomic::Ordering::Relaxed;
    for p in broker.metrics().protocols() {
        let name = p.name;
        gauge!("jobyard_connections", "protocol" => name).set(p.connections.load(Relaxed) as f64);
        let totals = [
            ("jobyard_connections_total", &p.connections_total),
            ("jobyard_connections_refused_total", &p.refused),
            ("jobyard_protocol_jobs_created_total", &p.jobs_created),
            ("jobyard_protocol_jobs_completed_total", &p.jobs_completed),
            ("jobyard_protocol_jobs_failed_total", &p.jobs_failed),
        ];
        for (metric, n) in totals {
            counter!(metric, "protocol" => name).absolute(n.load(Relaxed));
        }
        for (command, n) in p.commands() {
            counter!("jobyard_commands_total", "protocol" => name, "command" => command)
                .absolute(n);
        }
    }
    for family in broker.metrics().families() {
        let label = family.label;
        for (value, row) in family.rows() {
            for (i, (metric, kind)) in family.figures.iter().enumerate() {
                match kind {
                    FigureKind::Counter => {
                        counter!(*metric, label => value.clone()).absolute(row.get(i).max(0) as u64)
                    }
                    FigureKind::Gauge => {
                        gauge!(*metric, label => value.clone()).set(row.get(i) as f64)
                    }
                }
            }
        }
    }
    let c = &broker.metrics().compaction;
    counter!("jobyard_compactions_total").absolute(c.runs.load(Relaxed));
    gauge!("jobyard_compaction_pause_seconds_max").set(c.max_pause_us.load(Relaxed) as f64 / 1e6);
    gauge!("jobyard_compaction_pause_seconds_total")
        .set(c.pause_us_total.load(Relaxed) as f64 / 1e6);
}

fn record_log(broker: &Broker) {
    use std::sync::atomic::Ordering::Relaxed;
    let Some(log) = broker.log() else {
        return;
    };
    let s = log.stats();
    counter!("jobyard_log_records_total").absolute(log.records_written());
    counter!("jobyard_log_bytes_total").absolute(s.bytes.load(Relaxed));
    counter!("jobyard_log_writes_total").absolute(s.batches.load(Relaxed));
    counter!("jobyard_log_fsyncs_total")
        .absolute(jobyard_storage::sync_stats().fsyncs.load(Relaxed));
    gauge!("jobyard_log_segment").set(log.current_segment() as f64);
    if log.leadership().is_some() {
        // PostgreSQL's transactional enqueue (docs/postgres.md).
        counter!("jobyard_enqueue_consumed_total").absolute(s.enqueue_consumed.load(Relaxed));
        counter!("jobyard_enqueue_rejected_total").absolute(s.enqueue_rejected.load(Relaxed));
    }
}
