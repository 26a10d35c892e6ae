//! Starting jobd-master: its listener, the connections it accepts, and the pings that
//! find workers gone silent.

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::oneshot;

use super::{Inner, Master, State};
use crate::config::MasterConfig;
use crate::connection::{is_localhost, ConnectionRules, PeerConnection, RequestHandler};
use crate::protocol::MAX_REQUEST_FRAME;

/// A master started in this process (see [`start_master`]).
pub struct MasterHandle {
    /// The address it listens on.
    pub addr: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    done: tokio::task::JoinHandle<()>,
}

impl MasterHandle {
    /// Stops listening and closes every connection.
    pub async fn shutdown(mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        let _ = self.done.await;
    }
}

/// Starts jobd-master on the current runtime (`port = 0` picks a free port).
pub async fn start_master(config: MasterConfig) -> std::io::Result<MasterHandle> {
    let listener = jobyard_net::listen::bind_tcp_to(&config.host, config.port).await?;
    let addr = listener.local_addr()?;
    let master = Master {
        inner: Arc::new(Inner {
            state: Mutex::new(State::default()),
            throttle: Duration::from_secs_f64(config.poke_throttle_interval),
            worker_timeout: Duration::from_secs(config.worker_timeout),
        }),
    };
    let (stop_tx, mut stop_rx) = oneshot::channel::<()>();
    let ping_every = Duration::from_secs(config.ping_interval);
    let done = tokio::spawn(async move {
        let handler: Arc<dyn RequestHandler> = Arc::new(master.clone());
        let mut ticker = tokio::time::interval(ping_every);
        ticker.tick().await;
        let mut links: Vec<Arc<PeerConnection>> = Vec::new();
        loop {
            tokio::select! {
                accepted = listener.accept() => {
                    if let Ok((stream, peer)) = accepted {
                        let trusted = config.always_allow_localhost && is_localhost(&peer);
                        let session = ConnectionRules::new(config.password.clone(), trusted);
                        links.retain(|l| !l.is_closed());
                        links.push(PeerConnection::spawn(stream, session, handler.clone(), MAX_REQUEST_FRAME, None));
                    }
                }
                _ = ticker.tick() => master.ping_workers(),
                _ = &mut stop_rx => break,
            }
        }
        for l in links {
            l.close();
        }
    });
    Ok(MasterHandle {
        addr,
        stop: Some(stop_tx),
        done,
    })
}

impl Master {
    /// Drops workers that sent nothing since the previous ping, then pings the rest.
    fn ping_workers(&self) {
        let st = self.inner.state.lock().unwrap();
        for w in &st.workers {
            if !w.connection.ponged.swap(false, Ordering::Relaxed) {
                tracing::warn!(worker = %w.name, "jobd-master: worker did not answer the last ping; dropping it");
                w.connection.close();
            } else {
                w.connection.ping();
            }
        }
    }
}
