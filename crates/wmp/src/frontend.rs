//! The manager as a front end of `jobyard serve --wmp-listen ENDPOINT`: one ROUTER (our
//! own ZMTP, [`crate::router`]), one
//! broker session owning every lease it hands out, one place from the gate, and one thread
//! of its own that reads messages and engine notices, and sends in batches after the log
//! made the batch's TAKEs durable (so a worker never holds an attempt number a restart
//! could reuse); see `event_loop.rs`.

use std::sync::{mpsc, Arc};

use jobyard_broker::{Broker, ProtocolMetrics};
use jobyard_net::{FrontEnd, Gate};
use jobyard_wmp_wire::zmtp::session::SessionLimits;
use jobyard_wmp_wire::{Limits, HEARTBEAT};
use tokio::task::JoinHandle;

use crate::counters;
use crate::event_loop;
use crate::manager::{Manager, ManagerConfig};
use crate::router::{Heartbeat, Router};

/// Room beside the one large frame (the payload) for a message's small frames (path,
/// delimiter, signature, command, headers: at most 16 × 255 + 8 KiB + a few bytes).
const SMALL_FRAMES_ROOM: usize = 64 * 1024;

/// The WMP manager front end, bound and ready to start.
pub struct WmpFrontEnd {
    broker: Arc<Broker>,
    config: ManagerConfig,
    router: Router,
    endpoint: String,
    name: String,
}

impl WmpFrontEnd {
    /// Binds the ROUTER at `endpoint` (`tcp://HOST:PORT`, e.g. `tcp://127.0.0.1:5570`).
    /// Fails when it cannot be bound or the configured name is not a valid manager name.
    pub fn bind(
        broker: Arc<Broker>,
        endpoint: &str,
        config: ManagerConfig,
    ) -> std::io::Result<WmpFrontEnd> {
        // Registered now, not when serving starts: /metrics (and a caller looking the
        // counters up) sees the manager from the moment it is bound.
        broker.metrics().protocol("wmp", counters::NAMES);
        let limits = Limits {
            max_payload: config.max_payload,
            ..Limits::default()
        };
        let max_frame = limits.max_frame_len();
        let session = SessionLimits {
            max_frame,
            // The router adds the routing id, which the limits count.
            max_frames: limits.max_frames() - 1,
            max_message: max_frame + SMALL_FRAMES_ROOM,
        };
        // The same heartbeat as every other WMP socket.
        let interval = HEARTBEAT;
        let heartbeat = Heartbeat {
            interval,
            timeout: interval * 3,
        };
        let router = Router::bind(endpoint, session, heartbeat)?;
        let bound = router.endpoint().to_owned();
        let name = match &config.name {
            Some(name) if is_manager_name(name) => name.clone(),
            Some(name) => {
                return Err(std::io::Error::other(format!(
                    "bad WMP manager name {name:?}: 1-64 bytes of A-Z a-z 0-9 . _ : @ -"
                )))
            }
            None => default_name(&bound),
        };
        Ok(WmpFrontEnd {
            broker,
            config,
            router,
            endpoint: bound,
            name,
        })
    }

    /// The endpoint actually bound (with the port a `:0` or `*` endpoint got).
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// The `manager` header this manager sends.
    pub fn manager_name(&self) -> &str {
        &self.name
    }
}

/// Decision 9: 1–64 bytes of `[A-Za-z0-9._:@-]`.
pub fn is_manager_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._:@-".contains(&b))
}

/// `HOSTNAME:PORT` of the bound endpoint, reduced to the allowed characters.
fn default_name(endpoint: &str) -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_default();
    let host: String = host
        .trim()
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || "._-".contains(*c))
        .take(40)
        .collect();
    let host = if host.is_empty() {
        "jobyard".into()
    } else {
        host
    };
    let port: String = endpoint
        .rsplit(':')
        .next()
        .unwrap_or("")
        .chars()
        .filter(char::is_ascii_digit)
        .take(8)
        .collect();
    if port.is_empty() {
        host
    } else {
        format!("{host}:{port}")
    }
}

impl FrontEnd for WmpFrontEnd {
    fn name(&self) -> &'static str {
        "wmp"
    }

    fn describe(&self) -> String {
        format!("{} (manager {})", self.endpoint, self.name)
    }

    fn start(self: Box<Self>, gate: Gate) -> JoinHandle<()> {
        tokio::spawn(serve(*self, gate))
    }
}

async fn serve(front: WmpFrontEnd, gate: Gate) {
    let WmpFrontEnd {
        broker,
        config,
        router,
        name,
        ..
    } = front;
    let metrics = broker.metrics().protocol("wmp", counters::NAMES);
    let Some(slot) = gate.try_enter("the WMP manager") else {
        ProtocolMetrics::inc(&metrics.refused);
        tracing::warn!("wmp: no place left under --max-connections; the manager is not started");
        return;
    };
    let waker = match router.waker() {
        Ok(waker) => waker,
        Err(e) => {
            tracing::error!(error = %e, "wmp: cannot create the manager's wake-up socket; the manager is not started");
            return;
        }
    };
    ProtocolMetrics::inc(&metrics.connections);
    ProtocolMetrics::inc(&metrics.connections_total);
    let (conn, mailbox) = broker.connect();
    let manager = Manager::new(broker.clone(), conn, name, &config, metrics.clone());
    let (signals, received) = mpsc::channel();
    let forwarder = tokio::spawn(event_loop::forward_notices(
        mailbox,
        signals,
        waker,
        gate.shutdown_signal(),
    ));
    let (ended, finished) = tokio::sync::oneshot::channel::<()>();
    let runtime = tokio::runtime::Handle::current();
    let thread = std::thread::Builder::new()
        .name("wmp-manager".into())
        .spawn(move || {
            event_loop::run(manager, router, received, runtime);
            drop(ended);
        });
    match thread {
        // Dropped `ended` (also by a panic) ends the wait.
        Ok(_) => {
            let _ = finished.await;
        }
        Err(e) => {
            tracing::error!(error = %e, "wmp: cannot start the manager's thread");
            broker.disconnect(conn);
        }
    }
    forwarder.abort();
    let _ = forwarder.await;
    ProtocolMetrics::dec(&metrics.connections);
    drop(slot);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manager_names_follow_decision_9() {
        assert!(is_manager_name("host-1.example:5570"));
        assert!(is_manager_name("a@b_c"));
        assert!(!is_manager_name(""));
        assert!(!is_manager_name("has space"));
        assert!(!is_manager_name("comma,"));
        assert!(!is_manager_name(&"x".repeat(65)));
        let name = default_name("tcp://127.0.0.1:5570");
        assert!(name.ends_with(":5570") && is_manager_name(&name), "{name}");
    }
}
