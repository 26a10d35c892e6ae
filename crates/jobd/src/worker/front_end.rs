//! The jobd worker inside `jobyard serve` (`--jobd-config F`): the same worker as
//! `jobyard jobd --config F`, with its targets as queues of the server's engine, so the
//! other protocols' stats show them and their concurrency is the engine's lease limit.

use std::path::Path;
use std::sync::Arc;

use jobyard_broker::Broker;
use jobyard_net::{FrontEnd, Gate};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

use super::accept::serve_jobd;
use super::scheduler::EngineScheduler;
use crate::config::JobdConfig;

/// The server's shutdown waits this long for every session; the worker's own shutdown
/// (grace for running jobs, then SIGTERM, then SIGKILL 5 s later) must fit in it.
const SERVER_SHUTDOWN_WINDOW_SECS: u64 = 10;
/// What the worker's shutdown needs besides its grace period (SIGTERM→SIGKILL pause and
/// the final writes).
const AFTER_GRACE_SECS: u64 = 6;

/// A jobd worker daemon as one of the server's front ends.
pub struct JobdFrontEnd {
    broker: Arc<Broker>,
    config: JobdConfig,
    listener: TcpListener,
}

impl JobdFrontEnd {
    /// Reads the jobd ini file at `path` (jobd's format and messages) and binds its
    /// `host`/`port`. Errors are ready to print.
    pub async fn bind(broker: Arc<Broker>, path: &Path) -> Result<JobdFrontEnd, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("jobd: cannot read {}: {e}", path.display()))?;
        let mut config = JobdConfig::parse(&text).map_err(|e| format!("jobd: {e}"))?;
        let window = SERVER_SHUTDOWN_WINDOW_SECS - AFTER_GRACE_SECS;
        if config.shutdown_timeout > window {
            tracing::warn!(
                "jobd: shutdown_timeout {} s is cut to {window} s inside `jobyard serve` \
                 (the server stops within {SERVER_SHUTDOWN_WINDOW_SECS} s)",
                config.shutdown_timeout
            );
            config.shutdown_timeout = window;
        }
        let listener = jobyard_net::listen::bind_tcp_to(&config.host, config.port)
            .await
            .map_err(|e| {
                format!(
                    "jobd: cannot listen on {}:{}: {e}",
                    config.host, config.port
                )
            })?;
        Ok(JobdFrontEnd {
            broker,
            config,
            listener,
        })
    }
}

impl FrontEnd for JobdFrontEnd {
    fn name(&self) -> &'static str {
        "jobd"
    }

    fn describe(&self) -> String {
        self.listener
            .local_addr()
            .map(|a| a.to_string())
            .unwrap_or_else(|_| "?".into())
    }

    fn start(self: Box<Self>, gate: Gate) -> JoinHandle<()> {
        tokio::spawn(async move {
            // The worker is one session for the server's shutdown: it holds its place
            // until running jobs are finished and recorded.
            let slot = gate.try_enter("the jobd worker");
            let mut sched = EngineScheduler::new(self.broker.clone());
            sched.publish_as(format!("{} ({})", self.config.name, self.describe()));
            let handle = serve_jobd(self.listener, self.config, sched, Some(gate.clone())).await;
            let mut stop = gate.shutdown_signal();
            while !*stop.borrow() {
                if stop.changed().await.is_err() {
                    break;
                }
            }
            handle.shutdown().await;
            drop(slot);
        })
    }
}
