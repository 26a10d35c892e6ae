//! ZeroMQ plumbing shared by the device and the worker: libzmq sockets (through the `zmq`
//! crate), driven from tokio without threads of their own ([`AsyncSocket`]). The manager
//! has its own ZMTP ROUTER instead (`jobyard-wmp`, see `docs/wmp.md`, "Transport") and
//! shares only [`Sent`] (from `jobyard-wmp-wire`) with this module.
//!
//! Why libzmq and not the pure-Rust `zeromq` crate: `zeromq` 0.4 trusts the frame length a
//! peer announces and allocates it, so 80 bytes from any TCP client (a ZMTP greeting and a
//! frame header claiming 2^62 bytes) abort the whole process; it also has no ZMTP heartbeats,
//! no reconnect for DEALERs and panics (`todo!()`) when a DEALER's peer resets. libzmq has a
//! frame limit (`ZMQ_MAXMSGSIZE`), heartbeats, reconnect and `ROUTER_MANDATORY`. Measured
//! and explained in `docs/wmp.md`, "Transport".
//!
//! libzmq exposes readiness as a file descriptor (`ZMQ_FD`) that signals edges, and any
//! send or receive may consume a pending edge. So the rule here is: always try the
//! non-blocking operation first, and wait on the descriptor only after it said `EAGAIN`.

use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::time::Duration;

use bytes::Bytes;
use jobyard_wmp_wire::Limits;
pub use jobyard_wmp_wire::Sent;
use tokio::io::unix::AsyncFd;

/// A message as a list of frames (what the codec works on).
pub type Frames = Vec<Bytes>;

/// The longest interval between a link's tries to connect (see `SocketOptions::reconnect`).
const RECONNECT_MAX: Duration = Duration::from_secs(1);

/// Socket options every WMP socket gets.
#[derive(Debug, Clone, Copy)]
pub struct SocketOptions {
    /// Largest frame accepted from a peer (`ZMQ_MAXMSGSIZE`); a peer that sends a larger
    /// one is disconnected by libzmq before the frame is read.
    pub max_frame: usize,
    /// ZMTP heartbeat interval: a silent dead peer is noticed after `heartbeat * 3`.
    pub heartbeat: Duration,
    /// How long unsent messages may delay closing (`ZMQ_LINGER`).
    pub linger: Duration,
    /// First and longest reconnect interval of a connecting socket. The longest is short
    /// (1 s) because a worker lists every node of a cluster, and only the leader binds its
    /// endpoint: after a failover the worker must find the new leader's endpoint within a
    /// second of its binding, not at the end of a long backoff (10 s cost up to 10 s more
    /// per failover; a refused connect is one SYN and one RST).
    pub reconnect: (Duration, Duration),
}

impl Default for SocketOptions {
    fn default() -> Self {
        SocketOptions {
            max_frame: (64 << 20) + 64,
            heartbeat: jobyard_wmp_wire::HEARTBEAT,
            linger: Duration::from_secs(2),
            reconnect: (Duration::from_millis(100), RECONNECT_MAX),
        }
    }
}

struct Fd(RawFd);

impl AsRawFd for Fd {
    fn as_raw_fd(&self) -> RawFd {
        self.0
    }
}

/// A libzmq socket usable from one tokio task.
pub struct AsyncSocket {
    // Field order: the registration goes before the socket that owns the descriptor.
    fd: AsyncFd<Fd>,
    socket: zmq::Socket,
}

impl AsyncSocket {
    /// Creates a socket of `kind` in `ctx` with `opts` applied.
    pub fn new(
        ctx: &zmq::Context,
        kind: zmq::SocketType,
        opts: &SocketOptions,
    ) -> io::Result<AsyncSocket> {
        Self::wrap(configured_socket(ctx, kind, opts)?)
    }

    /// Wraps an already configured socket (e.g. a monitor's PAIR).
    pub fn wrap(socket: zmq::Socket) -> io::Result<AsyncSocket> {
        let raw = socket.get_fd().map_err(io_err)?;
        // SAFETY: the descriptor belongs to `socket`, which is stored beside the
        // registration and declared after it, so it is closed only after the registration
        // is dropped; `Fd` always returns this same descriptor.
        let fd = unsafe { AsyncFd::register_with_interest(Fd(raw), tokio::io::Interest::READABLE) }
            .map_err(|e| io::Error::other(e.to_string()))?;
        Ok(AsyncSocket { fd, socket })
    }

    /// The underlying socket, for bind/connect/monitor.
    pub fn socket(&self) -> &zmq::Socket {
        &self.socket
    }

    /// Receives one whole message if one is waiting.
    pub fn try_recv(&mut self) -> Result<Option<Frames>, zmq::Error> {
        recv_now(&self.socket)
    }

    /// Sends one message without waiting: `Ok(false)` when the peer's queue is full
    /// (or, on a ROUTER, the peer is at its high-water mark).
    pub fn try_send(&mut self, frames: &Frames) -> Result<bool, zmq::Error> {
        match self
            .socket
            .send_multipart(frames.iter().map(|f| f.as_ref()), zmq::DONTWAIT)
        {
            Ok(()) => Ok(true),
            Err(zmq::Error::EAGAIN) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Waits for the next whole message.
    pub async fn recv(&mut self) -> Result<Frames, zmq::Error> {
        loop {
            if let Some(frames) = self.try_recv()? {
                return Ok(frames);
            }
            self.changed().await;
        }
    }

    /// Sends without ever waiting, telling why a message was not queued. On a ROUTER the
    /// first frame is the peer's routing id.
    pub fn send_now(&mut self, frames: &Frames) -> Sent {
        send_now(&self.socket, frames)
    }

    /// Binds a ROUTER for a device at `endpoint` with WMP's options and the frame limit
    /// that fits `limits` (see [`bind_router`]).
    pub fn bind_router(
        ctx: &zmq::Context,
        endpoint: &str,
        limits: &Limits,
        opts: &SocketOptions,
    ) -> io::Result<AsyncSocket> {
        Self::wrap(bind_router(ctx, endpoint, limits, opts)?)
    }

    /// Waits until libzmq signals that its state may have changed. Call only after
    /// [`AsyncSocket::try_recv`] returned `None`.
    pub async fn changed(&mut self) {
        match self.fd.readable().await {
            Ok(mut guard) => guard.clear_ready(),
            // The descriptor cannot fail while the socket lives; do not spin if it does.
            Err(_) => std::future::pending::<()>().await,
        }
    }
}

/// Creates a socket of `kind` in `ctx` with `opts` applied, for a caller that polls it
/// itself or wraps it in an [`AsyncSocket`].
pub fn configured_socket(
    ctx: &zmq::Context,
    kind: zmq::SocketType,
    opts: &SocketOptions,
) -> io::Result<zmq::Socket> {
    let socket = ctx.socket(kind).map_err(io_err)?;
    let ms = |d: Duration| d.as_millis().min(i32::MAX as u128) as i32;
    socket
        .set_maxmsgsize(opts.max_frame as i64)
        .map_err(io_err)?;
    socket.set_linger(ms(opts.linger)).map_err(io_err)?;
    socket
        .set_heartbeat_ivl(ms(opts.heartbeat))
        .map_err(io_err)?;
    socket
        .set_heartbeat_timeout(ms(opts.heartbeat * 3))
        .map_err(io_err)?;
    socket
        .set_reconnect_ivl(ms(opts.reconnect.0))
        .map_err(io_err)?;
    socket
        .set_reconnect_ivl_max(ms(opts.reconnect.1))
        .map_err(io_err)?;
    if kind == zmq::ROUTER {
        // Report an unknown peer instead of dropping silently (spec: forget that path).
        socket.set_router_mandatory(true).map_err(io_err)?;
    }
    Ok(socket)
}

/// Binds a ROUTER for a device at `endpoint` with WMP's options and the frame
/// limit that fits `limits`.
pub fn bind_router(
    ctx: &zmq::Context,
    endpoint: &str,
    limits: &Limits,
    opts: &SocketOptions,
) -> io::Result<zmq::Socket> {
    let opts = SocketOptions {
        max_frame: limits.max_payload.max(limits.max_headers_bytes),
        ..*opts
    };
    let router = configured_socket(ctx, zmq::ROUTER, &opts)?;
    router
        .bind(endpoint)
        .map_err(|e| io::Error::other(format!("cannot bind {endpoint}: {e}")))?;
    Ok(router)
}

/// Receives one whole message from `socket` if one is waiting.
pub fn recv_now(socket: &zmq::Socket) -> Result<Option<Frames>, zmq::Error> {
    match socket.recv_multipart(zmq::DONTWAIT) {
        Ok(parts) => Ok(Some(parts.into_iter().map(Bytes::from).collect())),
        Err(zmq::Error::EAGAIN) => Ok(None),
        Err(e) => Err(e),
    }
}

/// Sends one message on `socket` without ever waiting, telling why it was not queued. On
/// a ROUTER the first frame is the peer's routing id.
pub fn send_now(socket: &zmq::Socket, frames: &[Bytes]) -> Sent {
    match socket.send_multipart(frames.iter().map(|f| f.as_ref()), zmq::DONTWAIT) {
        Ok(()) => Sent::Queued,
        Err(zmq::Error::EAGAIN) => Sent::Full,
        Err(zmq::Error::EHOSTUNREACH) => Sent::Unreachable,
        Err(_) => Sent::Failed,
    }
}

fn io_err(e: zmq::Error) -> io::Error {
    io::Error::other(e)
}

/// libzmq monitor events a link cares about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Monitor {
    /// A connection (re)opened.
    Connected,
    /// The connection closed (libzmq reconnects by itself).
    Disconnected,
    /// Something else.
    Other,
}

/// Decodes a monitor message: first frame 2 bytes event id + 4 bytes value (little endian).
pub fn monitor_event(frames: &Frames) -> Monitor {
    let Some(head) = frames.first().filter(|f| f.len() >= 2) else {
        return Monitor::Other;
    };
    let id = u16::from_le_bytes([head[0], head[1]]);
    if id == zmq::SocketEvent::CONNECTED.to_raw() {
        Monitor::Connected
    } else if id == zmq::SocketEvent::DISCONNECTED.to_raw() {
        Monitor::Disconnected
    } else {
        Monitor::Other
    }
}
