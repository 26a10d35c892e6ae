//! The HTTP listener, gated: every connection takes a place from the gate for as long as
//! it is open, so `--max-connections` bounds HTTP connections too (with beanstalkd's,
//! Gearman's and the worker sessions, all together). A connection beyond the limit is
//! closed at once, as the other front ends do. With TLS configured, each connection
//! does its handshake in its own task ([`crate::security::tls::LazyTls`]).

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use jobyard_broker::ProtocolMetrics;
use jobyard_net::{Gate, Slot};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::TlsAcceptor;

use crate::security::tls::LazyTls;

/// A TCP listener that admits connections through the gate.
pub struct GatedListener {
    pub(crate) listener: TcpListener,
    pub(crate) gate: Gate,
    pub(crate) metrics: Arc<ProtocolMetrics>,
    /// `Some`: every connection speaks TLS.
    pub(crate) tls: Option<TlsAcceptor>,
}

/// An admitted connection, plain or TLS.
pub enum Connection {
    Plain(GatedStream),
    Tls(LazyTls<GatedStream>),
}

/// An admitted connection: gives its place back (and lowers the gauge) when closed.
pub struct GatedStream {
    stream: TcpStream,
    metrics: Arc<ProtocolMetrics>,
    _slot: Slot,
}

impl Drop for GatedStream {
    fn drop(&mut self) {
        ProtocolMetrics::dec(&self.metrics.connections);
    }
}

impl axum::serve::Listener for GatedListener {
    type Io = Connection;
    type Addr = std::net::SocketAddr;

    async fn accept(&mut self) -> (Connection, std::net::SocketAddr) {
        loop {
            let (stream, addr) = match self.listener.accept().await {
                Ok(a) => a,
                Err(e) => {
                    tracing::warn!("http: accept failed: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            };
            let Some(slot) = self.gate.try_enter(&addr.to_string()) else {
                ProtocolMetrics::inc(&self.metrics.refused);
                drop(stream);
                continue;
            };
            let _ = stream.set_nodelay(true);
            ProtocolMetrics::inc(&self.metrics.connections);
            ProtocolMetrics::inc(&self.metrics.connections_total);
            let gated = GatedStream {
                stream,
                metrics: self.metrics.clone(),
                _slot: slot,
            };
            let connection = match &self.tls {
                Some(acceptor) => Connection::Tls(LazyTls::new(acceptor, gated)),
                None => Connection::Plain(gated),
            };
            return (connection, addr);
        }
    }

    fn local_addr(&self) -> io::Result<std::net::SocketAddr> {
        self.listener.local_addr()
    }
}

impl AsyncRead for GatedStream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_read(cx, buf)
    }
}

impl AsyncWrite for GatedStream {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }
}

impl AsyncRead for Connection {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Connection::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Connection::Tls(s) => Pin::new(s).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Connection {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Connection::Plain(s) => Pin::new(s).poll_write(cx, buf),
            Connection::Tls(s) => Pin::new(s).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Connection::Plain(s) => Pin::new(s).poll_flush(cx),
            Connection::Tls(s) => Pin::new(s).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Connection::Plain(s) => Pin::new(s).poll_shutdown(cx),
            Connection::Tls(s) => Pin::new(s).poll_shutdown(cx),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Connection::Plain(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            Connection::Tls(s) => Pin::new(s).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            Connection::Plain(s) => s.is_write_vectored(),
            Connection::Tls(s) => s.is_write_vectored(),
        }
    }
}
