//! Starting a worker daemon: start-up reconciliation of the table, the accept loop for
//! clients, the connection to the master, and the handle that stops it all.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use jobyard_broker::ProtocolMetrics;
use jobyard_net::{Gate, Slot};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use super::scheduler::EngineScheduler;
use super::Worker;
use crate::config::JobdConfig;
use crate::connection::{is_localhost, ConnectionRules, PeerConnection, RequestHandler};
use crate::protocol::MAX_REQUEST_FRAME;

/// A worker daemon started in this process (see [`start_jobd`]).
pub struct JobdHandle {
    /// The address it listens on.
    pub addr: SocketAddr,
    /// The worker itself.
    pub worker: Worker,
    stop: Option<oneshot::Sender<()>>,
    done: tokio::task::JoinHandle<()>,
}

impl JobdHandle {
    /// Graceful shutdown (as on SIGTERM); resolves when it is complete.
    pub async fn shutdown(mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        let _ = self.done.await;
    }
}

/// Starts a worker daemon on the current runtime with its targets in an engine of its own
/// (standalone `jobyard jobd`): reconciles the table, listens, connects to the master.
/// `config.port = 0` picks a free port (see [`JobdHandle::addr`]).
pub async fn start_jobd(config: JobdConfig) -> std::io::Result<JobdHandle> {
    start_jobd_with(config, EngineScheduler::standalone()).await
}

/// [`start_jobd`] with the targets kept in `sched` (an [`EngineScheduler`] on the server's
/// broker inside `jobyard serve`); the config's targets are added to it.
pub async fn start_jobd_with(
    config: JobdConfig,
    sched: EngineScheduler,
) -> std::io::Result<JobdHandle> {
    let listener = jobyard_net::listen::bind_tcp_to(&config.host, config.port).await?;
    Ok(serve_jobd(listener, config, sched, None).await)
}

/// Runs a worker daemon on an already bound listener (see [`start_jobd_with`]). With a
/// `gate` (inside `jobyard serve`), every connection, accepted or to the master, takes a
/// place from it: the server's `--max-connections` covers them, and a connection beyond
/// the limit is closed at once (and logged by the gate).
pub async fn serve_jobd(
    listener: TcpListener,
    config: JobdConfig,
    sched: EngineScheduler,
    gate: Option<Gate>,
) -> JobdHandle {
    let addr = listener
        .local_addr()
        .unwrap_or_else(|_| SocketAddr::from(([0, 0, 0, 0], 0)));
    let worker = Worker::with_scheduler(&config, sched);
    if config.reclaim_on_start {
        worker.reclaim_left_over(&config).await;
    }
    let (stop_tx, stop_rx) = oneshot::channel();
    let wake_task = worker.spawn_wakeups();
    let w = worker.clone();
    let done = tokio::spawn(async move {
        w.serve_until_stopped(listener, config, gate, stop_rx, wake_task)
            .await
    });
    JobdHandle {
        addr,
        worker,
        stop: Some(stop_tx),
        done,
    }
}

impl Worker {
    /// Start-up reconciliation: rows a previous run of this worker left `accepted` or
    /// `running` (see [`crate::store::Store::reclaim`]).
    async fn reclaim_left_over(&self, config: &JobdConfig) {
        let targets: Vec<String> = config.targets.iter().map(|t| t.0.clone()).collect();
        match self.inner.store.reclaim(&targets).await {
            Ok((released, failed)) if released + failed > 0 => tracing::warn!(
                released,
                failed,
                "jobd: reclaimed rows left by a previous run (accepted -> waiting, running -> done/fail)"
            ),
            Ok(_) => {}
            Err(e) => tracing::error!(error = %e, "jobd: startup reconciliation failed"),
        }
    }

    /// Starts jobs the engine held back whenever it says they may start now.
    fn spawn_wakeups(&self) -> Option<JoinHandle<()>> {
        let wakeups = self.inner.state.lock().unwrap().sched.take_wakeups();
        wakeups.map(|mut mailbox| {
            let w = self.clone();
            tokio::spawn(async move {
                while mailbox.recv().await.is_some() {
                    w.start_ready();
                }
            })
        })
    }

    /// Serves clients (and the master) until `stop`, then shuts down gracefully and
    /// closes every connection.
    async fn serve_until_stopped(
        self,
        listener: TcpListener,
        config: JobdConfig,
        gate: Option<Gate>,
        stop: oneshot::Receiver<()>,
        wake_task: Option<JoinHandle<()>>,
    ) {
        let master_task = self.spawn_registration(&config, gate.clone());
        let connections = self
            .accept_until(listener, &config, gate.as_ref(), stop)
            .await;
        if let Some(t) = master_task {
            t.abort();
        }
        if let Some(t) = wake_task {
            t.abort();
        }
        if let Some(c) = self.inner.master.lock().unwrap().take() {
            c.close();
        }
        self.shutdown(Duration::from_secs(config.shutdown_timeout))
            .await;
        for c in connections {
            c.close();
        }
    }

    /// Accepts clients until `stop`; returns the connections still open then (the
    /// listener is closed on return).
    async fn accept_until(
        &self,
        listener: TcpListener,
        config: &JobdConfig,
        gate: Option<&Gate>,
        mut stop: oneshot::Receiver<()>,
    ) -> Vec<Arc<PeerConnection>> {
        let handler: Arc<dyn RequestHandler> = Arc::new(self.clone());
        let mut connections: Vec<Arc<PeerConnection>> = Vec::new();
        loop {
            tokio::select! {
                accepted = listener.accept() => {
                    if let Ok((stream, peer)) = accepted {
                        connections.retain(|c| !c.is_closed());
                        connections.extend(self.accept(stream, peer, config, gate, &handler));
                    }
                }
                _ = &mut stop => return connections,
            }
        }
    }

    /// Serves one accepted client, if the gate lets it in; its place is given back when
    /// the connection ends.
    fn accept(
        &self,
        stream: TcpStream,
        peer: SocketAddr,
        config: &JobdConfig,
        gate: Option<&Gate>,
        handler: &Arc<dyn RequestHandler>,
    ) -> Option<Arc<PeerConnection>> {
        let place = self.admit(gate, &peer.to_string())?;
        let trusted = config.always_allow_localhost && is_localhost(&peer);
        let rules = ConnectionRules::new(config.password.clone(), trusted);
        let connection =
            PeerConnection::spawn(stream, rules, handler.clone(), MAX_REQUEST_FRAME, None);
        let watched = connection.clone();
        tokio::spawn(async move {
            watched.closed().await;
            drop(place);
        });
        Some(connection)
    }
}

impl Worker {
    /// A place for one connection: from the server's gate when there is one (`None`:
    /// refused, counted and logged), and counted in the protocol's connection figures
    /// until it is dropped.
    pub(super) fn admit(&self, gate: Option<&Gate>, who: &str) -> Option<Place> {
        let p = &self.inner.metrics.protocol;
        let slot = match gate {
            Some(g) => match g.try_enter(who) {
                Some(s) => Some(s),
                None => {
                    // The gate logs it (at most once a second).
                    ProtocolMetrics::inc(&p.refused);
                    return None;
                }
            },
            None => None,
        };
        ProtocolMetrics::inc(&p.connections);
        ProtocolMetrics::inc(&p.connections_total);
        Some(Place {
            _slot: slot,
            metrics: p.clone(),
        })
    }
}

/// One open connection's place: a slot of the server's gate (inside `jobyard serve`) and
/// one in the `jobd` connections gauge, both given back when dropped.
pub(super) struct Place {
    _slot: Option<Slot>,
    metrics: Arc<ProtocolMetrics>,
}

impl Drop for Place {
    fn drop(&mut self) {
        ProtocolMetrics::dec(&self.metrics.connections);
    }
}
