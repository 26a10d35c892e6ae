//! The WMP device (spec §3.5, §3.10): workers (or lower devices) connect to its ROUTER, it
//! connects one DEALER to each upstream manager (or higher device), and forwards by the
//! alias-stack rule. Stateless, so devices chain and restart freely.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::mpsc;

use jobyard_wmp_wire::route::{downward, upward, Upward};
use jobyard_wmp_wire::{Limits, Sent};

use crate::link::{self, LinkEvent};
use crate::transport::{AsyncSocket, Frames, SocketOptions};

/// One upstream: its alias (the path frame workers' replies carry) and endpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Upstream {
    /// Non-empty, unique within the device.
    pub alias: Bytes,
    /// Where to connect, e.g. `tcp://manager:5570`.
    pub endpoint: String,
}

impl Upstream {
    /// Parses `ALIAS=ENDPOINT`, or a bare `ENDPOINT` that gets the alias `u<index>`.
    pub fn parse(spec: &str, index: usize) -> Upstream {
        match spec.split_once('=') {
            Some((alias, endpoint)) if !alias.is_empty() && !alias.contains("://") => Upstream {
                alias: Bytes::copy_from_slice(alias.as_bytes()),
                endpoint: endpoint.to_owned(),
            },
            _ => Upstream {
                alias: Bytes::from(format!("u{index}")),
                endpoint: spec.to_owned(),
            },
        }
    }
}

/// Counters (`device_forwarded_total{dir}`, `device_dropped_total{reason}`), readable while
/// the device runs.
#[derive(Debug, Default)]
pub struct DeviceStats {
    /// Messages sent upstream (a fanned-out READY counts once per upstream).
    pub forwarded_up: AtomicU64,
    /// Messages sent downstream.
    pub forwarded_down: AtomicU64,
    /// Dropped: not a WMP/1 envelope or path too long.
    pub dropped_malformed: AtomicU64,
    /// Dropped: the path named no known upstream.
    pub dropped_unknown_alias: AtomicU64,
    /// Dropped: a queue towards a peer was full, or the peer was gone.
    pub dropped_unroutable: AtomicU64,
}

impl DeviceStats {
    /// All drops together.
    pub fn dropped(&self) -> u64 {
        self.dropped_malformed.load(Ordering::Relaxed)
            + self.dropped_unknown_alias.load(Ordering::Relaxed)
            + self.dropped_unroutable.load(Ordering::Relaxed)
    }
}

/// Device settings beyond the endpoints.
#[derive(Debug, Clone)]
pub struct DeviceConfig {
    /// Bounds checked on every message.
    pub limits: Limits,
    /// libzmq socket options (reconnect, heartbeats); the frame limit comes from `limits`.
    pub socket: SocketOptions,
    /// Messages queued per direction inside the device before new ones are dropped.
    pub queue: usize,
}

impl Default for DeviceConfig {
    fn default() -> Self {
        DeviceConfig {
            limits: Limits::default(),
            socket: SocketOptions {
                linger: Duration::ZERO,
                ..SocketOptions::default()
            },
            queue: 4096,
        }
    }
}

/// Runs a device with default settings until `shutdown` completes. Fails only if `listen`
/// cannot be bound or an alias is empty or repeated.
pub async fn run(
    listen: &str,
    upstreams: Vec<Upstream>,
    shutdown: impl std::future::Future,
) -> Result<Arc<DeviceStats>, String> {
    run_with(
        listen,
        upstreams,
        DeviceConfig::default(),
        Arc::default(),
        shutdown,
    )
    .await
}

/// [`run`] with explicit settings and a counters handle the caller can read meanwhile.
pub async fn run_with(
    listen: &str,
    upstreams: Vec<Upstream>,
    config: DeviceConfig,
    stats: Arc<DeviceStats>,
    shutdown: impl std::future::Future,
) -> Result<Arc<DeviceStats>, String> {
    for (i, up) in upstreams.iter().enumerate() {
        if up.alias.is_empty() || upstreams[..i].iter().any(|u| u.alias == up.alias) {
            return Err(format!(
                "upstream alias {:?} is empty or repeated",
                up.alias
            ));
        }
        if up.alias.len() > config.limits.max_path_frame {
            return Err(format!("upstream alias {:?} is too long", up.alias));
        }
    }
    let ctx = zmq::Context::new();
    let mut opts = config.socket;
    opts.max_frame = config.limits.max_frame_len();
    let router =
        AsyncSocket::bind_router(&ctx, listen, &config.limits, &opts).map_err(|e| e.to_string())?;

    let (down_tx, down_rx) = mpsc::channel::<Frames>(config.queue);
    let (from_below_tx, mut from_below) = mpsc::channel::<Frames>(config.queue);
    let router_task = tokio::spawn(router_loop(router, down_rx, from_below_tx, stats.clone()));

    let (event_tx, mut events) = mpsc::channel::<LinkEvent>(config.queue);
    let mut up_senders = Vec::with_capacity(upstreams.len());
    let mut links = tokio::task::JoinSet::new();
    for (i, up) in upstreams.iter().enumerate() {
        let (tx, rx) = mpsc::channel(config.queue);
        up_senders.push(tx);
        links.spawn(link::run(
            ctx.clone(),
            i,
            up.endpoint.clone(),
            opts,
            rx,
            event_tx.clone(),
        ));
    }
    drop(event_tx);

    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        tokio::select! {
            _ = &mut shutdown => break,
            Some(frames) = from_below.recv() => {
                match upward(frames, &config.limits) {
                    Ok(Upward::FanOut(frames)) => {
                        for tx in &up_senders {
                            count_send(tx.try_send(frames.clone()).is_ok(), &stats.forwarded_up, &stats);
                        }
                    }
                    Ok(Upward::To { alias, frames }) => {
                        match upstreams.iter().position(|u| u.alias == alias) {
                            Some(i) => count_send(up_senders[i].try_send(frames).is_ok(), &stats.forwarded_up, &stats),
                            None => {
                                stats.dropped_unknown_alias.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                    }
                    Err(e) => {
                        tracing::debug!(reason = e.reason(), "wmp device dropped a message from below");
                        stats.dropped_malformed.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
            Some(ev) = events.recv() => match ev {
                LinkEvent::Frames(i, frames) => match downward(frames, &upstreams[i].alias, &config.limits) {
                    Ok(frames) => count_send(down_tx.try_send(frames).is_ok(), &stats.forwarded_down, &stats),
                    Err(e) => {
                        tracing::debug!(reason = e.reason(), "wmp device dropped a message from above");
                        stats.dropped_malformed.fetch_add(1, Ordering::Relaxed);
                    }
                },
                LinkEvent::Up(i) => tracing::info!(upstream = upstreams[i].endpoint, "wmp device connected upstream"),
                LinkEvent::Down(i) => tracing::info!(upstream = upstreams[i].endpoint, "wmp device lost upstream; reconnecting"),
            },
        }
    }
    drop(up_senders);
    router_task.abort();
    links.abort_all();
    let _ = router_task.await;
    while links.join_next().await.is_some() {}
    drop(events);
    drop(from_below);
    let _ = tokio::task::spawn_blocking(move || drop(ctx)).await;
    Ok(stats)
}

/// Counts a hand-off to a peer queue as forwarded, or as dropped when the queue was full.
fn count_send(ok: bool, forwarded: &AtomicU64, stats: &DeviceStats) {
    if ok {
        forwarded.fetch_add(1, Ordering::Relaxed);
    } else {
        stats.dropped_unroutable.fetch_add(1, Ordering::Relaxed);
    }
}

/// Owns the downstream ROUTER: received messages go to `from_below`, `down` is sent. A
/// send to a worker that is gone (`EHOSTUNREACH`, from ROUTER_MANDATORY) or whose queue is
/// full is dropped and counted: a device never waits on one slow peer.
async fn router_loop(
    mut router: AsyncSocket,
    mut down: mpsc::Receiver<Frames>,
    from_below: mpsc::Sender<Frames>,
    stats: Arc<DeviceStats>,
) {
    loop {
        loop {
            match router.try_recv() {
                Ok(Some(frames)) => {
                    if from_below.send(frames).await.is_err() {
                        return;
                    }
                }
                Ok(None) => break,
                Err(e) => {
                    tracing::debug!(error = %e, "wmp device: ROUTER receive failed");
                    break;
                }
            }
        }
        tokio::select! {
            _ = router.changed() => {}
            next = down.recv() => {
                let Some(frames) = next else { return };
                if router.send_now(&frames) != Sent::Queued {
                    stats.forwarded_down.fetch_sub(1, Ordering::Relaxed);
                    stats.dropped_unroutable.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
    }
}
