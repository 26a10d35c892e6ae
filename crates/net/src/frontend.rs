//! Front ends and the accept loop.

use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinHandle;

use crate::connection::{serve_stream, Conn};
use crate::gate::{Gate, Slot, StopBell};
use crate::hop;
use crate::listen::{Listener, Peer, Stream};
use crate::placement::Placement;
use crate::protocol::Protocol;

/// Something that serves clients of one protocol until the gate shuts down.
///
/// Byte-stream protocols get this from [`TcpFrontEnd`]; a front end whose peers are not
/// one stream each (ZeroMQ, HTTP) implements it directly, taking a [`crate::Slot`] from the
/// gate for every session it keeps and stopping when [`Gate::shutdown_signal`] fires.
pub trait FrontEnd: Send + 'static {
    /// The protocol's name, for logs.
    fn name(&self) -> &'static str;
    /// Where it listens, for the start-up log line.
    fn describe(&self) -> String;
    /// Starts serving on the current tokio runtime.
    fn start(self: Box<Self>, gate: Gate) -> JoinHandle<()>;
}

/// A byte-stream [`Protocol`] on a listener: one session per accepted connection.
pub struct TcpFrontEnd<P: Protocol> {
    pub protocol: Arc<P>,
    pub listener: Listener,
}

impl<P: Protocol> FrontEnd for TcpFrontEnd<P> {
    fn name(&self) -> &'static str {
        self.protocol.name()
    }

    fn describe(&self) -> String {
        self.listener.describe()
    }

    fn start(self: Box<Self>, gate: Gate) -> JoinHandle<()> {
        tokio::spawn(accept_loop(self.protocol, self.listener, gate))
    }
}

/// Starts every front end and logs where each listens.
pub fn serve(front_ends: Vec<Box<dyn FrontEnd>>, gate: &Gate) -> Vec<JoinHandle<()>> {
    front_ends
        .into_iter()
        .map(|f| {
            tracing::info!(protocol = f.name(), addr = %f.describe(), "listening");
            f.start(gate.clone())
        })
        .collect()
}

/// Accepts connections while the gate has places; refuses (and says so in the log) beyond.
async fn accept_loop<P: Protocol>(protocol: Arc<P>, listener: Listener, gate: Gate) {
    let mut shutdown = gate.shutdown_signal();
    loop {
        let accepted = tokio::select! {
            a = listener.accept() => a,
            _ = shutdown.changed() => return,
        };
        let (stream, addr) = match accepted {
            Ok(a) => a,
            Err(e) => {
                tracing::warn!("{}: accept failed: {e}", protocol.name());
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let Some(slot) = gate.try_enter(&addr) else {
            jobyard_broker::ProtocolMetrics::inc(&protocol.metrics().refused);
            drop(stream);
            continue;
        };
        let shutdown = gate.stop_bell();
        match gate.placement() {
            Some(placement) => {
                if let Err(e) = place_accepted(&protocol, stream, addr, shutdown, placement, slot) {
                    tracing::debug!("{}: cannot place a connection: {e}", protocol.name());
                }
            }
            None => {
                tokio::spawn(serve_accepted(
                    protocol.clone(),
                    stream,
                    addr,
                    shutdown,
                    slot,
                ));
            }
        }
    }
}

/// The fixed model: serves the connection on this runtime for its whole life.
async fn serve_accepted<P: Protocol>(
    protocol: Arc<P>,
    stream: Stream,
    addr: String,
    shutdown: Arc<StopBell>,
    slot: Slot,
) {
    match stream {
        Stream::Tcp(s) => {
            configure(protocol.as_ref(), &s);
            let peer = peer_of(addr, &s);
            let (rd, wr) = s.into_split();
            serve_stream(protocol, rd, wr, peer, shutdown).await;
        }
        Stream::Unix(s) => {
            let peer = peer_of(addr, &s);
            let (rd, wr) = s.into_split();
            serve_stream(protocol, rd, wr, peer, shutdown).await;
        }
    }
    drop(slot);
}

/// The adaptive model: the connection goes to the runtime the placement names, and moves.
fn place_accepted<P: Protocol>(
    protocol: &Arc<P>,
    stream: Stream,
    addr: String,
    shutdown: Arc<StopBell>,
    placement: Arc<Placement>,
    slot: Slot,
) -> std::io::Result<()> {
    let open = |peer: &Peer| Conn::open(protocol.clone(), peer, shutdown);
    match stream {
        Stream::Tcp(s) => {
            configure(protocol.as_ref(), &s);
            let peer = peer_of(addr, &s);
            let s = s.into_std()?;
            hop::place(open(&peer), s, placement, slot);
        }
        Stream::Unix(s) => {
            let peer = peer_of(addr, &s);
            let s = s.into_std()?;
            hop::place(open(&peer), s, placement, slot);
        }
    }
    Ok(())
}

/// Who is on the other end, as sessions and admin commands show it.
fn peer_of(addr: String, socket: &impl AsRawFd) -> Peer {
    Peer {
        addr,
        fd: socket.as_raw_fd(),
    }
}

fn configure<P: Protocol>(protocol: &P, s: &tokio::net::TcpStream) {
    // Replies are whole and written at once; Nagle would only hold the last one back.
    let _ = s.set_nodelay(true);
    protocol.configure_tcp(s);
}
