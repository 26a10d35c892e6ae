//! One outgoing connection (worker→manager, or device→upstream): a DEALER that is rebuilt
//! with backoff whenever it fails (spec §3.1: one DEALER per manager endpoint). It only
//! moves frames; protocol state lives with its owner (the worker core or the device).

use std::time::Duration;

use tokio::sync::mpsc;
use zeromq::{DealerSocket, Socket, SocketRecv, SocketSend};

use crate::transport::{frames_of, guarded, message_of, Frames};

/// Which connection (index into the configured endpoints).
pub type LinkId = usize;

/// What a link tells its owner.
#[derive(Debug)]
pub enum LinkEvent {
    /// Connected (again): the manager does not know us yet.
    Up(LinkId),
    /// The connection failed; reconnecting.
    Down(LinkId),
    /// A message arrived.
    Frames(LinkId, Frames),
}

/// Backoff between reconnect attempts.
#[derive(Debug, Clone, Copy)]
pub struct Reconnect {
    /// First wait after a failure.
    pub min: Duration,
    /// Longest wait.
    pub max: Duration,
    /// How long one connect attempt may take before it counts as failed.
    pub connect_timeout: Duration,
}

/// Runs the link until `outgoing` is closed and drained: connects, forwards, reconnects.
pub async fn run(
    link: LinkId,
    endpoint: String,
    reconnect: Reconnect,
    mut outgoing: mpsc::Receiver<Frames>,
    events: mpsc::Sender<LinkEvent>,
) {
    let mut backoff = reconnect.min;
    // A message that failed to send is retried on the next connection, not lost.
    let mut held: Option<Frames> = None;
    loop {
        let result = guarded(session(
            link,
            &endpoint,
            reconnect.connect_timeout,
            &mut outgoing,
            &events,
            &mut held,
            &mut backoff,
            reconnect.min,
        ))
        .await;
        match result {
            Ok(SessionEnd::Closed) => return,
            Ok(SessionEnd::Failed(why)) => tracing::debug!(endpoint, why, "wmp link failed"),
            Err(panic) => tracing::debug!(endpoint, panic, "wmp link failed (zeromq panicked)"),
        }
        if events.send(LinkEvent::Down(link)).await.is_err() {
            return;
        }
        // Wait, but stop at once if the worker finished meanwhile and nothing is left.
        tokio::select! {
            _ = tokio::time::sleep(backoff) => {}
            _ = events.closed() => return,
        }
        backoff = (backoff * 2).min(reconnect.max);
    }
}

enum SessionEnd {
    Closed,
    Failed(String),
}

#[allow(clippy::too_many_arguments)]
async fn session(
    link: LinkId,
    endpoint: &str,
    connect_timeout: Duration,
    outgoing: &mut mpsc::Receiver<Frames>,
    events: &mpsc::Sender<LinkEvent>,
    held: &mut Option<Frames>,
    backoff: &mut Duration,
    backoff_min: Duration,
) -> SessionEnd {
    let mut socket = DealerSocket::new();
    match tokio::time::timeout(connect_timeout, socket.connect(endpoint)).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => return SessionEnd::Failed(e.to_string()),
        Err(_) => return SessionEnd::Failed("connect timed out".into()),
    }
    *backoff = backoff_min;
    if events.send(LinkEvent::Up(link)).await.is_err() {
        return SessionEnd::Closed;
    }
    if let Some(frames) = held.take() {
        if let Some(msg) = message_of(frames.clone()) {
            if let Err(e) = socket.send(msg).await {
                *held = Some(frames);
                return SessionEnd::Failed(e.to_string());
            }
        }
    }
    loop {
        tokio::select! {
            received = socket.recv() => match received {
                Ok(msg) => {
                    if events.send(LinkEvent::Frames(link, frames_of(msg))).await.is_err() {
                        return SessionEnd::Closed;
                    }
                }
                Err(e) => return SessionEnd::Failed(e.to_string()),
            },
            next = outgoing.recv() => match next {
                None => return SessionEnd::Closed,
                Some(frames) => {
                    let Some(msg) = message_of(frames.clone()) else { continue };
                    if let Err(e) = socket.send(msg).await {
                        *held = Some(frames);
                        return SessionEnd::Failed(e.to_string());
                    }
                }
            },
        }
    }
}
