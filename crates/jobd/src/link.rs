//! One jobd connection, in either direction: it answers the peer's requests through a
//! [`Handler`] and carries our own requests to the peer, matched to replies by `no`.
//!
//! Both directions are needed because jobd's links are symmetric: a worker registers with
//! the master and then serves the master's requests on that same connection. Every reply
//! is written as one whole buffer, so replies to concurrent requests never interleave.

use std::collections::HashMap;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::BytesMut;
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, oneshot, watch, Semaphore};

use crate::protocol::{encode_data, encode_error, encode_ping, encode_request, Decoder, Response};
use crate::session::{Session, Step};

/// A handler's answer: `data` or an `error` string.
pub type Reply = Result<Value, String>;

/// A boxed handler future (kept free of extra crates).
pub type ReplyFuture = Pin<Box<dyn Future<Output = Reply> + Send>>;

/// Serves requests of one daemon; called once per request, concurrently.
pub trait Handler: Send + Sync + 'static {
    /// Answers request `kind` with `data`, arriving on `link`.
    fn handle(&self, link: Arc<Link>, kind: String, data: Value) -> ReplyFuture;
}

/// Why one of our requests got no data back.
#[derive(Debug, Clone, PartialEq)]
pub enum LinkError {
    /// The connection closed before the reply.
    Closed,
    /// No reply within the allowed time.
    Timeout,
    /// The peer answered with an error.
    Remote(String),
}

impl std::fmt::Display for LinkError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LinkError::Closed => write!(f, "connection closed"),
            LinkError::Timeout => write!(f, "timed out"),
            LinkError::Remote(e) => write!(f, "{e}"),
        }
    }
}

/// Most requests of one connection handled at once; reading pauses beyond that, so a
/// client that pipelines without reading replies cannot make the daemon buffer without end.
pub const MAX_IN_FLIGHT: usize = 256;

/// Most whole messages queued for writing on one connection.
const OUT_QUEUE: usize = 256;

enum Out {
    Bytes(Vec<u8>),
    Close,
}

/// A live connection. Cheap to share; requests may be sent from any task.
pub struct Link {
    out: mpsc::Sender<Out>,
    pending: Mutex<HashMap<i64, oneshot::Sender<Response>>>,
    next_no: AtomicI64,
    password: Mutex<Option<String>>,
    closed: watch::Sender<bool>,
    /// Set by any message from the peer; the master's liveness check clears it with each ping.
    pub ponged: AtomicBool,
    /// The other end's address.
    pub peer: SocketAddr,
}

/// A start for request numbers in `[1, 999999]`, as jobd's sides pick one at random.
fn random_start() -> i64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos() as i64)
        .unwrap_or(1);
    (nanos ^ (std::process::id() as i64 * 7919)) % 999_999
}

impl Link {
    /// Runs a connection: reads in one task, writes in another. `password` is sent with
    /// our first request (if any). Returns at once; see [`Link::closed`].
    pub fn spawn(
        stream: TcpStream,
        session: Session,
        handler: Arc<dyn Handler>,
        max_frame: usize,
        password: Option<String>,
    ) -> Arc<Link> {
        let peer = stream
            .peer_addr()
            .unwrap_or_else(|_| SocketAddr::from(([0, 0, 0, 0], 0)));
        let _ = stream.set_nodelay(true);
        let (tx, rx) = mpsc::channel(OUT_QUEUE);
        let (closed, _) = watch::channel(false);
        let link = Arc::new(Link {
            out: tx,
            pending: Mutex::new(HashMap::new()),
            next_no: AtomicI64::new(random_start()),
            password: Mutex::new(password),
            closed,
            ponged: AtomicBool::new(true),
            peer,
        });
        let (read, write) = stream.into_split();
        tokio::spawn(write_loop(write, rx, link.closed.subscribe()));
        tokio::spawn(read_loop(read, link.clone(), session, handler, max_frame));
        link
    }

    /// Sends a request and waits for its reply (forever when `timeout` is `None`, but
    /// never past the connection's end).
    pub async fn request(
        &self,
        kind: &str,
        data: Value,
        timeout: Option<Duration>,
    ) -> Result<Value, LinkError> {
        let no = self.next_no();
        let (tx, rx) = oneshot::channel();
        self.pending.lock().unwrap().insert(no, tx);
        let password = self.password.lock().unwrap().take();
        let frame = encode_request(no, kind, data, password.as_deref());
        if self.is_closed() || self.out.send(Out::Bytes(frame)).await.is_err() {
            self.pending.lock().unwrap().remove(&no);
            return Err(LinkError::Closed);
        }
        let reply = match timeout {
            Some(t) => match tokio::time::timeout(t, rx).await {
                Ok(r) => r,
                Err(_) => {
                    self.pending.lock().unwrap().remove(&no);
                    return Err(LinkError::Timeout);
                }
            },
            None => rx.await,
        };
        match reply {
            Err(_) => Err(LinkError::Closed),
            Ok(r) => match r.error {
                Some(e) => Err(LinkError::Remote(e)),
                None => Ok(r.data.unwrap_or(Value::Null)),
            },
        }
    }

    fn next_no(&self) -> i64 {
        let mut cur = self.next_no.load(Ordering::Relaxed);
        loop {
            let next = if cur >= 999_999 { 1 } else { cur + 1 };
            match self
                .next_no
                .compare_exchange(cur, next, Ordering::Relaxed, Ordering::Relaxed)
            {
                Ok(_) => return next,
                Err(actual) => cur = actual,
            }
        }
    }

    /// Sends `[2]` (dropped if the peer is not reading: it will then miss the check).
    pub fn ping(&self) {
        let _ = self.out.try_send(Out::Bytes(encode_ping()));
    }

    /// Closes the connection; pending requests fail with [`LinkError::Closed`].
    pub fn close(&self) {
        self.mark_closed();
    }

    fn mark_closed(&self) {
        self.closed.send_replace(true);
        self.pending.lock().unwrap().clear();
    }

    /// Whether the connection has ended.
    pub fn is_closed(&self) -> bool {
        *self.closed.borrow()
    }

    /// Resolves when the connection has ended.
    pub async fn closed(&self) {
        let mut rx = self.closed.subscribe();
        let _ = rx.wait_for(|c| *c).await;
    }
}

async fn write_loop(
    mut write: tokio::net::tcp::OwnedWriteHalf,
    mut rx: mpsc::Receiver<Out>,
    mut closed: watch::Receiver<bool>,
) {
    loop {
        // Biased: whatever is queued is written before a close is noticed, so an error
        // reply sent just before closing (invalid password, oversized message) gets out.
        let out = tokio::select! {
            biased;
            out = rx.recv() => out,
            _ = closed.wait_for(|c| *c) => None,
        };
        match out {
            Some(Out::Bytes(b)) => {
                if write.write_all(&b).await.is_err() {
                    break;
                }
            }
            Some(Out::Close) | None => break,
        }
    }
    let _ = write.shutdown().await;
}

async fn read_loop(
    mut read: tokio::net::tcp::OwnedReadHalf,
    link: Arc<Link>,
    mut session: Session,
    handler: Arc<dyn Handler>,
    max_frame: usize,
) {
    let mut decoder = Decoder::new(max_frame);
    let in_flight = Arc::new(Semaphore::new(MAX_IN_FLIGHT));
    let mut buf = BytesMut::with_capacity(8192);
    let mut closed = link.closed.subscribe();
    'conn: loop {
        while let Some(msg) = decoder.decode(&mut buf) {
            match session.step(msg) {
                Step::Reply(b) => {
                    if link.out.send(Out::Bytes(b)).await.is_err() {
                        break 'conn;
                    }
                }
                Step::Close(b) => {
                    let _ = link.out.send(Out::Bytes(b)).await;
                    let _ = link.out.send(Out::Close).await;
                    break 'conn;
                }
                Step::Dispatch(req) => {
                    let Ok(permit) = in_flight.clone().acquire_owned().await else {
                        break 'conn;
                    };
                    let link2 = link.clone();
                    let fut = handler.handle(link.clone(), req.kind, req.data);
                    let no = req.no;
                    tokio::spawn(async move {
                        let bytes = match fut.await {
                            Ok(data) => encode_data(&no, data),
                            Err(e) => encode_error(&no, &e),
                        };
                        let _ = link2.out.send(Out::Bytes(bytes)).await;
                        drop(permit);
                    });
                }
                Step::Response(r) => {
                    let waiter =
                        r.no.as_i64()
                            .and_then(|n| link.pending.lock().unwrap().remove(&n));
                    match waiter {
                        Some(tx) => {
                            let _ = tx.send(r);
                        }
                        None => tracing::debug!(no = %r.no, "jobd: response to no request of ours"),
                    }
                }
                Step::Nothing => {}
            }
            // Any message from the peer is a sign of life for the master's liveness check.
            link.ponged.store(true, Ordering::Relaxed);
        }
        tokio::select! {
            n = read.read_buf(&mut buf) => match n {
                Ok(0) | Err(_) => break,
                Ok(_) => {}
            },
            _ = closed.wait_for(|c| *c) => break,
        }
    }
    link.mark_closed();
}
