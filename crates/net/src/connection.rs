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
use jobyard_engine::{ConnId, NoticeKind};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use crate::gate::StopBell;
use crate::listen::Peer;
use crate::placement::{Placement, Where};
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
    shutdown: Arc<StopBell>,
) where
    P: Protocol,
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut conn = Conn::open(protocol, &peer, shutdown);
    let ended = Link {
        rd,
        wr,
        conn: &mut conn,
        placed: None,
    }
    .run()
    .await;
    conn.close(ended.map(|_| ()));
}

/// How a turn of the loop ended.
pub(crate) enum Exit {
    /// The connection is over.
    Closed,
    /// The connection belongs on the other runtime now; its output is written.
    Move,
}

/// Everything of a connection but its socket: what moves between runtimes with it.
pub(crate) struct Conn<P: Protocol> {
    protocol: Arc<P>,
    id: ConnId,
    session: P::Session,
    decoder: P::Decoder,
    rbuf: BytesMut,
    out: BytesMut,
    mailbox: Mailbox,
    /// The session waits for a notice (a blocked reserve) before it reads requests.
    waiting: bool,
    shutdown: Arc<StopBell>,
}

impl<P: Protocol> Conn<P> {
    /// Registers a new session in the broker.
    pub(crate) fn open(protocol: Arc<P>, peer: &Peer, shutdown: Arc<StopBell>) -> Self {
        let metrics = protocol.metrics();
        jobyard_broker::ProtocolMetrics::inc(&metrics.connections);
        jobyard_broker::ProtocolMetrics::inc(&metrics.connections_total);
        let (id, mailbox) = protocol.broker().connect();
        let session = protocol.open(id, peer);
        tracing::debug!(conn = id, protocol = protocol.name(), peer = %peer.addr, "connected");
        Conn {
            decoder: protocol.decoder(),
            protocol,
            id,
            session,
            rbuf: BytesMut::with_capacity(16 << 10),
            out: BytesMut::with_capacity(16 << 10),
            mailbox,
            waiting: false,
            shutdown,
        }
    }

    /// Closes the session and forgets it in the broker.
    pub(crate) fn close(self, how: io::Result<()>) {
        let name = self.protocol.name();
        match how {
            Ok(()) => tracing::debug!(conn = self.id, protocol = name, "closed"),
            Err(e) => tracing::debug!(conn = self.id, protocol = name, error = %e, "closed"),
        }
        self.session.close();
        self.protocol.broker().disconnect(self.id);
        jobyard_broker::ProtocolMetrics::dec(&self.protocol.metrics().connections);
    }
}

/// A connection on one runtime: its socket halves, registered with that runtime's reactor.
pub(crate) struct Link<'c, P: Protocol, R, W> {
    pub(crate) rd: R,
    pub(crate) wr: W,
    pub(crate) conn: &'c mut Conn<P>,
    /// With the adaptive model: the placement and the runtime this link runs on.
    pub(crate) placed: Option<(&'c Placement, Where)>,
}

impl<P: Protocol, R: AsyncRead + Unpin, W: AsyncWrite + Unpin> Link<'_, P, R, W> {
    pub(crate) async fn run(&mut self) -> io::Result<Exit> {
        // One wait for shutdown for the whole run, registered at its first poll; after
        // that each poll is a load of the bell's flag.
        let bell = self.conn.shutdown.clone();
        let stopping = bell.wait();
        tokio::pin!(stopping);
        loop {
            let mut lsn: Lsn = 0;
            while !self.conn.waiting {
                let c = &mut *self.conn;
                let Some(req) = c.decoder.decode(&mut c.rbuf) else {
                    break;
                };
                match c.session.execute(req, &mut c.out) {
                    Step::Done(l) => {
                        lsn = lsn.max(l);
                        if c.out.len() >= FLUSH_AT {
                            self.flush(lsn).await?;
                        }
                    }
                    Step::Wait => c.waiting = true,
                    Step::Close => return self.flush(lsn).await.map(|_| Exit::Closed),
                }
            }
            self.flush(lsn).await?;
            let c = &mut *self.conn;
            if c.mailbox.overflowed() {
                return Err(overflowed());
            }
            if c.shutdown.rung() {
                if c.waiting {
                    c.session.stop_waiting();
                }
                return Ok(Exit::Closed);
            }
            // Between turns nothing is half-written: the place to move.
            if let Some((placement, here)) = self.placed {
                if placement.current() != here {
                    return Ok(Exit::Move);
                }
            }
            let waiting = c.waiting;
            let can_read = !waiting || c.rbuf.len() < READ_AHEAD_LIMIT;
            if can_read {
                c.rbuf.reserve(8 << 10);
            }
            let listen = waiting || c.session.notices_while_idle();
            if !listen {
                // Notices that only a waiting session needs: drop what piled up.
                while c.mailbox.try_recv().is_some() {}
            }
            tokio::select! {
                biased;
                notice = c.mailbox.recv(), if listen => {
                    let Some(notice) = notice else {
                        return Err(io::Error::other("the broker closed the mailbox"));
                    };
                    if let Some(exit) = self.on_notice(notice).await? {
                        return Ok(exit);
                    }
                }
                n = self.rd.read_buf(&mut c.rbuf), if can_read => {
                    if n? == 0 {
                        if waiting {
                            c.session.half_closed(&mut c.out);
                            return self.flush(0).await.map(|_| Exit::Closed);
                        }
                        return Ok(Exit::Closed);
                    }
                }
                _ = &mut stopping => {
                    if waiting {
                        c.session.stop_waiting();
                    }
                    return Ok(Exit::Closed);
                }
            }
        }
    }

    /// Hands a notice to the session, with whatever else is queued, so a burst of forwarded
    /// packets goes out in one write. `Some` when the connection is over.
    async fn on_notice(&mut self, notice: NoticeKind) -> io::Result<Option<Exit>> {
        let c = &mut *self.conn;
        match c.session.notice(notice, &mut c.out) {
            Step::Done(l) => {
                c.waiting = false;
                let mut lsn = l;
                while !c.waiting && c.out.len() < FLUSH_AT {
                    let Some(n) = c.mailbox.try_recv() else { break };
                    match c.session.notice(n, &mut c.out) {
                        Step::Done(l) => lsn = lsn.max(l),
                        Step::Wait => c.waiting = true,
                        Step::Close => return self.flush(lsn).await.map(|_| Some(Exit::Closed)),
                    }
                }
                self.flush(lsn).await?;
                Ok(None)
            }
            Step::Wait => {
                c.waiting = true;
                Ok(None)
            }
            Step::Close => self.flush(0).await.map(|_| Some(Exit::Closed)),
        }
    }

    /// Sends buffered output once the log has made what it acknowledges durable. A peer
    /// that stops reading while notices pile up for it is cut off rather than buffered for.
    async fn flush(&mut self, lsn: Lsn) -> io::Result<()> {
        let c = &mut *self.conn;
        c.protocol.broker().wait_durable(lsn).await;
        if !c.out.is_empty() {
            // Biased, so the write is tried first: a reply that fits the socket buffer (the
            // usual case) is sent without ever arming the overflow wait.
            tokio::select! {
                biased;
                written = self.wr.write_all(&c.out) => written?,
                _ = c.mailbox.wait_overflow() => return Err(overflowed()),
            }
            c.out.clear();
        }
        Ok(())
    }
}

fn overflowed() -> io::Error {
    io::Error::other("closed: the client stopped reading what it asked for (mailbox cap)")
}
