//! What a front end provides to the connection layer.

use std::sync::Arc;

use bytes::BytesMut;
use jobyard_broker::{Broker, Lsn, ProtocolMetrics};
use jobyard_engine::{ConnId, NoticeKind};

use crate::listen::Peer;

/// What the connection loop does after a request or a notice.
#[derive(Debug, PartialEq, Eq)]
pub enum Step {
    /// The reply (if any) is in the output buffer; send it once the log reaches this
    /// position (0: at once).
    Done(Lsn),
    /// The request blocks (a reserve that waits): send what is buffered, then wait for the
    /// session's next notice before reading further requests.
    Wait,
    /// Send what is buffered, then close.
    Close,
}

/// Turns bytes into requests. Bounded: a decoder never buffers more than its limits allow,
/// whatever the peer sends, and turns oversized input into a request that says so.
pub trait Decode: Send {
    type Request: Send;
    /// The next complete request at the front of `buf` (consumed from it), or `None` until
    /// more bytes arrive.
    fn decode(&mut self, buf: &mut BytesMut) -> Option<Self::Request>;
}

/// One peer's protocol state: applies its requests and the engine's notices.
pub trait Session: Send {
    type Request: Send;
    /// Runs one request, writing its reply into `out`.
    fn execute(&mut self, req: Self::Request, out: &mut BytesMut) -> Step;
    /// Handles a notice from the engine (a blocked reserve served, a watched job ended...).
    /// While the session waits, [`Step::Wait`] means it still does.
    fn notice(&mut self, notice: NoticeKind, out: &mut BytesMut) -> Step;
    /// Whether notices matter while no request waits. Gearman forwards results and wakes
    /// sleeping workers at any time; a beanstalkd connection hears only the answer to its
    /// blocked reserve, so the loop need not watch its mailbox between requests (and drops
    /// what arrived meanwhile, such as lease expiries).
    fn notices_while_idle(&self) -> bool {
        true
    }
    /// The peer closed its sending side while the session waited; write a last reply if
    /// the protocol has one.
    fn half_closed(&mut self, _out: &mut BytesMut) {}
    /// The server is stopping while the session waits: end the wait without a reply.
    fn stop_waiting(&mut self) {}
    /// The peer is gone: give back what the session holds. The layer then forgets the
    /// session in the broker (its leases end, its waits and watches too).
    fn close(self);
}

/// A protocol served over byte streams, one session per connection.
pub trait Protocol: Send + Sync + 'static {
    type Decoder: Decode<Request = <Self::Session as Session>::Request>;
    type Session: Session;
    /// The name used in logs and as the metrics label (`beanstalk`, `gearman`, ...).
    fn name(&self) -> &'static str;
    /// The broker the sessions work on.
    fn broker(&self) -> &Arc<Broker>;
    /// This protocol's counters in the broker's registry.
    fn metrics(&self) -> &Arc<ProtocolMetrics>;
    /// A decoder for a new connection.
    fn decoder(&self) -> Self::Decoder;
    /// The session of a new connection, registered in the broker as `conn`.
    fn open(self: &Arc<Self>, conn: ConnId, peer: &Peer) -> Self::Session;
    /// Sets socket options on a new TCP connection (keepalive, ...). `TCP_NODELAY` is
    /// always set: replies are whole and written at once.
    fn configure_tcp(&self, _stream: &tokio::net::TcpStream) {}
}
