//! The worker's registration with its master: kept up over a connection the worker opens
//! (and reopens), renewed when its targets change. The master's requests arrive on that
//! same connection and are answered by the same handlers as clients'.

use std::sync::Arc;
use std::time::Duration;

use jobyard_net::Gate;
use serde_json::{json, Value};
use tokio::net::TcpStream;
use tokio::task::JoinHandle;

use super::{metrics, Worker};
use crate::config::JobdConfig;
use crate::connection::{ConnectionRules, PeerConnection, RequestHandler};
use crate::protocol::MAX_RESPONSE_FRAME;

impl Worker {
    pub(super) fn registration(&self) -> Value {
        let st = self.inner.state.lock().unwrap();
        let targets: Vec<String> = st.sched.targets().into_iter().map(|t| t.name).collect();
        json!({"name": self.inner.name, "targets": targets})
    }

    /// Tells the master about a change of targets (jobd never did).
    pub(super) fn reregister(&self) {
        let master = self.inner.master.lock().unwrap().clone();
        if let Some(master) = master {
            let data = self.registration();
            tokio::spawn(async move {
                if let Err(e) = master.request("register-worker", data, None).await {
                    tracing::warn!(error = %e, "jobd: re-registering with the master failed");
                }
            });
        }
    }

    /// Keeps this worker registered with the master its config names, if any: connects,
    /// registers, and when the connection ends connects again after a pause.
    pub(super) fn spawn_registration(
        &self,
        config: &JobdConfig,
        gate: Option<Gate>,
    ) -> Option<JoinHandle<()>> {
        let (host, port) = config.master.clone()?;
        let password = config.password.clone();
        let pause = Duration::from_secs(config.master_reconnect_timeout.max(1));
        let w = self.clone();
        Some(tokio::spawn(async move {
            w.master_loop(host, port, password, pause, gate).await
        }))
    }

    async fn master_loop(
        &self,
        host: String,
        port: u16,
        password: Option<String>,
        pause: Duration,
        gate: Option<Gate>,
    ) {
        let handler: Arc<dyn RequestHandler> = Arc::new(self.clone());
        loop {
            let Some(place) = self.admit(gate.as_ref(), "the connection to the master") else {
                tokio::time::sleep(pause).await;
                continue;
            };
            match TcpStream::connect((host.as_str(), port)).await {
                Ok(stream) => {
                    let rules = ConnectionRules::new(None, true);
                    let connection = PeerConnection::spawn(
                        stream,
                        rules,
                        handler.clone(),
                        MAX_RESPONSE_FRAME,
                        password.clone(),
                    );
                    self.stay_registered(connection).await;
                }
                Err(e) => tracing::warn!(error = %e, "jobd: cannot reach the master"),
            }
            drop(place);
            tokio::time::sleep(pause).await;
        }
    }

    /// Registers over a new connection to the master and serves the master's requests on
    /// it until it ends.
    async fn stay_registered(&self, connection: Arc<PeerConnection>) {
        *self.inner.master.lock().unwrap() = Some(connection.clone());
        let w = &self.inner.metrics.worker;
        w.set(metrics::MASTER_CONNECTED, 1);
        w.inc(metrics::MASTER_CONNECTIONS);
        match connection
            .request("register-worker", self.registration(), None)
            .await
        {
            Ok(_) => tracing::info!("jobd: registered with the master"),
            Err(e) => {
                tracing::warn!(error = %e, "jobd: registration with the master failed")
            }
        }
        connection.closed().await;
        *self.inner.master.lock().unwrap() = None;
        self.inner.metrics.worker.set(metrics::MASTER_CONNECTED, 0);
        tracing::warn!("jobd: connection to the master lost");
    }
}
