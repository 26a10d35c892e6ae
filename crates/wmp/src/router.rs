//! The manager's ROUTER: a TCP listener and its ZMTP connections on one `mio` poll, driven
//! by the manager's own thread. Reading, decoding, the manager's logic, encoding and
//! writing all happen on that thread: no I/O thread, no mailbox hand-off per message, and
//! one wake-up serves every message that arrived meanwhile (`docs/wmp.md`, "Transport").
//!
//! ROUTER semantics as libzmq gives them to the manager: messages arrive as
//! `[routing-id, frames…]`; a send to an unknown routing id reports
//! [`Sent::Unreachable`] (`ROUTER_MANDATORY`), to a peer whose unsent bytes passed the high
//! water mark [`Sent::Full`]; a peer asking for a routing id already connected is refused;
//! a peer silent for the heartbeat timeout is closed, and every open peer gets a PING each
//! heartbeat interval so live peers answer within it.

use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use jobyard_wmp_wire::zmtp::command;
use jobyard_wmp_wire::zmtp::frame::{self, put_message};
use jobyard_wmp_wire::zmtp::session::{Event, Refusal, Session, SessionLimits};
use jobyard_wmp_wire::Sent;
use mio::net::{TcpListener, TcpStream};
use mio::{Events, Interest, Poll, Token, Waker};

const LISTENER: Token = Token(0);
const WAKER: Token = Token(1);
const FIRST_CONN: usize = 2;

/// Bytes read per `read` call (into one scratch buffer shared by all connections).
const READ_CHUNK: usize = 64 * 1024;
/// Bytes read from one connection per wake-up before the others get their turn.
const READ_BUDGET: usize = 256 * 1024;
/// Unsent bytes to one peer above which a send reports [`Sent::Full`] (libzmq's default
/// high-water mark is 1000 messages; WMP messages are a few hundred bytes, bodies aside).
const OUT_HIGH_WATER: usize = 4 << 20;
/// Buffer capacity a connection keeps once empty; a larger one (a big frame passed) is
/// given back.
const KEEP_CAPACITY: usize = 256 * 1024;
/// How often heartbeats and silence are checked.
const TICK: Duration = Duration::from_secs(1);

/// Heartbeat settings: a PING to each open peer every `interval`; a peer from which nothing
/// arrived for `timeout` is closed (also one stuck in the handshake).
#[derive(Debug, Clone, Copy)]
pub struct Heartbeat {
    /// Between our PINGs to a peer.
    pub interval: Duration,
    /// Silence after which a peer is closed.
    pub timeout: Duration,
}

struct Conn {
    stream: TcpStream,
    session: Session,
    /// Received bytes not yet consumed (at most one unfinished frame plus one read).
    inbuf: Vec<u8>,
    out: Vec<u8>,
    written: usize,
    routing_id: Option<Bytes>,
    /// Registered for writable (a write was short).
    want_write: bool,
    /// In [`Router::dirty`].
    dirty: bool,
    /// In [`Router::unfinished`] (its read budget ran out).
    unfinished: bool,
    last_recv: Instant,
    next_ping: Instant,
}

impl Conn {
    fn unsent(&self) -> usize {
        self.out.len() - self.written
    }
}

/// Everything a connection's bytes may change outside the connection itself.
struct Shared<'a> {
    ids: &'a mut HashMap<Bytes, Token>,
    next_generated: &'a mut u32,
    incoming: &'a mut Vec<Vec<Bytes>>,
    events: &'a mut Vec<Event>,
}

/// A bound ROUTER with its connections.
pub struct Router {
    poll: Poll,
    events: Events,
    listener: TcpListener,
    endpoint: String,
    limits: SessionLimits,
    heartbeat: Heartbeat,
    conns: HashMap<Token, Conn>,
    ids: HashMap<Bytes, Token>,
    next_token: usize,
    next_generated: u32,
    scratch: Box<[u8]>,
    session_events: Vec<Event>,
    incoming: Vec<Vec<Bytes>>,
    dirty: Vec<Token>,
    unfinished: Vec<Token>,
    next_tick: Instant,
}

/// `tcp://HOST:PORT` (HOST `*` = every interface, PORT `*` = any free port) as an address.
pub fn parse_endpoint(endpoint: &str) -> io::Result<SocketAddr> {
    let bad = || {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("WMP manager endpoint {endpoint:?}: expected tcp://HOST:PORT"),
        )
    };
    let rest = endpoint.strip_prefix("tcp://").ok_or_else(bad)?;
    let (host, port) = rest.rsplit_once(':').ok_or_else(bad)?;
    let host = match host {
        "*" => "0.0.0.0",
        h => h.trim_start_matches('[').trim_end_matches(']'),
    };
    let port = match port {
        "*" => 0,
        p => p.parse::<u16>().map_err(|_| bad())?,
    };
    (host, port).to_socket_addrs()?.next().ok_or_else(bad)
}

impl Router {
    /// Binds `endpoint` (see [`parse_endpoint`]).
    pub fn bind(endpoint: &str, limits: SessionLimits, heartbeat: Heartbeat) -> io::Result<Router> {
        let addr = parse_endpoint(endpoint)?;
        // Every jobyard listener's backlog, not mio's 128: a burst of workers connecting at
        // once is queued, not dropped and retried a second later.
        let mut listener = jobyard_net::listen::bind_tcp_std(addr)
            .map(TcpListener::from_std)
            .map_err(|e| io::Error::new(e.kind(), format!("cannot bind {endpoint}: {e}")))?;
        let poll = Poll::new()?;
        poll.registry()
            .register(&mut listener, LISTENER, Interest::READABLE)?;
        let endpoint = format!("tcp://{}", listener.local_addr()?);
        Ok(Router {
            poll,
            events: Events::with_capacity(1024),
            listener,
            endpoint,
            limits,
            heartbeat,
            conns: HashMap::new(),
            ids: HashMap::new(),
            next_token: FIRST_CONN,
            next_generated: 1,
            scratch: vec![0; READ_CHUNK].into_boxed_slice(),
            session_events: Vec::new(),
            incoming: Vec::new(),
            dirty: Vec::new(),
            unfinished: Vec::new(),
            next_tick: Instant::now() + TICK,
        })
    }

    /// The bound endpoint, with the port a `*` or `0` port got.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// A waker in this router's poll set: another thread calls `wake()` to end [`Router::wait`].
    pub fn waker(&self) -> io::Result<Arc<Waker>> {
        Waker::new(self.poll.registry(), WAKER).map(Arc::new)
    }

    /// Sleeps until something happens or `timeout` passes (not at all when a connection
    /// still has unread bytes), then accepts, reads and writes what is ready. Received
    /// messages wait in [`Router::drain_messages`].
    pub fn wait(&mut self, timeout: Duration) {
        let timeout = if self.unfinished.is_empty() {
            timeout
        } else {
            Duration::ZERO
        };
        let mut events = std::mem::replace(&mut self.events, Events::with_capacity(0));
        if let Err(e) = self.poll.poll(&mut events, Some(timeout)) {
            if e.kind() != io::ErrorKind::Interrupted {
                // Cannot happen with a valid poll; do not spin if it does.
                tracing::warn!(error = %e, "wmp manager: poll failed");
                std::thread::sleep(Duration::from_millis(10));
            }
        }
        let now = Instant::now();
        for event in events.iter() {
            match event.token() {
                LISTENER => self.accept(now),
                WAKER => {}
                token => {
                    if event.is_writable() {
                        self.write(token);
                    }
                    // After a hang-up, read on to the end so the close is seen now: no later
                    // event would announce it again.
                    let ended = event.is_read_closed() || event.is_error();
                    if event.is_readable() || ended {
                        self.read(token, now, ended);
                    }
                }
            }
        }
        self.events = events;
        for token in std::mem::take(&mut self.unfinished) {
            if let Some(conn) = self.conns.get_mut(&token) {
                conn.unfinished = false;
                // Its event was consumed earlier and may have announced a hang-up.
                self.read(token, now, true);
            }
        }
        self.flush();
    }

    /// Hands every received message, oldest first, to `handle`.
    pub fn drain_messages(&mut self, mut handle: impl FnMut(Vec<Bytes>)) {
        for frames in self.incoming.drain(..) {
            handle(frames);
        }
    }

    /// Queues `[routing-id, frames…]` for that peer; written by the next [`Router::flush`].
    pub fn send(&mut self, frames: &[Bytes]) -> Sent {
        let Some((id, body)) = frames.split_first().filter(|(_, b)| !b.is_empty()) else {
            return Sent::Failed;
        };
        let Some(&token) = self.ids.get(id) else {
            return Sent::Unreachable;
        };
        let Some(conn) = self.conns.get_mut(&token) else {
            return Sent::Unreachable;
        };
        if conn.unsent() >= OUT_HIGH_WATER {
            return Sent::Full;
        }
        put_message(&mut conn.out, body);
        if !conn.dirty {
            conn.dirty = true;
            self.dirty.push(token);
        }
        Sent::Queued
    }

    /// Writes what [`Router::send`] queued, once per peer.
    pub fn flush(&mut self) {
        let dirty = std::mem::take(&mut self.dirty);
        for &token in &dirty {
            if let Some(conn) = self.conns.get_mut(&token) {
                conn.dirty = false;
                self.write(token);
            }
        }
        // Keep the allocation for the next batch.
        self.dirty = dirty;
        self.dirty.clear();
    }

    /// When [`Router::heartbeat`] is due next.
    pub fn next_tick(&self) -> Instant {
        self.next_tick
    }

    /// Sends due PINGs and closes silent peers, at most once per second.
    pub fn heartbeat(&mut self, now: Instant) {
        if now < self.next_tick {
            return;
        }
        self.next_tick = now + TICK;
        let mut silent = Vec::new();
        let ping = {
            let mut out = Vec::new();
            frame::put_frame(&mut out, frame::COMMAND, &command::ping_body());
            out
        };
        for (&token, conn) in &mut self.conns {
            if now.duration_since(conn.last_recv) >= self.heartbeat.timeout {
                silent.push(token);
            } else if conn.session.is_open() && now >= conn.next_ping {
                conn.next_ping = now + self.heartbeat.interval;
                conn.out.extend_from_slice(&ping);
                if !conn.dirty {
                    conn.dirty = true;
                    self.dirty.push(token);
                }
            }
        }
        for token in silent {
            self.close(token, "silent for the heartbeat timeout");
        }
        self.flush();
    }

    /// Open connections (handshake done).
    #[cfg(test)]
    pub fn peers(&self) -> usize {
        self.ids.len()
    }

    fn accept(&mut self, now: Instant) {
        loop {
            match self.listener.accept() {
                Ok((stream, _)) => self.adopt(stream, now),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    // E.g. out of descriptors: try again on the next readiness.
                    tracing::warn!(error = %e, "wmp manager: accept failed");
                    return;
                }
            }
        }
    }

    fn adopt(&mut self, mut stream: TcpStream, now: Instant) {
        let token = Token(self.next_token);
        self.next_token += 1;
        // Small messages are the whole protocol: do not hold them back (as libzmq does).
        let _ = stream.set_nodelay(true);
        if let Err(e) = self
            .poll
            .registry()
            .register(&mut stream, token, Interest::READABLE)
        {
            tracing::warn!(error = %e, "wmp manager: cannot register a connection");
            return;
        }
        let conn = Conn {
            stream,
            session: Session::new(self.limits),
            inbuf: Vec::new(),
            out: Session::opening(),
            written: 0,
            routing_id: None,
            want_write: false,
            dirty: false,
            unfinished: false,
            last_recv: now,
            next_ping: now + self.heartbeat.interval,
        };
        self.conns.insert(token, conn);
        self.write(token);
    }

    /// Reads what `token` has. `to_the_end`: until WouldBlock, even after a short read.
    fn read(&mut self, token: Token, now: Instant, to_the_end: bool) {
        let Some(conn) = self.conns.get_mut(&token) else {
            return;
        };
        let mut shared = Shared {
            ids: &mut self.ids,
            next_generated: &mut self.next_generated,
            incoming: &mut self.incoming,
            events: &mut self.session_events,
        };
        let mut budget = READ_BUDGET;
        let outcome = loop {
            if budget == 0 {
                conn.unfinished = true;
                self.unfinished.push(token);
                break Ok(());
            }
            match conn.stream.read(&mut self.scratch) {
                Ok(0) => break Err("peer closed".to_owned()),
                Ok(n) => {
                    budget = budget.saturating_sub(n);
                    conn.last_recv = now;
                    if let Err(refusal) = absorb(conn, token, &self.scratch[..n], &mut shared) {
                        break Err(refusal.to_string());
                    }
                    // A short read emptied the socket's receive queue; bytes arriving later
                    // raise a new edge-triggered event. Reading on to WouldBlock cost one
                    // more `recvfrom` per wake-up: one per job with hot GIVEs.
                    if n < self.scratch.len() && !to_the_end {
                        break Ok(());
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break Ok(()),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => break Err(e.to_string()),
            }
        };
        // PONGs the session wrote go out with this batch's flush.
        if conn.unsent() > 0 && !conn.dirty {
            conn.dirty = true;
            self.dirty.push(token);
        }
        if let Err(reason) = outcome {
            self.close(token, &reason);
        }
    }

    fn write(&mut self, token: Token) {
        let Some(conn) = self.conns.get_mut(&token) else {
            return;
        };
        let result = loop {
            if conn.written == conn.out.len() {
                break Ok(true);
            }
            match conn.stream.write(&conn.out[conn.written..]) {
                Ok(0) => break Err(io::Error::from(io::ErrorKind::WriteZero)),
                Ok(n) => conn.written += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break Ok(false),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => break Err(e),
            }
        };
        let registry = self.poll.registry();
        let result = result.and_then(|drained| {
            if drained {
                conn.out.clear();
                conn.written = 0;
                if conn.out.capacity() > KEEP_CAPACITY {
                    conn.out = Vec::new();
                }
            }
            // Ask for writable only while a write was short.
            if drained == conn.want_write {
                conn.want_write = !drained;
                let interest = if drained {
                    Interest::READABLE
                } else {
                    Interest::READABLE | Interest::WRITABLE
                };
                registry.reregister(&mut conn.stream, token, interest)?;
            }
            Ok(())
        });
        if let Err(e) = result {
            self.close(token, &e.to_string());
        }
    }

    fn close(&mut self, token: Token, reason: &str) {
        let Some(mut conn) = self.conns.remove(&token) else {
            return;
        };
        if let Some(id) = &conn.routing_id {
            self.ids.remove(id);
        }
        let _ = self.poll.registry().deregister(&mut conn.stream);
        tracing::debug!(reason, peer = ?conn.stream.peer_addr().ok(), "wmp manager: connection closed");
    }
}

/// Feeds newly read bytes to the connection's session: complete messages go to
/// `shared.incoming`, replies to the connection's out buffer, and at the handshake the
/// peer gets its routing id. Only an unfinished unit stays buffered.
fn absorb(conn: &mut Conn, token: Token, data: &[u8], shared: &mut Shared) -> Result<(), Refusal> {
    let from_inbuf = !conn.inbuf.is_empty();
    if from_inbuf {
        conn.inbuf.extend_from_slice(data);
    }
    let buf: &[u8] = if from_inbuf { &conn.inbuf } else { data };
    let mut used = 0;
    loop {
        let fed = conn
            .session
            .feed(&buf[used..], &mut conn.out, shared.events);
        // Messages before a refusal are delivered (as libzmq would have), and none is left
        // behind for the next connection.
        let mut named = false;
        for event in shared.events.drain(..) {
            match event {
                Event::Message(frames) => shared.incoming.push(frames),
                Event::Handshake { identity } => {
                    let id = name_peer(identity, token, shared.ids, shared.next_generated)?;
                    conn.routing_id = Some(id.clone());
                    conn.session.open(id);
                    named = true;
                }
            }
        }
        used += fed?;
        if !named || used == buf.len() {
            break;
        }
    }
    if from_inbuf {
        conn.inbuf.drain(..used);
        if conn.inbuf.is_empty() && conn.inbuf.capacity() > KEEP_CAPACITY {
            // A large frame passed: do not hold its size for the connection's lifetime.
            conn.inbuf = Vec::new();
        }
    } else {
        conn.inbuf.extend_from_slice(&data[used..]);
    }
    Ok(())
}

/// The peer's own routing id if it set one and it is free (libzmq refuses a duplicate
/// newcomer), else a generated one: a zero byte and a counter, like libzmq's, which peers
/// cannot choose (libzmq reserves ids starting with a zero byte).
fn name_peer(
    identity: Option<Bytes>,
    token: Token,
    ids: &mut HashMap<Bytes, Token>,
    next: &mut u32,
) -> Result<Bytes, Refusal> {
    let id = match identity {
        Some(id) if ids.contains_key(&id) => return Err(Refusal::DuplicateIdentity(id)),
        Some(id) => id,
        None => loop {
            let mut id = vec![0u8];
            id.extend_from_slice(&next.to_be_bytes());
            *next = next.wrapping_add(1);
            let id = Bytes::from(id);
            if !ids.contains_key(&id) {
                break id;
            }
        },
    };
    ids.insert(id.clone(), token);
    Ok(id)
}

#[cfg(test)]
mod tests {
    use super::*;

    use jobyard_wmp_wire::zmtp::greeting::{greeting, GREETING_LEN};
    use std::io::{Read, Write};

    const LIMITS: SessionLimits = SessionLimits {
        max_frame: 1024,
        max_frames: 8,
        max_message: 4096,
    };
    const HEARTBEAT: Heartbeat = Heartbeat {
        interval: Duration::from_secs(5),
        timeout: Duration::from_secs(15),
    };

    /// Polls the router until `done` says so (bounded, so a broken build fails, not hangs).
    fn turn_until(router: &mut Router, mut done: impl FnMut(&mut Router) -> bool) {
        for _ in 0..200 {
            router.wait(Duration::from_millis(20));
            if done(router) {
                return;
            }
        }
        panic!("the router never got there");
    }

    /// A blocking ZMTP 3.0 DEALER client, written out byte by byte.
    fn dealer(router: &mut Router, identity: &[u8]) -> std::net::TcpStream {
        let addr = parse_endpoint(router.endpoint()).unwrap();
        let mut client = std::net::TcpStream::connect(addr).unwrap();
        client
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        let mut hello = greeting().to_vec();
        hello[11] = 0;
        let mut ready = b"\x05READY\x0bSocket-Type\x00\x00\x00\x06DEALER\x08Identity".to_vec();
        ready.extend_from_slice(&(identity.len() as u32).to_be_bytes());
        ready.extend_from_slice(identity);
        frame::put_frame(&mut hello, frame::COMMAND, &ready);
        client.write_all(&hello).unwrap();
        let peers = router.peers();
        turn_until(router, |r| r.peers() == peers + 1);
        let mut theirs = vec![0; GREETING_LEN + 2];
        client.read_exact(&mut theirs).unwrap();
        let mut their_ready = vec![0; theirs[GREETING_LEN + 1] as usize];
        client.read_exact(&mut their_ready).unwrap();
        client
    }

    #[test]
    fn messages_carry_the_routing_id_replies_reach_the_peer_and_a_gone_peer_is_unreachable() {
        let mut router = Router::bind("tcp://127.0.0.1:*", LIMITS, HEARTBEAT).unwrap();
        let mut w1 = dealer(&mut router, b"w1");
        let mut anon = dealer(&mut router, b"");
        let mut wire = Vec::new();
        put_message(&mut wire, &[&b""[..], b"hello"]);
        w1.write_all(&wire).unwrap();
        anon.write_all(&wire).unwrap();
        let mut got = Vec::new();
        turn_until(&mut router, |r| {
            r.drain_messages(|m| got.push(m));
            got.len() == 2
        });
        got.sort();
        assert_eq!(got[0][0][0], 0, "a generated id starts with a zero byte");
        assert_eq!(&got[0][1..], &[Bytes::new(), Bytes::from_static(b"hello")]);
        assert_eq!(got[1][0], Bytes::from_static(b"w1"));

        let reply = [
            Bytes::from_static(b"w1"),
            Bytes::new(),
            Bytes::from_static(b"hi"),
        ];
        assert_eq!(router.send(&reply), Sent::Queued);
        router.flush();
        let mut back = [0u8; 6];
        w1.read_exact(&mut back).unwrap();
        assert_eq!(back, [frame::MORE, 0, 0, 2, b'h', b'i']);

        let stranger = [Bytes::from_static(b"nobody"), Bytes::new()];
        assert_eq!(router.send(&stranger), Sent::Unreachable);
        assert_eq!(
            router.send(&reply[..1]),
            Sent::Failed,
            "no frames after the id"
        );
        drop(w1);
        turn_until(&mut router, |r| r.peers() == 1);
        assert_eq!(
            router.send(&reply),
            Sent::Unreachable,
            "a disconnect forgets the id"
        );
    }

    #[test]
    fn a_peer_that_does_not_read_fills_up() {
        let mut router = Router::bind("tcp://127.0.0.1:*", LIMITS, HEARTBEAT).unwrap();
        let _sleeper = dealer(&mut router, b"s");
        let big = Bytes::from(vec![0u8; 1000]);
        let msg = [Bytes::from_static(b"s"), big];
        let mut sent = 0usize;
        while router.send(&msg) == Sent::Queued {
            sent += 1;
            router.flush();
            assert!(sent < 1_000_000, "never full");
        }
        assert!(
            sent * 1000 >= OUT_HIGH_WATER,
            "full only past the high-water mark"
        );
    }

    #[test]
    fn endpoints_are_tcp_host_port() {
        assert_eq!(
            parse_endpoint("tcp://127.0.0.1:5570").unwrap(),
            "127.0.0.1:5570".parse().unwrap()
        );
        assert_eq!(
            parse_endpoint("tcp://*:*").unwrap(),
            "0.0.0.0:0".parse().unwrap()
        );
        assert_eq!(
            parse_endpoint("tcp://[::1]:9").unwrap(),
            "[::1]:9".parse().unwrap()
        );
        assert!(parse_endpoint("ipc:///tmp/x").is_err());
        assert!(parse_endpoint("tcp://127.0.0.1").is_err());
        assert!(parse_endpoint("tcp://127.0.0.1:http").is_err());
    }

    #[test]
    fn peers_get_their_own_id_or_a_generated_one_and_duplicates_are_refused() {
        let mut ids = HashMap::new();
        let mut next = u32::MAX;
        let w = Bytes::from_static(b"w1");
        assert_eq!(
            name_peer(Some(w.clone()), Token(2), &mut ids, &mut next),
            Ok(w.clone())
        );
        assert_eq!(
            name_peer(Some(w.clone()), Token(3), &mut ids, &mut next),
            Err(Refusal::DuplicateIdentity(w))
        );
        let a = name_peer(None, Token(4), &mut ids, &mut next).unwrap();
        assert_eq!(&a[..], &[0, 0xFF, 0xFF, 0xFF, 0xFF]);
        let b = name_peer(None, Token(5), &mut ids, &mut next).unwrap();
        assert_eq!(&b[..], &[0, 0, 0, 0, 0]);
        // A peer that chose what the counter would generate next does not collide.
        ids.insert(Bytes::from_static(&[0, 0, 0, 0, 1]), Token(6));
        let c = name_peer(None, Token(7), &mut ids, &mut next).unwrap();
        assert_eq!(&c[..], &[0, 0, 0, 0, 2]);
        assert_eq!(ids.len(), 5);
    }
}
