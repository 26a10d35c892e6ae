//! Splitting a connection's byte stream into requests, with every size bounded.
//!
//! A command line is found only within its first [`MAX_LINE`] bytes; a longer one is
//! discarded up to its CRLF and answered `BAD_FORMAT` (unlike beanstalkd 1.12, a line of
//! exactly 225 bytes or a stray CR does not stall the connection). A put body is read by
//! its declared size, never searched for CRLF; one over the job size limit is skipped as
//! it arrives and answered `JOB_TOO_BIG`. So a connection never buffers more than one line
//! or one body of at most the job size limit, whatever it sends.
//!
//! Nothing is reserved for a body on the strength of its declared size: the buffer grows
//! as bytes arrive, and what is buffered of an unfinished body is charged to the
//! server-wide [`InflightBudget`]. When that is spent the put is answered `OUT_OF_MEMORY`
//! at once and the rest of its body skipped as it arrives, so many connections declaring
//! huge bodies cannot make the server allocate what they declare.

use std::sync::Arc;

use bytes::{Buf, Bytes, BytesMut};
use jobyard_broker::budget::{BodyCharge, InflightBudget};

use crate::command::{parse_line, put_size, Command, ParseError, MAX_LINE};

/// One unit of work for the session, in arrival order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Request {
    /// Any command but put.
    Command(Command),
    /// A put with its whole body.
    Put {
        pri: u32,
        delay: u32,
        ttr: u32,
        body: Bytes,
    },
    /// A put that failed on the wire; counts as a put in stats.
    PutRejected(&'static [u8]),
    /// A line that is not a valid command.
    Invalid(ParseError),
}

/// A read buffer left empty by a body, with more room than this, is let go.
const SHRINK_ABOVE: usize = 256 << 10;

/// A put body not followed by CRLF right after its declared size.
pub const EXPECTED_CRLF: &[u8] = b"EXPECTED_CRLF\r\n";
/// A put body declared larger than the job size limit.
pub const JOB_TOO_BIG: &[u8] = b"JOB_TOO_BIG\r\n";
/// The server's budget for bodies in flight is spent (beanstalkd's reply when it cannot
/// allocate a job; also when the log has no room for new jobs).
pub const OUT_OF_MEMORY: &[u8] = b"OUT_OF_MEMORY\r\n";

#[derive(Clone, Copy, Debug)]
enum State {
    Line,
    /// Reading a put body of `len` bytes plus CRLF.
    Body {
        pri: u32,
        delay: u32,
        ttr: u32,
        len: usize,
    },
    /// Throwing away a body (and its CRLF), then answering `reply` if there is one.
    SkipBody {
        left: usize,
        reply: Option<&'static [u8]>,
    },
    /// Throwing away an overlong line up to its CRLF.
    DiscardLine,
}

/// The incremental decoder of one connection.
#[derive(Debug)]
pub struct Decoder {
    state: State,
    max_job_size: u32,
    /// What the body being read holds of the server-wide budget.
    charge: BodyCharge,
}

impl jobyard_net::Decode for Decoder {
    type Request = Request;
    fn decode(&mut self, buf: &mut BytesMut) -> Option<Request> {
        Decoder::decode(self, buf)
    }
}

impl Decoder {
    /// A decoder with a budget of its own that never runs out (tests, fuzzing).
    pub fn new(max_job_size: u32) -> Self {
        Decoder::with_budget(max_job_size, InflightBudget::unlimited())
    }

    /// A decoder whose unfinished bodies are charged to `budget`, shared by all
    /// connections.
    pub fn with_budget(max_job_size: u32, budget: Arc<InflightBudget>) -> Self {
        Decoder {
            state: State::Line,
            max_job_size,
            charge: BodyCharge::new(budget),
        }
    }

    /// Takes the next complete request from `buf`, or `None` if more bytes are needed.
    /// Consumes exactly the bytes that belong to what it returns or discards.
    pub fn decode(&mut self, buf: &mut BytesMut) -> Option<Request> {
        loop {
            match self.state {
                State::Line => {
                    let window = &buf[..buf.len().min(MAX_LINE)];
                    let Some(end) = find_crlf(window) else {
                        if buf.len() >= MAX_LINE {
                            self.state = State::DiscardLine;
                            continue;
                        }
                        return None;
                    };
                    // Parsed in place, then skipped: nothing of the line outlives it (names
                    // are copied), and splitting it off would share the buffer for nothing.
                    let line = &buf[..end];
                    let parsed = parse_line(line);
                    let too_big = match parsed {
                        Err(ParseError::BadFormat) => put_size(line)
                            .filter(|&n| n > self.max_job_size)
                            .map(|n| n as usize),
                        _ => None,
                    };
                    buf.advance(end + 2);
                    match (parsed, too_big) {
                        (
                            Ok(Command::Put {
                                pri,
                                delay,
                                ttr,
                                bytes,
                            }),
                            _,
                        ) => {
                            let len = bytes as usize;
                            self.state = if bytes > self.max_job_size {
                                State::SkipBody {
                                    left: len + 2,
                                    reply: Some(JOB_TOO_BIG),
                                }
                            } else {
                                State::Body {
                                    pri,
                                    delay,
                                    ttr,
                                    len,
                                }
                            };
                        }
                        (Ok(command), _) => return Some(Request::Command(command)),
                        (Err(_), Some(n)) => {
                            self.state = State::SkipBody {
                                left: n + 2,
                                reply: Some(JOB_TOO_BIG),
                            };
                        }
                        (Err(e), None) => return Some(Request::Invalid(e)),
                    }
                }
                State::Body {
                    pri,
                    delay,
                    ttr,
                    len,
                } => {
                    if buf.len() < len + 2 {
                        // Only a body that must wait for more bytes is charged: one that
                        // arrived whole (the usual case) costs the budget nothing.
                        if !self.charge.hold(buf.len() as u64) {
                            // Answered at once, so the client need not send the rest to
                            // learn it; the rest is still skipped to keep the stream.
                            self.charge.release();
                            let have = buf.len();
                            buf.advance(have);
                            self.state = State::SkipBody {
                                left: len + 2 - have,
                                reply: None,
                            };
                            return Some(Request::PutRejected(OUT_OF_MEMORY));
                        }
                        return None;
                    }
                    self.charge.release();
                    self.state = State::Line;
                    // A copy, not a slice of the read buffer: a stored job must not keep
                    // a whole read buffer alive.
                    let body = Bytes::copy_from_slice(&buf[..len]);
                    let crlf_ok = &buf[len..len + 2] == b"\r\n";
                    buf.advance(len + 2);
                    if buf.is_empty() && buf.capacity() > SHRINK_ABOVE {
                        // Do not keep a large body's buffer for an idle connection: the
                        // budget counts bodies being received, not memory kept afterwards.
                        *buf = BytesMut::new();
                    }
                    return Some(if crlf_ok {
                        Request::Put {
                            pri,
                            delay,
                            ttr,
                            body,
                        }
                    } else {
                        Request::PutRejected(EXPECTED_CRLF)
                    });
                }
                State::SkipBody { left, reply } => {
                    let n = left.min(buf.len());
                    buf.advance(n);
                    if n < left {
                        self.state = State::SkipBody {
                            left: left - n,
                            reply,
                        };
                        return None;
                    }
                    self.state = State::Line;
                    match reply {
                        Some(reply) => return Some(Request::PutRejected(reply)),
                        None => continue,
                    }
                }
                State::DiscardLine => match find_crlf(buf) {
                    Some(end) => {
                        buf.advance(end + 2);
                        self.state = State::Line;
                        return Some(Request::Invalid(ParseError::BadFormat));
                    }
                    None => {
                        // Keep a trailing CR: its LF may be in the next read.
                        let keep = usize::from(buf.last() == Some(&b'\r'));
                        let drop = buf.len() - keep;
                        buf.advance(drop);
                        return None;
                    }
                },
            }
        }
    }
}

fn find_crlf(buf: &[u8]) -> Option<usize> {
    let mut from = 0;
    while let Some(i) = buf[from..].iter().position(|&b| b == b'\n') {
        let at = from + i;
        if at > 0 && buf[at - 1] == b'\r' {
            return Some(at - 1);
        }
        from = at + 1;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all(input: &[u8], max: u32) -> Vec<Request> {
        let mut d = Decoder::new(max);
        let mut buf = BytesMut::from(input);
        let mut out = Vec::new();
        while let Some(r) = d.decode(&mut buf) {
            out.push(r);
        }
        out
    }

    /// Feeds the input one byte at a time: every split of a command must work.
    fn bytewise(input: &[u8], max: u32) -> Vec<Request> {
        let mut d = Decoder::new(max);
        let mut buf = BytesMut::new();
        let mut out = Vec::new();
        for &b in input {
            buf.extend_from_slice(&[b]);
            while let Some(r) = d.decode(&mut buf) {
                out.push(r);
            }
        }
        out
    }

    fn put(body: &'static [u8]) -> Request {
        Request::Put {
            pri: 1,
            delay: 0,
            ttr: 5,
            body: Bytes::from_static(body),
        }
    }

    #[test]
    fn bodies_are_read_by_size_whatever_they_contain() {
        let input = b"put 1 0 5 6\r\na\r\nb\0c\r\nput 1 0 5 0\r\n\r\nstats\r\n";
        let want = vec![
            put(b"a\r\nb\0c"),
            put(b""),
            Request::Command(Command::Stats),
        ];
        assert_eq!(all(input, 65535), want);
        assert_eq!(bytewise(input, 65535), want);
    }

    #[test]
    fn a_body_without_crlf_is_expected_crlf_and_exactly_n_plus_2_bytes_are_eaten() {
        let input = b"put 1 0 5 3\r\nabcXYstats\r\n";
        assert_eq!(
            all(input, 100),
            vec![
                Request::PutRejected(EXPECTED_CRLF),
                Request::Command(Command::Stats)
            ]
        );
    }

    #[test]
    fn a_body_of_exactly_the_limit_is_accepted_and_one_more_is_too_big() {
        let ok = all(b"put 1 0 5 4\r\nabcd\r\n", 4);
        assert!(matches!(ok[0], Request::Put { .. }));
        let input = b"put 1 0 5 5\r\nabcde\r\nstats\r\n";
        let want = vec![
            Request::PutRejected(JOB_TOO_BIG),
            Request::Command(Command::Stats),
        ];
        assert_eq!(all(input, 4), want);
        assert_eq!(bytewise(input, 4), want);
    }

    #[test]
    fn job_too_big_wins_over_trailing_junk() {
        let input = b"put 1 0 5 5 junk\r\nabcde\r\nstats\r\n";
        assert_eq!(all(input, 4)[0], Request::PutRejected(JOB_TOO_BIG));
        assert_eq!(all(input, 4).len(), 2);
    }

    #[test]
    fn a_bad_put_line_does_not_eat_the_body() {
        let input = b"put 1 0 5 x\r\nstats\r\n";
        assert_eq!(
            all(input, 100),
            vec![
                Request::Invalid(ParseError::BadFormat),
                Request::Command(Command::Stats)
            ]
        );
    }

    #[test]
    fn overlong_lines_are_bad_format_and_the_next_command_still_works() {
        for len in [222usize, 223, 224, 225, 300, 5000] {
            let mut input = vec![b'x'; len];
            input.extend_from_slice(b"\r\nstats\r\n");
            let got = bytewise(&input, 100);
            let first = if len + 2 <= MAX_LINE {
                Request::Invalid(ParseError::UnknownCommand)
            } else {
                Request::Invalid(ParseError::BadFormat)
            };
            assert_eq!(
                got,
                vec![first, Request::Command(Command::Stats)],
                "len {len}"
            );
        }
    }

    #[test]
    fn a_stray_cr_does_not_stall_the_line() {
        let got = all(b"sta\rts\r\nstats\r\n", 100);
        assert_eq!(
            got,
            vec![
                Request::Invalid(ParseError::UnknownCommand),
                Request::Command(Command::Stats)
            ]
        );
    }

    #[test]
    fn a_bare_lf_does_not_end_a_line() {
        assert_eq!(all(b"stats\n", 100), vec![]);
    }

    #[test]
    fn a_declared_size_reserves_nothing_before_the_body_arrives() {
        let mut d = Decoder::new(1 << 30);
        let mut buf = BytesMut::from(&b"put 1 0 5 1073741824\r\nabc"[..]);
        assert_eq!(d.decode(&mut buf), None);
        assert!(
            buf.capacity() < 1 << 20,
            "capacity {} for 3 bytes of a 1 GiB body",
            buf.capacity()
        );
    }

    #[test]
    fn a_spent_budget_skips_the_body_and_answers_out_of_memory() {
        let budget = InflightBudget::new(10);
        let mut hog = Decoder::with_budget(100, budget.clone());
        let mut hog_buf = BytesMut::from(&b"put 1 0 5 8\r\nabcdef"[..]);
        assert_eq!(hog.decode(&mut hog_buf), None);
        assert_eq!(budget.in_use(), 6);
        // Another connection's body does not fit beside it: refused once it has passed.
        let mut d = Decoder::with_budget(100, budget.clone());
        let input = b"put 1 0 5 6\r\n123456\r\nstats\r\n";
        let mut buf = BytesMut::new();
        let mut got = Vec::new();
        for &b in input.iter() {
            buf.extend_from_slice(&[b]);
            while let Some(r) = d.decode(&mut buf) {
                got.push(r);
            }
        }
        assert_eq!(
            got,
            vec![
                Request::PutRejected(OUT_OF_MEMORY),
                Request::Command(Command::Stats)
            ]
        );
        assert_eq!(budget.in_use(), 6, "the refused body holds nothing");
        // The first body completes and gives its share back; a closed connection too.
        hog_buf.extend_from_slice(b"gh\r\n");
        assert!(matches!(
            hog.decode(&mut hog_buf),
            Some(Request::Put { .. })
        ));
        assert_eq!(budget.in_use(), 0);
        let mut buf = BytesMut::from(&b"put 1 0 5 6\r\n1234"[..]);
        assert_eq!(d.decode(&mut buf), None);
        assert_eq!(budget.in_use(), 4);
        drop(d);
        assert_eq!(budget.in_use(), 0);
    }

    #[test]
    fn memory_stays_bounded_while_discarding() {
        let mut d = Decoder::new(100);
        let mut buf = BytesMut::new();
        for _ in 0..1000 {
            buf.extend_from_slice(&[b'y'; 4096]);
            assert_eq!(d.decode(&mut buf), None);
            assert!(buf.len() <= MAX_LINE);
        }
        buf.extend_from_slice(b"\r\n");
        assert_eq!(
            d.decode(&mut buf),
            Some(Request::Invalid(ParseError::BadFormat))
        );
    }
}

/// The fuzz target's property on a stable compiler: many pseudo-random inputs (mutated
/// valid commands and raw noise), split at random points, never panic the decoder and
/// never make it buffer more than a line or a body.
#[cfg(test)]
mod randomized {
    use super::*;

    /// xorshift: deterministic, so a failure reproduces.
    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }
        fn below(&mut self, n: usize) -> usize {
            (self.next() % n as u64) as usize
        }
    }

    const SEEDS: &[&[u8]] = &[
        b"put 0 0 1 5\r\nhello\r\n",
        b"put 4294967295 0 0 100\r\n",
        b"reserve-with-timeout 0\r\n",
        b"pause-tube default 1\r\n",
        b"release 1 2 3\r\n",
        b"use tube\r\n",
        b"stats\r\n",
        b"\r\n",
        b"\r",
        b"\n",
        b"\0",
    ];

    #[test]
    fn random_and_mutated_input_never_panics_or_overbuffers() {
        const MAX_JOB: u32 = 300;
        let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
        for _ in 0..3000 {
            let mut input = Vec::new();
            for _ in 0..rng.below(20) {
                if rng.below(4) == 0 {
                    let n = rng.below(400);
                    input.extend((0..n).map(|_| rng.next() as u8));
                } else {
                    let mut piece = SEEDS[rng.below(SEEDS.len())].to_vec();
                    if !piece.is_empty() && rng.below(2) == 0 {
                        let at = rng.below(piece.len());
                        piece[at] = rng.next() as u8;
                    }
                    input.extend_from_slice(&piece);
                }
            }
            // Every other input runs against a small shared budget: refusals must keep
            // the stream in step as well.
            let budget = InflightBudget::new(if rng.below(2) == 0 { 150 } else { u64::MAX });
            let mut decoder = Decoder::with_budget(MAX_JOB, budget.clone());
            let mut buf = BytesMut::new();
            let mut rest = &input[..];
            while !rest.is_empty() {
                let n = (rng.below(50) + 1).min(rest.len());
                buf.extend_from_slice(&rest[..n]);
                rest = &rest[n..];
                while decoder.decode(&mut buf).is_some() {}
                assert!(buf.len() <= MAX_LINE.max(MAX_JOB as usize + 2) + 50);
            }
            drop(decoder);
            assert_eq!(budget.in_use(), 0, "everything held is given back");
        }
    }
}
