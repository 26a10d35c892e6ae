//! Framing: bytes in, whole requests out, with every size bounded.
//!
//! gearmand decides text versus binary per message by its first byte (`\0` = binary), and
//! so does this decoder. Unlike gearmand it always honours the declared size: fields are
//! never searched for past it, and bodies of zero-field packets are consumed, not parsed as
//! the next message. A packet larger than the configured maximum or a text line longer than
//! [`MAX_LINE`] ends the stream ([`Frame::Fatal`]) before anything is buffered for it.
//!
//! Nothing is reserved on the strength of a declared size: the buffer grows as bytes
//! arrive, and what is buffered of an unfinished packet is charged to the server-wide
//! [`InflightBudget`]. When that is spent the connection gets an `ERROR` packet and is
//! closed ([`Fatal::OutOfMemory`]) instead of buffering more.

use std::sync::Arc;

use bytes::{Buf, Bytes, BytesMut};
use jobyard_broker::budget::{BodyCharge, InflightBudget};

use crate::packet::{kind, HEADER, REQ, RES};

/// Longest admin text line (without its `\n`), as gearmand's 8 KiB receive buffer allows.
pub const MAX_LINE: usize = 8191;

/// One decoded message.
#[derive(Debug, PartialEq, Eq)]
pub enum Frame {
    /// A binary packet with intact framing; `request` is false for `\0RES` magic.
    Packet {
        request: bool,
        kind: u32,
        body: Bytes,
    },
    /// An admin text line without its line ending.
    Line(Bytes),
    /// The stream cannot be followed: the connection must close (after `Fatal::reply`).
    Fatal(Fatal),
}

/// Why a stream cannot be followed any further.
#[derive(Debug, PartialEq, Eq, Clone, Copy)]
pub enum Fatal {
    /// Starts with `\0` but is neither `\0REQ` nor `\0RES`.
    BadMagic,
    /// Type 0 or above 42 (gearmand closes; it even crashes on types >= 2^31).
    UnknownType(u32),
    /// Declared body size over the configured maximum.
    TooLarge(u32),
    /// A text line with no `\n` within [`MAX_LINE`] bytes.
    LineTooLong,
    /// The server's budget for packets in flight is spent: this one cannot be buffered.
    OutOfMemory,
}

impl Fatal {
    /// The ERROR packet sent before closing, if any. gearmand closes silently on bad magic
    /// and unknown types; an oversized packet is explained, since that limit is ours.
    pub fn reply(self) -> Option<(&'static str, &'static str)> {
        match self {
            Fatal::TooLarge(_) => Some((
                "ARGUMENT_TOO_LARGE",
                "Packet size over the server's maximum; closing the connection",
            )),
            Fatal::OutOfMemory => Some((
                "OUT_OF_MEMORY",
                "Server memory for packets being received is spent; closing the connection",
            )),
            _ => None,
        }
    }
}

/// Splits a connection's input into frames. Stops for good after a fatal frame.
#[derive(Debug)]
pub struct Decoder {
    max_packet: u32,
    dead: bool,
    /// What the packet being received holds of the server-wide budget.
    charge: BodyCharge,
}

impl jobyard_net::Decode for Decoder {
    type Request = Frame;
    fn decode(&mut self, buf: &mut BytesMut) -> Option<Frame> {
        Decoder::decode(self, buf)
    }
}

impl Decoder {
    /// A decoder accepting bodies of up to `max_packet` bytes, with a budget of its own
    /// that never runs out (tests, fuzzing).
    pub fn new(max_packet: u32) -> Decoder {
        Decoder::with_budget(max_packet, InflightBudget::unlimited())
    }

    /// A decoder whose unfinished packets are charged to `budget`, shared by all
    /// connections.
    pub fn with_budget(max_packet: u32, budget: Arc<InflightBudget>) -> Decoder {
        Decoder {
            max_packet,
            dead: false,
            charge: BodyCharge::new(budget),
        }
    }

    /// How many bytes the decoder may need buffered at most to make progress: the
    /// connection loop never has to hold more than this (plus one read) of unparsed input.
    pub fn max_buffered(&self) -> usize {
        HEADER + self.max_packet as usize
    }

    /// Takes the next complete frame off the front of `buf`, or `None` if more input is
    /// needed (or the stream already failed).
    pub fn decode(&mut self, buf: &mut BytesMut) -> Option<Frame> {
        if self.dead || buf.is_empty() {
            return None;
        }
        let frame = if buf[0] != 0 {
            self.line(buf)?
        } else {
            self.packet(buf)?
        };
        if matches!(frame, Frame::Fatal(_)) {
            self.dead = true;
        }
        Some(frame)
    }

    fn line(&mut self, buf: &mut BytesMut) -> Option<Frame> {
        let window = &buf[..buf.len().min(MAX_LINE + 1)];
        match window.iter().position(|&b| b == b'\n') {
            Some(nl) => {
                let mut line = buf.split_to(nl + 1).freeze();
                line.truncate(nl);
                if line.last() == Some(&b'\r') {
                    line.truncate(nl - 1);
                }
                Some(Frame::Line(line))
            }
            None if buf.len() > MAX_LINE => Some(Frame::Fatal(Fatal::LineTooLong)),
            None => None,
        }
    }

    fn packet(&mut self, buf: &mut BytesMut) -> Option<Frame> {
        let magic_len = buf.len().min(4);
        if buf[..magic_len] != REQ[..magic_len] && buf[..magic_len] != RES[..magic_len] {
            return Some(Frame::Fatal(Fatal::BadMagic));
        }
        if buf.len() < HEADER {
            return None;
        }
        let request = buf[..4] == REQ;
        let t = u32::from_be_bytes([buf[4], buf[5], buf[6], buf[7]]);
        let size = u32::from_be_bytes([buf[8], buf[9], buf[10], buf[11]]);
        if t == 0 || t > kind::MAX {
            return Some(Frame::Fatal(Fatal::UnknownType(t)));
        }
        if size > self.max_packet {
            return Some(Frame::Fatal(Fatal::TooLarge(size)));
        }
        let total = HEADER + size as usize;
        if buf.len() < total {
            // Only a packet that must wait for more bytes is charged: one that arrived
            // whole (the usual case) costs the budget nothing.
            if !self.charge.hold(buf.len() as u64) {
                self.charge.release();
                return Some(Frame::Fatal(Fatal::OutOfMemory));
            }
            return None;
        }
        self.charge.release();
        buf.advance(HEADER);
        let body = buf.split_to(size as usize).freeze();
        Some(Frame::Packet {
            request,
            kind: t,
            body,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pkt(magic: &[u8; 4], t: u32, body: &[u8]) -> Vec<u8> {
        let mut v = magic.to_vec();
        v.extend_from_slice(&t.to_be_bytes());
        v.extend_from_slice(&(body.len() as u32).to_be_bytes());
        v.extend_from_slice(body);
        v
    }

    fn all(d: &mut Decoder, bytes: &[u8]) -> Vec<Frame> {
        let mut buf = BytesMut::from(bytes);
        let mut out = Vec::new();
        while let Some(f) = d.decode(&mut buf) {
            out.push(f);
        }
        out
    }

    #[test]
    fn text_and_binary_mix_on_one_stream() {
        let mut input = b"status\r\n".to_vec();
        input.extend(pkt(&REQ, kind::ECHO_REQ, b"hi"));
        input.extend(b"version\n");
        let frames = all(&mut Decoder::new(100), &input);
        assert_eq!(
            frames,
            vec![
                Frame::Line(Bytes::from_static(b"status")),
                Frame::Packet {
                    request: true,
                    kind: kind::ECHO_REQ,
                    body: Bytes::from_static(b"hi")
                },
                Frame::Line(Bytes::from_static(b"version")),
            ]
        );
    }

    #[test]
    fn partial_input_waits_and_zero_field_bodies_are_consumed() {
        let mut d = Decoder::new(100);
        let p = pkt(&REQ, kind::GRAB_JOB, b"abc");
        let mut buf = BytesMut::from(&p[..7]);
        assert_eq!(d.decode(&mut buf), None);
        buf.extend_from_slice(&p[7..]);
        assert!(matches!(
            d.decode(&mut buf),
            Some(Frame::Packet { kind: 9, .. })
        ));
        assert!(
            buf.is_empty(),
            "the declared body is consumed, not read as a text line"
        );
    }

    #[test]
    fn bad_magic_unknown_types_and_oversize_are_fatal_and_final() {
        let mut d = Decoder::new(10);
        assert_eq!(
            all(&mut d, b"\0XYZ\0\0\0\x01\0\0\0\0"),
            vec![Frame::Fatal(Fatal::BadMagic)]
        );
        assert_eq!(d.decode(&mut BytesMut::from(&b"status\n"[..])), None);
        for t in [0, 43, 0x8000_0000, u32::MAX] {
            let frames = all(&mut Decoder::new(10), &pkt(&REQ, t, b""));
            assert_eq!(frames, vec![Frame::Fatal(Fatal::UnknownType(t))]);
        }
        let big = pkt(&REQ, kind::ECHO_REQ, &[7u8; 11]);
        assert_eq!(
            all(&mut Decoder::new(10), &big[..12]),
            vec![Frame::Fatal(Fatal::TooLarge(11))]
        );
        let ok = pkt(&REQ, kind::ECHO_REQ, &[7u8; 10]);
        assert_eq!(
            all(&mut Decoder::new(10), &ok).len(),
            1,
            "exactly the maximum is fine"
        );
        let res = pkt(&RES, kind::NOOP, b"");
        assert!(matches!(
            &all(&mut Decoder::new(10), &res)[0],
            Frame::Packet { request: false, .. }
        ));
    }

    #[test]
    fn lines_are_bounded() {
        let long = vec![b'a'; MAX_LINE + 1];
        assert_eq!(
            all(&mut Decoder::new(10), &long),
            vec![Frame::Fatal(Fatal::LineTooLong)]
        );
        let mut ok = vec![b'a'; MAX_LINE];
        ok.push(b'\n');
        assert!(
            matches!(&all(&mut Decoder::new(10), &ok)[0], Frame::Line(l) if l.len() == MAX_LINE)
        );
        assert_eq!(
            all(&mut Decoder::new(10), &long[..100]),
            vec![],
            "short partial line waits"
        );
    }

    #[test]
    fn a_declared_size_reserves_nothing_before_the_body_arrives() {
        let mut d = Decoder::new(64 << 20);
        let mut head = REQ.to_vec();
        head.extend_from_slice(&kind::SUBMIT_JOB.to_be_bytes());
        head.extend_from_slice(&(64u32 << 20).to_be_bytes());
        head.extend_from_slice(b"f\0");
        let mut buf = BytesMut::from(&head[..]);
        assert_eq!(d.decode(&mut buf), None);
        assert!(buf.capacity() < 1 << 20, "capacity {}", buf.capacity());
    }

    #[test]
    fn a_spent_budget_is_an_error_and_the_end_of_the_connection() {
        let budget = InflightBudget::new(30);
        let big = pkt(&REQ, kind::SUBMIT_JOB, &[b'x'; 100]);
        let mut first = Decoder::with_budget(1000, budget.clone());
        let mut first_buf = BytesMut::from(&big[..25]);
        assert_eq!(first.decode(&mut first_buf), None);
        assert_eq!(budget.in_use(), 25);
        let mut second = Decoder::with_budget(1000, budget.clone());
        let mut buf = BytesMut::from(&big[..20]);
        let frame = second.decode(&mut buf);
        assert_eq!(frame, Some(Frame::Fatal(Fatal::OutOfMemory)));
        assert!(
            Fatal::OutOfMemory.reply().is_some(),
            "an ERROR packet is sent"
        );
        assert_eq!(budget.in_use(), 25);
        // Whole packets need no budget; finishing or dropping gives the charge back.
        let small = pkt(&REQ, kind::ECHO_REQ, b"hi");
        let mut third = Decoder::with_budget(1000, budget.clone());
        assert!(matches!(
            third.decode(&mut BytesMut::from(&small[..])),
            Some(Frame::Packet { .. })
        ));
        first_buf.extend_from_slice(&big[25..]);
        assert!(matches!(
            first.decode(&mut first_buf),
            Some(Frame::Packet { .. })
        ));
        assert_eq!(budget.in_use(), 0);
        let mut partial = BytesMut::from(&big[..10]);
        assert_eq!(third.decode(&mut partial), None);
        drop(third);
        assert_eq!(budget.in_use(), 0);
    }

    /// A tiny deterministic generator so the test needs no extra crates.
    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }
    }

    /// Random and mutated input never panics, every byte is accounted for, and unparsed
    /// input never exceeds what the limits allow.
    #[test]
    fn random_and_mutated_input_never_panics_and_stays_bounded() {
        let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
        let seeds: Vec<Vec<u8>> = vec![
            pkt(&REQ, kind::SUBMIT_JOB, b"f\0u\0data"),
            pkt(&REQ, kind::WORK_STATUS, b"H:x:1\x001\x002"),
            pkt(&REQ, kind::SUBMIT_REDUCE_JOB, b"f\0u\0r\0a\0d"),
            b"maxqueue f 1 2 3\r\n".to_vec(),
            pkt(&RES, kind::NOOP, b""),
        ];
        for _ in 0..20_000 {
            let mut input = Vec::new();
            for _ in 0..(rng.next() % 4 + 1) {
                if rng.next().is_multiple_of(5) {
                    let n = (rng.next() % 40) as usize;
                    input.extend((0..n).map(|_| rng.next() as u8));
                } else {
                    input.extend(&seeds[(rng.next() % seeds.len() as u64) as usize]);
                }
            }
            for _ in 0..(rng.next() % 4) {
                if !input.is_empty() {
                    let i = (rng.next() % input.len() as u64) as usize;
                    input[i] = rng.next() as u8;
                }
            }
            // Every other input runs against a small shared budget.
            let limit = if rng.next().is_multiple_of(2) {
                40
            } else {
                u64::MAX
            };
            let budget = InflightBudget::new(limit);
            let mut d = Decoder::with_budget(64, budget.clone());
            let mut buf = BytesMut::new();
            for chunk in input.chunks((rng.next() % 7 + 1) as usize) {
                buf.extend_from_slice(chunk);
                while let Some(frame) = d.decode(&mut buf) {
                    if let Frame::Packet { body, kind, .. } = &frame {
                        assert!(body.len() <= 64);
                        if let Some(n) = crate::packet::request_fields(*kind) {
                            let _ = crate::packet::split_fields(body, n);
                        }
                    }
                    if let Frame::Line(l) = &frame {
                        let _ = crate::admin::parse(l);
                    }
                }
                assert!(d.dead || buf.len() <= d.max_buffered().max(MAX_LINE + 1) + 7);
            }
            drop(d);
            assert_eq!(budget.in_use(), 0, "everything held is given back");
        }
    }
}
