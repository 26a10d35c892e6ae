//! The HTTP listener, gated: every connection takes a place from the gate for as long as
//! it is open, so `--max-connections` bounds HTTP connections too (with beanstalkd's,
//! Gearman's and the worker sessions, all together). A connection beyond the limit is
//! closed at once, as the other front ends do.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use jobyard_broker::ProtocolMetrics;
use jobyard_net::{Gate, Slot};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};

/// A TCP listener that admits connections through the gate.
pub struct GatedListener {
    pub(crate) listener: TcpListener,
    pub(crate) gate: Gate,
    pub(crate) metrics: Arc<ProtocolMetrics>,
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
    type Io = GatedStream;
    type Addr = std::net::SocketAddr;

    async fn accept(&mut self) -> (GatedStream, std::net::SocketAddr) {
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
            return (
                GatedStream {
                    stream,
                    metrics: self.metrics.clone(),
                    _slot: slot,
                },
                addr,
            );
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
