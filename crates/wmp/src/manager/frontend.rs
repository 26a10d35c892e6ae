//! The manager as a front end of `jobyard serve --wmp-listen ENDPOINT`: one ROUTER, one
//! broker session owning every lease it hands out, one place from the gate, and one task
//! that reads messages and engine notices, and sends in batches after the log made the
//! batch's TAKEs durable (so a worker never holds an attempt number a restart could reuse).

use std::sync::Arc;
use std::time::{Duration, Instant};

use jobyard_broker::{Broker, ProtocolMetrics};
use jobyard_net::{FrontEnd, Gate};
use tokio::task::JoinHandle;

use super::core::{Manager, ManagerConfig, OutKind};
use super::counters::{self, Counter};
use crate::limits::Limits;
use crate::transport::{AsyncSocket, Sent, SocketOptions};

/// Messages handled before the loop sends and looks at its timers again.
const BATCH: usize = 256;

/// The WMP manager front end, bound and ready to start.
pub struct WmpFrontEnd {
    broker: Arc<Broker>,
    config: ManagerConfig,
    ctx: zmq::Context,
    router: AsyncSocket,
    endpoint: String,
    name: String,
}

impl WmpFrontEnd {
    /// Binds the ROUTER at `endpoint` (any libzmq endpoint, e.g. `tcp://127.0.0.1:5570`).
    /// Fails when it cannot be bound or the configured name is not a valid manager name.
    /// Call inside the tokio runtime.
    pub fn bind(
        broker: Arc<Broker>,
        endpoint: &str,
        config: ManagerConfig,
    ) -> std::io::Result<WmpFrontEnd> {
        // Registered now, not when serving starts: /metrics (and a caller looking the
        // counters up) sees the manager from the moment it is bound.
        broker.metrics().protocol("wmp", counters::NAMES);
        let ctx = zmq::Context::new();
        let limits = Limits {
            max_payload: config.max_payload,
            ..Limits::default()
        };
        let opts = SocketOptions {
            max_frame: crate::worker::frame_limit(&limits),
            linger: Duration::ZERO,
            ..SocketOptions::default()
        };
        let router = AsyncSocket::bind_router(&ctx, endpoint, &limits, &opts)?;
        let bound = router
            .socket()
            .get_last_endpoint()
            .ok()
            .and_then(Result::ok)
            .unwrap_or_else(|| endpoint.to_owned());
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
            ctx,
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
        ctx,
        mut router,
        name,
        ..
    } = front;
    let metrics = broker.metrics().protocol("wmp", counters::NAMES);
    let Some(slot) = gate.try_enter("the WMP manager") else {
        ProtocolMetrics::inc(&metrics.refused);
        tracing::warn!("wmp: no place left under --max-connections; the manager is not started");
        return;
    };
    ProtocolMetrics::inc(&metrics.connections);
    ProtocolMetrics::inc(&metrics.connections_total);
    let (conn, mut mailbox) = broker.connect();
    let mut manager = Manager::new(broker.clone(), conn, name, &config, metrics.clone());
    let mut shutdown = gate.shutdown_signal();
    loop {
        let mut handled = 0;
        while handled < BATCH {
            match router.try_recv() {
                Ok(Some(frames)) => {
                    manager.on_frames(frames);
                    handled += 1;
                }
                Ok(None) => break,
                Err(e) => {
                    tracing::debug!(error = %e, "wmp manager: receive failed");
                    break;
                }
            }
        }
        while let Some(notice) = mailbox.try_recv() {
            manager.on_notice(notice);
        }
        if manager.deadline().is_some_and(|at| at <= Instant::now()) {
            manager.pass();
        }
        let sent = flush(&mut manager, &mut router).await;
        // A send may have consumed libzmq's readiness edge: look again before waiting.
        if handled == BATCH || sent {
            tokio::task::yield_now().await;
            continue;
        }
        let deadline = manager
            .deadline()
            .unwrap_or_else(|| Instant::now() + Duration::from_secs(3600));
        tokio::select! {
            _ = router.changed() => {}
            notice = mailbox.recv() => match notice {
                Some(notice) => manager.on_notice(notice),
                None => break,
            },
            _ = tokio::time::sleep_until(deadline.into()) => {}
            _ = shutdown.changed() => break,
        }
    }
    manager.stop();
    drop(router);
    let _ = tokio::task::spawn_blocking(move || drop(ctx)).await;
    ProtocolMetrics::dec(&metrics.connections);
    drop(slot);
}

/// Waits until the queued TAKEs' fences are durable, then sends everything queued without
/// ever waiting on a peer. Returns whether anything was handed to libzmq.
async fn flush(manager: &mut Manager, router: &mut AsyncSocket) -> bool {
    if manager.out.is_empty() {
        return false;
    }
    if manager.lsn > 0 {
        manager.broker.wait_durable(manager.lsn).await;
        manager.lsn = 0;
    }
    for out in std::mem::take(&mut manager.out) {
        match router.send_now(&out.frames) {
            Sent::Queued => {}
            Sent::Unreachable => {
                counters::count(&manager.metrics, Counter::SendUnreachable);
                match out.kind {
                    OutKind::Wake(path) => manager.registry.forget(&path),
                    OutKind::Take { path, job, attempt } => {
                        manager.registry.forget(&path);
                        manager.undo_take(job, attempt);
                    }
                    OutKind::No => {}
                }
            }
            // A full peer queue: WAKEs and NOs are retried by design; a TAKE's job comes
            // back when its lease runs out.
            Sent::Full | Sent::Failed => counters::count(&manager.metrics, Counter::SendDropped),
        }
    }
    true
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
