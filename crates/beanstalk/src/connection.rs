//! The per-connection loop: read, decode every complete request, apply, reply.

use std::io;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use bytes::{BufMut, BytesMut};
use jobyard_broker::{Lsn, Mailbox};
use jobyard_engine::NoticeKind;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpStream, UnixStream};
use tokio::sync::watch;

use crate::decode::Decoder;
use crate::session::{Outcome, Session};
use crate::Server;

/// Replies are sent once this much is buffered even mid-batch, so pipelined peeks of large
/// jobs cannot grow the output without bound.
const FLUSH_AT: usize = 256 << 10;
/// While blocked in reserve, the connection keeps reading (to notice a half-close) but
/// stops once this much unprocessed input is buffered.
const READ_AHEAD_LIMIT: usize = 64 << 10;

/// Serves one TCP client until it quits, disconnects, or the server shuts down.
pub async fn handle(stream: TcpStream, server: Arc<Server>, shutdown: watch::Receiver<bool>) {
    // Replies are whole and written at once; Nagle would only hold the last one back.
    let _ = stream.set_nodelay(true);
    let (rd, wr) = stream.into_split();
    serve(rd, wr, server, shutdown).await
}

/// Serves one client of a UNIX-socket listener (beanstalkd's `-l unix:PATH`).
pub async fn handle_unix(stream: UnixStream, server: Arc<Server>, shutdown: watch::Receiver<bool>) {
    let (rd, wr) = stream.into_split();
    serve(rd, wr, server, shutdown).await
}

async fn serve<R, W>(rd: R, wr: W, server: Arc<Server>, mut shutdown: watch::Receiver<bool>)
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let stats = &server.stats;
    stats.total_connections.fetch_add(1, Ordering::Relaxed);
    stats.current_connections.fetch_add(1, Ordering::Relaxed);
    let (conn, mailbox) = server.broker.connect();
    let mut session = Session::new(server.clone(), conn);
    let mut link = Link {
        rd,
        wr,
        rbuf: BytesMut::with_capacity(16 << 10),
        out: BytesMut::with_capacity(16 << 10),
        server: server.clone(),
        mailbox,
    };
    if let Err(e) = link.run(&mut session, &mut shutdown).await {
        tracing::debug!("beanstalk connection {conn}: {e}");
    }
    session.close();
    stats.current_connections.fetch_sub(1, Ordering::Relaxed);
}

/// One connection's two directions and buffers, whatever the transport.
struct Link<R, W> {
    rd: R,
    wr: W,
    rbuf: BytesMut,
    out: BytesMut,
    server: Arc<Server>,
    mailbox: Mailbox,
}

/// How a blocking reserve ended.
enum Waited {
    Replied,
    HalfClosed,
    /// The server is shutting down: close without a reply (the job, if any, stays ready).
    ShuttingDown,
}

impl<R: AsyncRead + Unpin, W: AsyncWrite + Unpin> Link<R, W> {
    async fn run(
        &mut self,
        session: &mut Session,
        shutdown: &mut watch::Receiver<bool>,
    ) -> io::Result<()> {
        let mut decoder =
            Decoder::with_budget(self.server.max_job_size, self.server.inflight.clone());
        loop {
            let mut lsn: Lsn = 0;
            while let Some(req) = decoder.decode(&mut self.rbuf) {
                match session.execute(req, &mut self.out) {
                    Outcome::Done(l) => {
                        lsn = lsn.max(l);
                        if self.out.len() >= FLUSH_AT {
                            self.flush(lsn).await?;
                        }
                    }
                    Outcome::Quit => return self.flush(lsn).await,
                    Outcome::Wait => {
                        self.flush(lsn).await?;
                        match self.wait_for_job(session, shutdown).await? {
                            Waited::Replied => {}
                            Waited::HalfClosed => {
                                self.out.put_slice(b"TIMED_OUT\r\n");
                                return self.flush(0).await;
                            }
                            Waited::ShuttingDown => return Ok(()),
                        }
                    }
                }
            }
            self.flush(lsn).await?;
            if *shutdown.borrow() {
                return Ok(());
            }
            // Lease-expiry notices only matter while blocked in reserve; drop the ones that
            // arrived meanwhile so a connection that never blocks cannot pile them up.
            while self.mailbox.try_recv().is_ok() {}
            self.rbuf.reserve(8 << 10);
            tokio::select! {
                n = self.rd.read_buf(&mut self.rbuf) => if n? == 0 { return Ok(()) },
                _ = shutdown.changed() => return Ok(()),
            }
        }
    }

    /// Sends buffered replies once the log has made their changes durable.
    async fn flush(&mut self, lsn: Lsn) -> io::Result<()> {
        self.server.broker.wait_durable(lsn).await;
        if !self.out.is_empty() {
            self.wr.write_all(&self.out).await?;
            self.out.clear();
        }
        Ok(())
    }

    /// Waits in a blocking reserve for the engine's answer, reading ahead meanwhile so a
    /// client that half-closes gets `TIMED_OUT` as from beanstalkd.
    async fn wait_for_job(
        &mut self,
        session: &mut Session,
        shutdown: &mut watch::Receiver<bool>,
    ) -> io::Result<Waited> {
        loop {
            let can_read = self.rbuf.len() < READ_AHEAD_LIMIT;
            if can_read {
                self.rbuf.reserve(8 << 10);
            }
            tokio::select! {
                notice = self.mailbox.recv() => {
                    let Some(notice) = notice else {
                        return Err(io::Error::other("broker closed the mailbox"));
                    };
                    match notice {
                        NoticeKind::Reserved(id) => {
                            if session.deliver(id, &mut self.out) {
                                return Ok(Waited::Replied);
                            }
                            match session.reserve_again(&mut self.out) {
                                Outcome::Wait => continue,
                                _ => return Ok(Waited::Replied),
                            }
                        }
                        NoticeKind::TimedOut => self.out.put_slice(b"TIMED_OUT\r\n"),
                        NoticeKind::DeadlineSoon => self.out.put_slice(b"DEADLINE_SOON\r\n"),
                        NoticeKind::Wake | NoticeKind::LeaseExpired(_) => continue,
                    }
                    return Ok(Waited::Replied);
                }
                n = self.rd.read_buf(&mut self.rbuf), if can_read => {
                    if n? == 0 {
                        session.cancel_wait();
                        return Ok(Waited::HalfClosed);
                    }
                }
                _ = shutdown.changed() => {
                    session.cancel_wait();
                    return Ok(Waited::ShuttingDown);
                }
            }
        }
    }
}
