//! One ZMTP 3.x connection seen from a ROUTER, as a pure state machine: bytes in, replies
//! (PONG) and events (handshake done, whole messages) out. No sockets here, so every rule
//! — the greeting, the NULL handshake, frame and message bounds — is unit-tested on byte
//! strings, and the router only moves bytes.

use bytes::Bytes;

use super::command::{self, parse_command, Command, CommandError};
use super::frame::{self, parse_header, FrameError};
use super::greeting::{check_greeting, greeting, GreetingError, GREETING_LEN};

/// Largest command frame accepted during the handshake (a READY with its metadata).
const MAX_HANDSHAKE_COMMAND: usize = 4096;

/// Frames a received message is expected to have at most, for the first allocation.
const MESSAGE_FRAMES_HINT: usize = 8;

/// Bounds on what one peer may make the session hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SessionLimits {
    /// Largest frame body.
    pub max_frame: usize,
    /// Most frames in one message (not counting the routing id the ROUTER adds); of a
    /// longer message only the first `max_frames + 1` are kept, for the decoder to refuse.
    pub max_frames: usize,
    /// Most bytes in one message, all frames together.
    pub max_message: usize,
}

/// What the session tells its router.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// The handshake is done; the peer asked for this routing id (or none). The router
    /// must call [`Session::open`] before feeding more bytes.
    Handshake {
        /// The peer's `Identity`, if it set one.
        identity: Option<Bytes>,
    },
    /// A whole message: the routing id, then the peer's frames.
    Message(Vec<Bytes>),
}

/// Why the session closes the connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// A bad greeting.
    Greeting(GreetingError),
    /// A bad frame header.
    Frame(FrameError),
    /// A bad command body.
    Command(CommandError),
    /// During the handshake, something other than READY arrived.
    ExpectedReady,
    /// A peer of a socket type a ROUTER does not talk to.
    SocketType(Bytes),
    /// The peer sent ERROR.
    PeerError(Bytes),
    /// A message with more bytes than allowed.
    MessageTooLarge,
    /// The peer asked for a routing id another connection has (libzmq's ROUTER refuses
    /// the newcomer too).
    DuplicateIdentity(Bytes),
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refusal::Greeting(e) => write!(f, "greeting: {e}"),
            Refusal::Frame(e) => write!(f, "frame: {e}"),
            Refusal::Command(e) => write!(f, "command: {e}"),
            Refusal::ExpectedReady => f.write_str("handshake: expected READY"),
            Refusal::SocketType(t) => write!(f, "handshake: socket type {t:?}"),
            Refusal::PeerError(reason) => write!(f, "peer sent ERROR {reason:?}"),
            Refusal::MessageTooLarge => f.write_str("message too large"),
            Refusal::DuplicateIdentity(id) => write!(f, "identity {id:?} is already connected"),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Greeting,
    Handshake,
    /// Handshake reported, waiting for [`Session::open`].
    Naming,
    Open,
}

/// The state of one connection.
#[derive(Debug)]
pub struct Session {
    limits: SessionLimits,
    phase: Phase,
    routing_id: Bytes,
    /// Frames of the message being received, the routing id first.
    partial: Vec<Bytes>,
    partial_bytes: usize,
}

impl Session {
    /// A session for a freshly accepted connection.
    pub fn new(limits: SessionLimits) -> Session {
        Session {
            limits,
            phase: Phase::Greeting,
            routing_id: Bytes::new(),
            partial: Vec::new(),
            partial_bytes: 0,
        }
    }

    /// What we send first, without waiting for the peer: our greeting and our READY.
    pub fn opening() -> Vec<u8> {
        let mut out = greeting().to_vec();
        frame::put_frame(&mut out, frame::COMMAND, &command::ready_body());
        out
    }

    /// Whether the handshake is done and the routing id set.
    pub fn is_open(&self) -> bool {
        self.phase == Phase::Open
    }

    /// Gives the connection its routing id after [`Event::Handshake`].
    pub fn open(&mut self, routing_id: Bytes) {
        debug_assert_eq!(self.phase, Phase::Naming);
        self.routing_id = routing_id;
        self.phase = Phase::Open;
    }

    /// Consumes whole units (the greeting, frames) from the front of `buf`; appends
    /// replies to `out` and events to `events`. Returns how many bytes were consumed; the
    /// rest must be fed again with more bytes behind it. Stops after [`Event::Handshake`].
    pub fn feed(
        &mut self,
        buf: &[u8],
        out: &mut Vec<u8>,
        events: &mut Vec<Event>,
    ) -> Result<usize, Refusal> {
        let mut used = 0;
        loop {
            let rest = &buf[used..];
            let step = match self.phase {
                Phase::Greeting => self.greeting(rest)?,
                Phase::Handshake => self.handshake(rest, events)?,
                Phase::Naming => return Ok(used),
                Phase::Open => self.frame(rest, out, events)?,
            };
            match step {
                0 => return Ok(used),
                n => used += n,
            }
        }
    }

    fn greeting(&mut self, rest: &[u8]) -> Result<usize, Refusal> {
        let got = &rest[..rest.len().min(GREETING_LEN)];
        if check_greeting(got).map_err(Refusal::Greeting)? {
            self.phase = Phase::Handshake;
            Ok(GREETING_LEN)
        } else {
            Ok(0)
        }
    }

    fn handshake(&mut self, rest: &[u8], events: &mut Vec<Event>) -> Result<usize, Refusal> {
        let Some(header) = parse_header(rest, MAX_HANDSHAKE_COMMAND).map_err(Refusal::Frame)?
        else {
            return Ok(0);
        };
        if rest.len() < header.total_len() {
            return Ok(0);
        }
        if !header.command {
            return Err(Refusal::ExpectedReady);
        }
        let body = &rest[header.header_len..header.total_len()];
        match parse_command(body).map_err(Refusal::Command)? {
            Command::Ready {
                socket_type,
                identity,
            } => {
                if !command::router_accepts(&socket_type) {
                    return Err(Refusal::SocketType(socket_type));
                }
                events.push(Event::Handshake { identity });
                self.phase = Phase::Naming;
                Ok(header.total_len())
            }
            Command::Error(reason) => Err(Refusal::PeerError(reason)),
            _ => Err(Refusal::ExpectedReady),
        }
    }

    fn frame(
        &mut self,
        rest: &[u8],
        out: &mut Vec<u8>,
        events: &mut Vec<Event>,
    ) -> Result<usize, Refusal> {
        let Some(header) = parse_header(rest, self.limits.max_frame).map_err(Refusal::Frame)?
        else {
            return Ok(0);
        };
        if rest.len() < header.total_len() {
            return Ok(0);
        }
        let body = &rest[header.header_len..header.total_len()];
        if header.command {
            self.command(body, out)?;
        } else {
            self.message_frame(body, header.more, events)?;
        }
        Ok(header.total_len())
    }

    fn command(&mut self, body: &[u8], out: &mut Vec<u8>) -> Result<(), Refusal> {
        match parse_command(body).map_err(Refusal::Command)? {
            Command::Ping { context } => {
                frame::put_frame(out, frame::COMMAND, &command::pong_body(&context));
                Ok(())
            }
            Command::Error(reason) => Err(Refusal::PeerError(reason)),
            // PONGs only prove the peer alive, which any received byte does.
            Command::Pong | Command::Ready { .. } | Command::Other => Ok(()),
        }
    }

    fn message_frame(
        &mut self,
        body: &[u8],
        more: bool,
        events: &mut Vec<Event>,
    ) -> Result<(), Refusal> {
        if self.partial.is_empty() {
            // Room for a whole WMP message without regrowing (id, delimiter, signature,
            // command, headers, payload; a device's path adds a few).
            self.partial = Vec::with_capacity(MESSAGE_FRAMES_HINT);
            self.partial.push(self.routing_id.clone());
        }
        // One frame past the limit is kept so the WMP decoder sees, drops and counts the
        // message as having too many frames (as it did behind libzmq); the rest is not
        // stored, so memory stays bounded and the connection stays up.
        if self.partial.len() <= self.limits.max_frames + 1 {
            self.partial_bytes += body.len();
            if self.partial_bytes > self.limits.max_message {
                return Err(Refusal::MessageTooLarge);
            }
            self.partial.push(frame_bytes(body));
        }
        if !more {
            self.partial_bytes = 0;
            events.push(Event::Message(std::mem::take(&mut self.partial)));
        }
        Ok(())
    }
}

/// Frames every WMP message carries — the empty delimiter, the signature, the command
/// name — are the same few byte strings: they are handed out as static `Bytes` instead of
/// a copy each. That is three allocations fewer per message, of five (docs/benchmarks.md,
/// "14/WMP"); only the headers and the payload are copied.
fn frame_bytes(body: &[u8]) -> Bytes {
    let common: &'static [u8] = match body {
        b"" => b"",
        b"WMP01" => b"WMP01",
        b"READY" => b"READY",
        b"WAKE" => b"WAKE",
        b"GIVE" => b"GIVE",
        b"TAKE" => b"TAKE",
        b"NO" => b"NO",
        b"DONE" => b"DONE",
        b"STATUS" => b"STATUS",
        b"CANCEL" => b"CANCEL",
        _ => return Bytes::copy_from_slice(body),
    };
    Bytes::from_static(common)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::zmtp::frame::{put_frame, put_message, COMMAND, LONG, MORE};

    const LIMITS: SessionLimits = SessionLimits {
        max_frame: 1000,
        max_frames: 4,
        max_message: 1500,
    };

    fn dealer_hello(identity: &[u8]) -> Vec<u8> {
        let mut bytes = greeting().to_vec();
        let mut ready = vec![5];
        ready.extend_from_slice(b"READY");
        for (name, value) in [
            (&b"Socket-Type"[..], &b"DEALER"[..]),
            (b"Identity", identity),
        ] {
            ready.push(name.len() as u8);
            ready.extend_from_slice(name);
            ready.extend_from_slice(&(value.len() as u32).to_be_bytes());
            ready.extend_from_slice(value);
        }
        put_frame(&mut bytes, COMMAND, &ready);
        bytes
    }

    /// Feeds `bytes` one at a time (the worst split), naming the peer `id` on handshake.
    fn feed_bytewise(s: &mut Session, bytes: &[u8], id: &[u8]) -> Result<Vec<Event>, Refusal> {
        let mut buf = Vec::new();
        let mut events = Vec::new();
        let mut out = Vec::new();
        for &b in bytes {
            buf.push(b);
            loop {
                let used = s.feed(&buf, &mut out, &mut events)?;
                buf.drain(..used);
                if s.phase == Phase::Naming {
                    s.open(Bytes::copy_from_slice(id));
                    continue;
                }
                break;
            }
        }
        assert!(buf.is_empty(), "all bytes consumed");
        Ok(events)
    }

    #[test]
    fn common_frames_are_shared_and_others_copied_with_the_same_bytes() {
        for common in [&b"WMP01"[..], b"GIVE", b"DONE", b"CANCEL"] {
            let (a, b) = (frame_bytes(common), frame_bytes(common));
            assert_eq!(&a[..], common);
            // Two live copies would be two allocations; a shared static frame is one.
            assert_eq!(a.as_ptr(), b.as_ptr(), "{common:?} is shared");
        }
        assert!(frame_bytes(b"").is_empty());
        let mut buf = b"WMP0".to_vec();
        let got = frame_bytes(&buf);
        buf[0] = b'X';
        assert_eq!(&got[..], b"WMP0", "an uncommon frame is a copy");
        assert_eq!(&frame_bytes(b"done")[..], b"done");
    }

    #[test]
    fn our_opening_is_a_greeting_and_a_router_ready() {
        let opening = Session::opening();
        assert_eq!(check_greeting(&opening[..GREETING_LEN]), Ok(true));
        let h = parse_header(&opening[GREETING_LEN..], 100)
            .unwrap()
            .unwrap();
        assert!(h.command);
        let body = &opening[GREETING_LEN + h.header_len..];
        assert!(
            matches!(parse_command(body), Ok(Command::Ready { socket_type, .. }) if &socket_type[..] == b"ROUTER")
        );
    }

    #[test]
    fn handshake_then_messages_even_split_byte_by_byte() {
        let mut bytes = dealer_hello(b"w1");
        put_message(&mut bytes, &[&b""[..], b"WMP01", b"READY"]);
        put_message(&mut bytes, &[&b"x"[..]]);
        let mut s = Session::new(LIMITS);
        let events = feed_bytewise(&mut s, &bytes, b"w1").unwrap();
        assert_eq!(
            events,
            vec![
                Event::Handshake {
                    identity: Some(Bytes::from_static(b"w1"))
                },
                Event::Message(vec![
                    Bytes::from_static(b"w1"),
                    Bytes::new(),
                    Bytes::from_static(b"WMP01"),
                    Bytes::from_static(b"READY"),
                ]),
                Event::Message(vec![Bytes::from_static(b"w1"), Bytes::from_static(b"x")]),
            ]
        );
    }

    #[test]
    fn feed_stops_at_the_handshake_until_the_router_names_the_peer() {
        let mut bytes = dealer_hello(b"");
        put_message(&mut bytes, &[&b"m"[..]]);
        let mut s = Session::new(LIMITS);
        let (mut out, mut events) = (Vec::new(), Vec::new());
        let used = s.feed(&bytes, &mut out, &mut events).unwrap();
        assert_eq!(events, vec![Event::Handshake { identity: None }]);
        assert_eq!(s.feed(&bytes[used..], &mut out, &mut events), Ok(0));
        s.open(Bytes::from_static(b"\0gen"));
        let more = s.feed(&bytes[used..], &mut out, &mut events).unwrap();
        assert_eq!(used + more, bytes.len());
        assert_eq!(
            events[1],
            Event::Message(vec![Bytes::from_static(b"\0gen"), Bytes::from_static(b"m")])
        );
    }

    #[test]
    fn ping_is_answered_with_pong_carrying_its_context() {
        let mut bytes = dealer_hello(b"");
        let mut ping = command::ping_body();
        ping.extend_from_slice(b"abc");
        put_frame(&mut bytes, COMMAND, &ping);
        put_frame(&mut bytes, COMMAND, &command::pong_body(b""));
        let mut s = Session::new(LIMITS);
        let (mut out, mut events) = (Vec::new(), Vec::new());
        let used = s.feed(&bytes, &mut out, &mut events).unwrap();
        s.open(Bytes::from_static(b"id"));
        s.feed(&bytes[used..], &mut out, &mut events).unwrap();
        let mut pong = Vec::new();
        put_frame(&mut pong, COMMAND, &command::pong_body(b"abc"));
        assert_eq!(out, pong);
        assert_eq!(events.len(), 1, "PING and PONG deliver no message");
    }

    #[test]
    fn truncated_input_waits_and_consumes_nothing() {
        let bytes = dealer_hello(b"w");
        let mut s = Session::new(LIMITS);
        let (mut out, mut events) = (Vec::new(), Vec::new());
        assert_eq!(s.feed(&bytes[..40], &mut out, &mut events), Ok(0));
        assert_eq!(
            s.feed(&bytes[..GREETING_LEN + 3], &mut out, &mut events),
            Ok(64)
        );
        assert!(events.is_empty() && out.is_empty());
    }

    fn opened() -> Session {
        let mut s = Session::new(LIMITS);
        feed_bytewise(&mut s, &dealer_hello(b""), b"id").unwrap();
        assert!(s.is_open());
        s
    }

    fn refusal(s: &mut Session, bytes: &[u8]) -> Refusal {
        s.feed(bytes, &mut Vec::new(), &mut Vec::new())
            .expect_err("refused")
    }

    #[test]
    fn an_oversized_frame_is_refused_from_its_header() {
        let mut huge = vec![LONG];
        huge.extend_from_slice(&(1u64 << 62).to_be_bytes());
        assert_eq!(
            refusal(&mut opened(), &huge),
            Refusal::Frame(FrameError::TooLarge(1 << 62))
        );
        let mut over = vec![LONG];
        over.extend_from_slice(&1001u64.to_be_bytes());
        assert!(matches!(refusal(&mut opened(), &over), Refusal::Frame(_)));
    }

    #[test]
    fn too_many_bytes_in_one_message_are_refused() {
        let mut bytes = Vec::new();
        put_frame(&mut bytes, MORE, &[0; 1000]);
        put_frame(&mut bytes, 0, &[0; 600]);
        assert_eq!(refusal(&mut opened(), &bytes), Refusal::MessageTooLarge);
        // Four frames and 1500 bytes are within bounds.
        let mut bytes = Vec::new();
        put_frame(&mut bytes, MORE, &[0; 1000]);
        put_frame(&mut bytes, MORE, &[0; 400]);
        put_frame(&mut bytes, MORE, &[0; 100]);
        put_frame(&mut bytes, 0, b"");
        let mut events = Vec::new();
        assert_eq!(
            opened().feed(&bytes, &mut Vec::new(), &mut events),
            Ok(bytes.len())
        );
        assert!(matches!(&events[0], Event::Message(f) if f.len() == 5));
    }

    #[test]
    fn bad_greetings_and_handshakes_are_refused() {
        let mut s = Session::new(LIMITS);
        assert!(matches!(
            refusal(&mut s, b"\x00garbage"),
            Refusal::Greeting(_)
        ));
        let mut g = greeting();
        g[12..17].copy_from_slice(b"PLAIN");
        assert_eq!(
            refusal(&mut Session::new(LIMITS), &g),
            Refusal::Greeting(GreetingError::UnsupportedMechanism)
        );
        // A message frame instead of READY.
        let mut bytes = greeting().to_vec();
        put_frame(&mut bytes, 0, b"hello");
        assert_eq!(
            refusal(&mut Session::new(LIMITS), &bytes),
            Refusal::ExpectedReady
        );
        // A PUB socket.
        let mut bytes = greeting().to_vec();
        let mut ready = b"\x05READY\x0bSocket-Type".to_vec();
        ready.extend_from_slice(&3u32.to_be_bytes());
        ready.extend_from_slice(b"PUB");
        put_frame(&mut bytes, COMMAND, &ready);
        assert_eq!(
            refusal(&mut Session::new(LIMITS), &bytes),
            Refusal::SocketType(Bytes::from_static(b"PUB"))
        );
        // ERROR during the handshake.
        let mut bytes = greeting().to_vec();
        put_frame(&mut bytes, COMMAND, b"\x05ERROR\x02no");
        assert_eq!(
            refusal(&mut Session::new(LIMITS), &bytes),
            Refusal::PeerError(Bytes::from_static(b"no"))
        );
        // A READY without Socket-Type.
        let mut bytes = greeting().to_vec();
        put_frame(&mut bytes, COMMAND, b"\x05READY");
        assert!(matches!(
            refusal(&mut Session::new(LIMITS), &bytes),
            Refusal::SocketType(_)
        ));
    }

    #[test]
    fn a_message_with_too_many_frames_keeps_one_too_many_for_the_decoder() {
        let mut bytes = Vec::new();
        for _ in 0..1000 {
            put_frame(&mut bytes, MORE, b"f");
        }
        put_frame(&mut bytes, 0, b"last");
        put_message(&mut bytes, &[&b"next"[..]]);
        let mut events = Vec::new();
        let mut s = opened();
        assert_eq!(
            s.feed(&bytes, &mut Vec::new(), &mut events),
            Ok(bytes.len())
        );
        let Event::Message(frames) = &events[0] else {
            panic!("{events:?}");
        };
        assert_eq!(
            frames.len(),
            1 + LIMITS.max_frames + 1,
            "routing id + limit + 1"
        );
        assert_eq!(
            events[1],
            Event::Message(vec![Bytes::from_static(b"id"), Bytes::from_static(b"next")])
        );
    }

    #[test]
    fn error_after_the_handshake_closes() {
        let mut bytes = Vec::new();
        put_frame(&mut bytes, COMMAND, b"\x05ERROR\x00");
        assert_eq!(
            refusal(&mut opened(), &bytes),
            Refusal::PeerError(Bytes::new())
        );
    }
}
