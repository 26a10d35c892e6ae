//! The per-connection loop: read, decode, execute, reply; forward other connections'
//! packets and engine notices in between.
//!
//! Replies produced by this connection's own requests are written (after the log made them
//! durable) before anything forwarded to it, so a client always sees JOB_CREATED before the
//! WORK_* packets of that job.

use std::io;
use std::os::fd::AsRawFd;
use std::sync::Arc;

use bytes::{BufMut, Bytes, BytesMut};
use jobyard_broker::{Lsn, Mailbox};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::TcpStream;
use tokio::sync::mpsc::{self, UnboundedReceiver};
use tokio::sync::watch;

use crate::decode::Decoder;
use crate::session::{Outcome, Session};
use crate::{Keepalive, Server};

/// Output is sent once this much is buffered, even mid-batch.
const FLUSH_AT: usize = 256 << 10;

/// Serves one Gearman connection until it closes or the server shuts down.
pub async fn handle(stream: TcpStream, server: Arc<Server>, mut shutdown: watch::Receiver<bool>) {
    let _ = stream.set_nodelay(true);
    if let Some(k) = &server.config.keepalive {
        if let Err(e) = set_keepalive(&stream, k) {
            tracing::debug!("gearman: cannot set keepalive: {e}");
        }
    }
    let fd = stream.as_raw_fd();
    let ip = stream
        .peer_addr()
        .map(|a| a.ip().to_string())
        .unwrap_or_default();
    let (conn, mailbox) = server.broker.connect();
    let (tx, forwarded) = mpsc::unbounded_channel();
    let mut session = Session::new(server.clone(), conn, tx, fd, ip);
    let (rd, wr) = stream.into_split();
    let mut link = Link {
        rd,
        wr,
        rbuf: BytesMut::with_capacity(16 << 10),
        out: BytesMut::with_capacity(16 << 10),
        server: server.clone(),
        mailbox,
        forwarded,
    };
    if let Err(e) = link.run(&mut session, &mut shutdown).await {
        tracing::debug!("gearman connection {conn}: {e}");
    }
    session.close();
}

struct Link {
    rd: OwnedReadHalf,
    wr: OwnedWriteHalf,
    rbuf: BytesMut,
    out: BytesMut,
    server: Arc<Server>,
    mailbox: Mailbox,
    forwarded: UnboundedReceiver<Bytes>,
}

impl Link {
    async fn run(
        &mut self,
        session: &mut Session,
        shutdown: &mut watch::Receiver<bool>,
    ) -> io::Result<()> {
        let mut decoder =
            Decoder::with_budget(self.server.config.max_packet, self.server.inflight.clone());
        loop {
            let mut lsn: Lsn = 0;
            while let Some(frame) = decoder.decode(&mut self.rbuf) {
                match session.frame(frame, &mut self.out) {
                    Outcome::Done(l) => {
                        lsn = lsn.max(l);
                        if self.out.len() >= FLUSH_AT {
                            self.flush(lsn).await?;
                        }
                    }
                    Outcome::Close => return self.flush(lsn).await,
                }
            }
            self.flush(lsn).await?;
            if *shutdown.borrow() {
                return Ok(());
            }
            self.rbuf.reserve(8 << 10);
            // Biased: what other connections caused is sent before this connection's next
            // request is read, so a reply to a later request never overtakes it.
            tokio::select! {
                biased;
                Some(n) = self.mailbox.recv() => session.notice(n, &mut self.out),
                Some(p) = self.forwarded.recv() => {
                    self.out.put_slice(&p);
                    while self.out.len() < FLUSH_AT {
                        let Ok(p) = self.forwarded.try_recv() else { break };
                        self.out.put_slice(&p);
                    }
                }
                n = self.rd.read_buf(&mut self.rbuf) => if n? == 0 { return Ok(()) },
                _ = shutdown.changed() => return Ok(()),
            }
        }
    }

    /// Sends buffered output once the log has made what it acknowledges durable.
    async fn flush(&mut self, lsn: Lsn) -> io::Result<()> {
        self.server.broker.wait_durable(lsn).await;
        if !self.out.is_empty() {
            self.wr.write_all(&self.out).await?;
            self.out.clear();
        }
        Ok(())
    }
}

/// SO_KEEPALIVE plus the TCP_KEEP* knobs gearmand's `--keepalive-*` flags set.
fn set_keepalive(stream: &TcpStream, k: &Keepalive) -> io::Result<()> {
    let fd = stream.as_raw_fd();
    let set = |level: libc::c_int, name: libc::c_int, value: u32| -> io::Result<()> {
        let v = value.min(i32::MAX as u32) as libc::c_int;
        // SAFETY: fd is a live socket owned by `stream`; we pass a pointer to a c_int and
        // its exact size.
        let rc = unsafe {
            libc::setsockopt(
                fd,
                level,
                name,
                (&v as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        if rc == 0 {
            Ok(())
        } else {
            Err(io::Error::last_os_error())
        }
    };
    set(libc::SOL_SOCKET, libc::SO_KEEPALIVE, 1)?;
    if let Some(v) = k.idle_secs {
        set(libc::IPPROTO_TCP, libc::TCP_KEEPIDLE, v)?;
    }
    if let Some(v) = k.interval_secs {
        set(libc::IPPROTO_TCP, libc::TCP_KEEPINTVL, v)?;
    }
    if let Some(v) = k.count {
        set(libc::IPPROTO_TCP, libc::TCP_KEEPCNT, v)?;
    }
    Ok(())
}
