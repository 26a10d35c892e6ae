//! One outgoing connection (worker→manager, or device→upstream): a libzmq DEALER (spec §3.1:
//! one DEALER per manager endpoint) whose connection state is followed through a socket
//! monitor, so the owner learns when the manager is (again) reachable. libzmq reconnects by
//! itself with backoff. It only moves frames; protocol state lives with its owner (the
//! worker core or the device).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::sync::mpsc;

use crate::transport::{monitor_event, AsyncSocket, Frames, Monitor, SocketOptions};

/// Which connection (index into the configured endpoints).
pub type LinkId = usize;

/// What a link tells its owner.
#[derive(Debug)]
pub enum LinkEvent {
    /// Connected (again): the manager may not know us yet.
    Up(LinkId),
    /// The connection closed; libzmq is reconnecting.
    Down(LinkId),
    /// A message arrived.
    Frames(LinkId, Frames),
}

static MONITORS: AtomicU64 = AtomicU64::new(0);

fn open(
    ctx: &zmq::Context,
    endpoint: &str,
    opts: &SocketOptions,
) -> std::io::Result<(AsyncSocket, AsyncSocket)> {
    let dealer = AsyncSocket::new(ctx, zmq::DEALER, opts)?;
    let name = format!(
        "inproc://wmp-link-monitor-{}-{}",
        std::process::id(),
        MONITORS.fetch_add(1, Ordering::Relaxed)
    );
    let events = zmq::SocketEvent::CONNECTED.to_raw() as i32
        | zmq::SocketEvent::DISCONNECTED.to_raw() as i32;
    dealer
        .socket()
        .monitor(&name, events)
        .map_err(std::io::Error::other)?;
    let monitor = ctx.socket(zmq::PAIR).map_err(std::io::Error::other)?;
    monitor.connect(&name).map_err(std::io::Error::other)?;
    dealer
        .socket()
        .connect(endpoint)
        .map_err(std::io::Error::other)?;
    Ok((dealer, AsyncSocket::wrap(monitor)?))
}

/// Runs the link until `outgoing` is closed: forwards both ways and reports connection
/// changes. Messages to send wait in libzmq's queue while disconnected (up to its high-water
/// mark), and are flushed on close within the socket's linger time.
pub async fn run(
    ctx: zmq::Context,
    link: LinkId,
    endpoint: String,
    opts: SocketOptions,
    mut outgoing: mpsc::Receiver<Frames>,
    events: mpsc::Sender<LinkEvent>,
) {
    let (mut dealer, mut monitor) = match open(&ctx, &endpoint, &opts) {
        Ok(sockets) => sockets,
        Err(e) => {
            tracing::warn!(endpoint, error = %e, "wmp: cannot connect; this link stays down");
            while outgoing.recv().await.is_some() {}
            return;
        }
    };
    // A message that met a full queue, retried before taking the next one.
    let mut pending: Option<Frames> = None;
    loop {
        while let Ok(Some(ev)) = monitor.try_recv() {
            let event = match monitor_event(&ev) {
                Monitor::Connected => LinkEvent::Up(link),
                Monitor::Disconnected => LinkEvent::Down(link),
                Monitor::Other => continue,
            };
            if events.send(event).await.is_err() {
                return;
            }
        }
        loop {
            match dealer.try_recv() {
                Ok(Some(frames)) => {
                    if events.send(LinkEvent::Frames(link, frames)).await.is_err() {
                        return;
                    }
                }
                Ok(None) => break,
                Err(e) => {
                    tracing::debug!(endpoint, error = %e, "wmp link: receive failed");
                    break;
                }
            }
        }
        if let Some(frames) = pending.take() {
            if let Ok(false) = dealer.try_send(&frames) {
                pending = Some(frames);
            }
        }
        tokio::select! {
            _ = dealer.changed() => {}
            _ = monitor.changed() => {}
            next = outgoing.recv(), if pending.is_none() => match next {
                None => return,
                Some(frames) => match dealer.try_send(&frames) {
                    Ok(true) => {}
                    Ok(false) => pending = Some(frames),
                    Err(e) => tracing::debug!(endpoint, error = %e, "wmp link: send failed; message dropped"),
                },
            },
            _ = tokio::time::sleep(Duration::from_millis(5)), if pending.is_some() => {}
        }
    }
}
