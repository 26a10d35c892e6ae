//! The per-connection loop every byte-stream protocol shares.
//!
//! Read, decode every complete request, execute each, then send the replies once the log
//! has made durable what they acknowledge (many connections share one write and one fsync
//! that way). Between requests, notices from the engine reach the session first (biased),
//! so what other sessions caused — a result for a watched job, a served reserve — is
//! written before this connection's next request is read, and a reply to a later request
//! never overtakes it.

use std::io;
use std::sync::Arc;

use bytes::BytesMut;
use jobyard_broker::{Lsn, Mailbox};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::watch;

use crate::listen::Peer;
use crate::protocol::{Decode, Protocol, Session, Step};

/// Replies are sent once this much is buffered even mid-batch, so pipelined requests with
/// large replies cannot grow the output without bound.
const FLUSH_AT: usize = 256 << 10;
/// While a session waits, the connection keeps reading (to notice a half-close) but stops
/// once this much unprocessed input is buffered.
const READ_AHEAD_LIMIT: usize = 64 << 10;

/// Serves one connection of `protocol` until the peer leaves, the session closes it, or the
/// server shuts down; then closes the session and forgets it in the broker.
pub async fn serve_stream<P, R, W>(
    protocol: Arc<P>,
    rd: R,
    wr: W,
    peer: Peer,
    shutdown: watch::Receiver<bool>,
) where
    P: Protocol,
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let broker = protocol.broker().clone();
    let metrics = protocol.metrics().clone();
    jobyard_broker::ProtocolMetrics::inc(&metrics.connections);
    jobyard_broker::ProtocolMetrics::inc(&metrics.connections_total);
    let (conn, mailbox) = broker.connect();
    let mut session = protocol.open(conn, &peer);
    let mut link = Link {
        rd,
        wr,
        rbuf: BytesMut::with_capacity(16 << 10),
        out: BytesMut::with_capacity(16 << 10),
        mailbox,
        protocol: protocol.clone(),
        shutdown,
    };
    tracing::debug!(conn, protocol = protocol.name(), peer = %peer.addr, "connected");
    match link.run(&mut session).await {
        Ok(()) => tracing::debug!(conn, protocol = protocol.name(), "closed"),
        Err(e) => tracing::debug!(conn, protocol = protocol.name(), error = %e, "closed"),
    }
    session.close();
    broker.disconnect(conn);
    jobyard_broker::ProtocolMetrics::dec(&metrics.connections);
}

struct Link<P: Protocol, R, W> {
    rd: R,
    wr: W,
    rbuf: BytesMut,
    out: BytesMut,
    mailbox: Mailbox,
    protocol: Arc<P>,
    shutdown: watch::Receiver<bool>,
}

impl<P: Protocol, R: AsyncRead + Unpin, W: AsyncWrite + Unpin> Link<P, R, W> {
    async fn run(&mut self, session: &mut P::Session) -> io::Result<()> {
        let mut decoder = self.protocol.decoder();
        let mut waiting = false;
        loop {
            let mut lsn: Lsn = 0;
            while !waiting {
                let Some(req) = decoder.decode(&mut self.rbuf) else {
                    break;
                };
                match session.execute(req, &mut self.out) {
                    Step::Done(l) => {
                        lsn = lsn.max(l);
                        if self.out.len() >= FLUSH_AT {
                            self.flush(lsn).await?;
                        }
                    }
                    Step::Wait => waiting = true,
                    Step::Close => return self.flush(lsn).await,
                }
            }
            self.flush(lsn).await?;
            if self.mailbox.overflowed() {
                return Err(overflowed());
            }
            if *self.shutdown.borrow() {
                if waiting {
                    session.stop_waiting();
                }
                return Ok(());
            }
            let can_read = !waiting || self.rbuf.len() < READ_AHEAD_LIMIT;
            if can_read {
                self.rbuf.reserve(8 << 10);
            }
            let listen = waiting || session.notices_while_idle();
            if !listen {
                // Notices that only a waiting session needs: drop what piled up.
                while self.mailbox.try_recv().is_some() {}
            }
            tokio::select! {
                biased;
                notice = self.mailbox.recv(), if listen => {
                    let Some(notice) = notice else {
                        return Err(io::Error::other("the broker closed the mailbox"));
                    };
                    match session.notice(notice, &mut self.out) {
                        Step::Done(l) => {
                            waiting = false;
                            // Take what else is queued, so a burst of forwarded packets
                            // goes out in one write.
                            let mut lsn = l;
                            while !waiting && self.out.len() < FLUSH_AT {
                                let Some(n) = self.mailbox.try_recv() else { break };
                                match session.notice(n, &mut self.out) {
                                    Step::Done(l) => lsn = lsn.max(l),
                                    Step::Wait => waiting = true,
                                    Step::Close => return self.flush(lsn).await,
                                }
                            }
                            self.flush(lsn).await?;
                        }
                        Step::Wait => waiting = true,
                        Step::Close => return self.flush(0).await,
                    }
                }
                n = self.rd.read_buf(&mut self.rbuf), if can_read => {
                    if n? == 0 {
                        if waiting {
                            session.half_closed(&mut self.out);
                            return self.flush(0).await;
                        }
                        return Ok(());
                    }
                }
                _ = self.shutdown.changed() => {
                    if waiting {
                        session.stop_waiting();
                    }
                    return Ok(());
                }
            }
        }
    }

    /// Sends buffered output once the log has made what it acknowledges durable. A peer
    /// that stops reading while notices pile up for it is cut off rather than buffered for.
    async fn flush(&mut self, lsn: Lsn) -> io::Result<()> {
        self.protocol.broker().wait_durable(lsn).await;
        if !self.out.is_empty() {
            // Biased, so the write is tried first: a reply that fits the socket buffer (the
            // usual case) is sent without ever arming the overflow wait.
            tokio::select! {
                biased;
                written = self.wr.write_all(&self.out) => written?,
                _ = self.mailbox.wait_overflow() => return Err(overflowed()),
            }
            self.out.clear();
        }
        Ok(())
    }
}

fn overflowed() -> io::Error {
    io::Error::other("closed: the client stopped reading what it asked for (mailbox cap)")
}
