//! One jobd connection, in either direction: it answers the peer's requests through a
//! [`RequestHandler`] and carries our own requests to the peer, matched to replies by `no`.
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

use serde_json::Value;
use tokio::net::TcpStream;
use tokio::sync::{mpsc, oneshot, watch};

use super::loops::{read_loop, write_loop, Out};
use super::rules::ConnectionRules;
use crate::protocol::{encode_ping, encode_request, Response};

/// A handler's answer: `data` or an `error` string.
pub type Reply = Result<Value, String>;

/// A boxed handler future (kept free of extra crates).
pub type ReplyFuture = Pin<Box<dyn Future<Output = Reply> + Send>>;

/// Serves requests of one daemon; called once per request, concurrently.
pub trait RequestHandler: Send + Sync + 'static {
    /// Answers request `kind` with `data`, which arrived on `from`.
    fn handle(&self, from: Arc<PeerConnection>, kind: String, data: Value) -> ReplyFuture;
}

/// Why one of our requests got no data back.
#[derive(Debug, Clone, PartialEq)]
pub enum RequestError {
    /// The connection closed before the reply.
    Closed,
    /// No reply within the allowed time.
    Timeout,
    /// The peer answered with an error.
    Remote(String),
}

impl std::fmt::Display for RequestError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RequestError::Closed => write!(f, "connection closed"),
            RequestError::Timeout => write!(f, "timed out"),
            RequestError::Remote(e) => write!(f, "{e}"),
        }
    }
}

/// Most whole messages queued for writing on one connection.
const OUT_QUEUE: usize = 256;
/// A live connection. Cheap to share; requests may be sent from any task.
pub struct PeerConnection {
    pub(super) out: mpsc::Sender<Out>,
    pub(super) pending: Mutex<HashMap<i64, oneshot::Sender<Response>>>,
    next_no: AtomicI64,
    password: Mutex<Option<String>>,
    pub(super) closed: watch::Sender<bool>,
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

impl PeerConnection {
    /// Runs a connection: reads in one task, writes in another. `password` is sent with
    /// our first request (if any). Returns at once; see [`PeerConnection::closed`].
    pub fn spawn(
        stream: TcpStream,
        rules: ConnectionRules,
        handler: Arc<dyn RequestHandler>,
        max_frame: usize,
        password: Option<String>,
    ) -> Arc<PeerConnection> {
        let peer = stream
            .peer_addr()
            .unwrap_or_else(|_| SocketAddr::from(([0, 0, 0, 0], 0)));
        let _ = stream.set_nodelay(true);
        let (tx, rx) = mpsc::channel(OUT_QUEUE);
        let (closed, _) = watch::channel(false);
        let link = Arc::new(PeerConnection {
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
        tokio::spawn(read_loop(read, link.clone(), rules, handler, max_frame));
        link
    }

    /// Sends a request and waits for its reply (forever when `timeout` is `None`, but
    /// never past the connection's end).
    pub async fn request(
        &self,
        kind: &str,
        data: Value,
        timeout: Option<Duration>,
    ) -> Result<Value, RequestError> {
        let no = self.next_no();
        let (tx, rx) = oneshot::channel();
        self.pending.lock().unwrap().insert(no, tx);
        let password = self.password.lock().unwrap().take();
        let frame = encode_request(no, kind, data, password.as_deref());
        if self.is_closed() || self.out.send(Out::Bytes(frame)).await.is_err() {
            self.pending.lock().unwrap().remove(&no);
            return Err(RequestError::Closed);
        }
        let reply = match timeout {
            Some(t) => match tokio::time::timeout(t, rx).await {
                Ok(r) => r,
                Err(_) => {
                    self.pending.lock().unwrap().remove(&no);
                    return Err(RequestError::Timeout);
                }
            },
            None => rx.await,
        };
        match reply {
            Err(_) => Err(RequestError::Closed),
            Ok(r) => match r.error {
                Some(e) => Err(RequestError::Remote(e)),
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

    /// Closes the connection; pending requests fail with [`RequestError::Closed`].
    pub fn close(&self) {
        self.mark_closed();
    }

    pub(super) fn mark_closed(&self) {
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
