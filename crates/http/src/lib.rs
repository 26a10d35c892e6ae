//! jobyard's native HTTP/JSON API.
//!
//! Plain queue jobs on any queue (a queue is the beanstalkd tube and the Gearman function
//! of the same name): put, describe, delete, wait for the result; lease with long-poll,
//! heartbeat, complete, fail and release; counts per state and paged listings. The
//! reference is docs/http-api.md, the machine-readable description docs/openapi.json.
//!
//! HTTP is not one stream per session, so this front end implements
//! [`jobyard_net::FrontEnd`] itself: it serves with axum on its own listener, takes a
//! place from the gate for every connection and every session it keeps (worker sessions,
//! result waits), and stops when the gate shuts down. Like every front end it replies to
//! a change only once the log holds it (`broker.wait_durable`).
//!
//! The listener is guarded as [`Security`] says: tokens checked on every request,
//! optional TLS, and no open listener beyond loopback unless asked for; all of it is in
//! [`security`] (docs/security.md).

mod cluster;
pub use cluster::cluster_document;
mod dead_letters;
mod encoding;
mod error;
mod extract;
mod flows;
/// Entry points for the fuzz targets (fuzz/): every decoder of the bytes a client sends.
pub mod fuzzing;
mod jobs;
mod leases;
mod leasing;
/// Every bound on what a client sends (docs/http-api.md, "Limits").
pub mod limits;
mod listener;
mod queue_policy;
mod queues;
mod routes;
mod schedules;
/// Who may use the listener: tokens and roles, the guard, TLS, the loopback rule.
pub mod security;
mod state;
#[cfg(test)]
mod test_support;
mod workers;

use std::sync::Arc;
use std::time::Duration;

use jobyard_broker::Broker;
use jobyard_net::{FrontEnd, Gate};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_rustls::TlsAcceptor;

pub use error::ApiError;
/// Installs the process's Prometheus recorder: the server calls it at start, before storage
/// opens, so what happens before the listener is up (fsyncs while the config's flows,
/// policies and schedules are declared) is counted too.
pub use jobyard_ops::prometheus::install as install_metrics;
pub use routes::table as routes;
pub use security::Security;

use crate::listener::GatedListener;
use crate::security::tls;
use crate::state::{Api, Inner, COMMAND_NAMES};
use crate::workers::Workers;

/// Settings of the HTTP front end.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    /// Largest job body (and result) in bytes: the server's `--max-job-size`.
    pub max_job_size: u32,
    /// A worker session with no request and no lease for this long ends.
    pub worker_idle: Duration,
    /// Tokens, TLS, and whether an open listener may face the network.
    pub security: Security,
}

/// How long an idle worker session lives unless configured.
pub const DEFAULT_WORKER_IDLE: Duration = Duration::from_secs(60);

/// The HTTP front end on its listener.
pub struct HttpFrontEnd {
    broker: Arc<Broker>,
    config: Config,
    listener: TcpListener,
    tls: Option<TlsAcceptor>,
}

impl HttpFrontEnd {
    /// Binds `addr` (`HOST:PORT`). Refuses (as an error of kind `PermissionDenied` or
    /// `InvalidInput`, with the reason) an open listener beyond loopback, and TLS files
    /// that cannot be used.
    pub async fn bind(
        broker: Arc<Broker>,
        config: Config,
        addr: &str,
    ) -> std::io::Result<HttpFrontEnd> {
        let tls = match &config.security.tls {
            Some(files) => Some(
                tls::acceptor(files)
                    .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?,
            ),
            None => None,
        };
        let listener = jobyard_net::listen::bind_tcp(addr).await?;
        let local = listener.local_addr()?;
        config
            .security
            .check_exposure(local)
            .map_err(|e| std::io::Error::new(std::io::ErrorKind::PermissionDenied, e))?;
        config.security.log_access(local);
        Ok(HttpFrontEnd {
            broker,
            config,
            listener,
            tls,
        })
    }
}

impl FrontEnd for HttpFrontEnd {
    fn name(&self) -> &'static str {
        "http"
    }

    fn describe(&self) -> String {
        let scheme = if self.tls.is_some() { "https" } else { "http" };
        self.listener
            .local_addr()
            .map(|a| format!("{scheme}://{a}"))
            .unwrap_or_default()
    }

    fn start(self: Box<Self>, gate: Gate) -> JoinHandle<()> {
        let HttpFrontEnd {
            broker,
            config,
            listener,
            tls,
        } = *self;
        let guard = Arc::new(config.security.guard());
        let metrics = broker.metrics().protocol("http", &COMMAND_NAMES);
        let (anonymous, _) = broker.connect();
        let api = Api {
            request_limit: limits::max_request_bytes(config.max_job_size),
            inner: Arc::new(Inner {
                broker: broker.clone(),
                workers: Workers::new(config.worker_idle),
                config,
                gate: gate.clone(),
                metrics: metrics.clone(),
                anonymous,
            }),
        };
        tokio::spawn(sweep_idle_workers(api.clone()));
        // The operator's routes (dashboard, /metrics, admin API) share the listener.
        // Every route, the fallback included, is behind the access checks.
        let app = routes::router(api.clone())
            .merge(jobyard_ops::router(api.broker.clone()))
            .merge(security::whoami_routes())
            .layer(axum::middleware::from_fn_with_state(
                guard,
                security::require_token,
            ));
        let mut stop = gate.shutdown_signal();
        let listener = GatedListener {
            listener,
            gate,
            metrics,
            tls,
        };
        tokio::spawn(async move {
            let served = axum::serve(listener, app)
                .with_graceful_shutdown(async move {
                    let _ = stop.wait_for(|&s| s).await;
                })
                .await;
            if let Err(e) = served {
                tracing::warn!("http: {e}");
            }
            api.workers.clear();
            api.broker.disconnect(api.anonymous);
        })
    }
}

/// Ends idle worker sessions every so often, and every session when the server stops.
async fn sweep_idle_workers(api: Api) {
    let mut stop = api.gate.shutdown_signal();
    let every =
        (api.workers.idle_timeout() / 4).clamp(Duration::from_millis(50), Duration::from_secs(1));
    loop {
        tokio::select! {
            _ = tokio::time::sleep(every) => {
                let ended = api.workers.sweep(&api.broker);
                if ended > 0 {
                    tracing::debug!("http: {ended} idle worker session(s) ended");
                }
            }
            _ = stop.wait_for(|&s| s) => {
                api.workers.clear();
                return;
            }
        }
    }
}
