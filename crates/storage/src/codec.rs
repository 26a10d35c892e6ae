//! Byte layout of log records. Decoding is bounded and total: any input gives a change or
//! an error, never a panic (a fuzz target holds it to that).

use bytes::{BufMut, Bytes};
use jobyard_engine::{Change, PutState};

const PUT: u8 = 1;
const DELETE: u8 = 2;
const RELEASE: u8 = 3;
const BURY: u8 = 4;
const KICK: u8 = 5;
const NO_UNIQUE: u16 = u16::MAX;

/// Frame header: payload length then CRC-32 of the payload.
pub(crate) const FRAME_HEADER: usize = 8;

/// Largest payload accepted when reading: a 1 GiB body plus the fixed fields and a name.
pub(crate) const MAX_PAYLOAD: usize = (1 << 30) + 4096;

/// Why a payload could not be decoded.
#[derive(Debug, PartialEq, Eq)]
pub enum DecodeError {
    Truncated,
    UnknownType(u8),
    BadState(u8),
    TrailingBytes,
}

impl std::fmt::Display for DecodeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DecodeError::Truncated => write!(f, "record is shorter than its fields"),
            DecodeError::UnknownType(t) => write!(f, "unknown record type {t}"),
            DecodeError::BadState(s) => write!(f, "unknown job state {s}"),
            DecodeError::TrailingBytes => write!(f, "bytes left over after the record"),
        }
    }
}

/// Appends one framed record (header and payload) to `out`.
pub fn encode_change(change: &Change, out: &mut Vec<u8>) {
    let start = out.len();
    out.extend_from_slice(&[0; FRAME_HEADER]);
    encode_payload(change, out);
    let payload = &out[start + FRAME_HEADER..];
    let len = payload.len() as u32;
    let crc = crc32fast::hash(payload);
    out[start..start + 4].copy_from_slice(&len.to_le_bytes());
    out[start + 4..start + 8].copy_from_slice(&crc.to_le_bytes());
}

fn encode_payload(change: &Change, out: &mut Vec<u8>) {
    match change {
        Change::Put {
            id,
            queue,
            pri,
            ttr,
            delay,
            created,
            state,
            unique,
            body,
        } => {
            out.put_u8(PUT);
            out.put_u64_le(*id);
            out.put_u32_le(*pri);
            out.put_u32_le(*ttr);
            out.put_u32_le(*delay);
            out.put_u64_le(*created);
            let (tag, at) = match state {
                PutState::Ready => (0, 0),
                PutState::Delayed(at) => (1, *at),
                PutState::Buried => (2, 0),
            };
            out.put_u8(tag);
            out.put_u64_le(at);
            out.put_u16_le(queue.len() as u16);
            out.extend_from_slice(queue);
            // Unique keys are at most a few hundred bytes; 0xFFFF means "none".
            match unique {
                Some(key) => {
                    out.put_u16_le(key.len() as u16);
                    out.extend_from_slice(key);
                }
                None => out.put_u16_le(NO_UNIQUE),
            }
            out.put_u32_le(body.len() as u32);
            out.extend_from_slice(body);
        }
        Change::Delete { id } => {
            out.put_u8(DELETE);
            out.put_u64_le(*id);
        }
        Change::Release { id, pri, ready_at } => {
            out.put_u8(RELEASE);
            out.put_u64_le(*id);
            out.put_u32_le(*pri);
            out.put_u64_le(*ready_at);
        }
        Change::Bury { id, pri } => {
            out.put_u8(BURY);
            out.put_u64_le(*id);
            out.put_u32_le(*pri);
        }
        Change::Kick { id } => {
            out.put_u8(KICK);
            out.put_u64_le(*id);
        }
    }
}

/// A bounds-checked cursor over a payload.
struct Reader<'a> {
    buf: &'a [u8],
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], DecodeError> {
        if self.buf.len() < n {
            return Err(DecodeError::Truncated);
        }
        let (head, rest) = self.buf.split_at(n);
        self.buf = rest;
        Ok(head)
    }
    fn u8(&mut self) -> Result<u8, DecodeError> {
        Ok(self.take(1)?[0])
    }
    fn u16(&mut self) -> Result<u16, DecodeError> {
        Ok(u16::from_le_bytes(self.take(2)?.try_into().expect("2 bytes")))
    }
    fn u32(&mut self) -> Result<u32, DecodeError> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into().expect("4 bytes")))
    }
    fn u64(&mut self) -> Result<u64, DecodeError> {
        Ok(u64::from_le_bytes(self.take(8)?.try_into().expect("8 bytes")))
    }
}

/// Decodes one payload (without its frame header).
pub fn decode_change(payload: &[u8]) -> Result<Change, DecodeError> {
    let mut r = Reader { buf: payload };
    let change = match r.u8()? {
        PUT => {
            let id = r.u64()?;
            let pri = r.u32()?;
            let ttr = r.u32()?;
            let delay = r.u32()?;
            let created = r.u64()?;
            let tag = r.u8()?;
            let at = r.u64()?;
            let state = match tag {
                0 => PutState::Ready,
                1 => PutState::Delayed(at),
                2 => PutState::Buried,
                other => return Err(DecodeError::BadState(other)),
            };
            let qlen = r.u16()? as usize;
            let queue = Bytes::copy_from_slice(r.take(qlen)?);
            let unique = match r.u16()? {
                NO_UNIQUE => None,
                ulen => Some(Bytes::copy_from_slice(r.take(ulen as usize)?)),
            };
            let blen = r.u32()? as usize;
            let body = Bytes::copy_from_slice(r.take(blen)?);
            Change::Put {
                id,
                queue,
                pri,
                ttr,
                delay,
                created,
                state,
                unique,
                body,
            }
        }
        DELETE => Change::Delete { id: r.u64()? },
        RELEASE => Change::Release {
            id: r.u64()?,
            pri: r.u32()?,
            ready_at: r.u64()?,
        },
        BURY => Change::Bury {
            id: r.u64()?,
            pri: r.u32()?,
        },
        KICK => Change::Kick { id: r.u64()? },
        other => return Err(DecodeError::UnknownType(other)),
    };
    if !r.buf.is_empty() {
        return Err(DecodeError::TrailingBytes);
    }
    Ok(change)
}

/// What reading one frame at an offset found.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Frame<'a> {
    /// A whole frame whose checksum matches: its payload and total size.
    Good(&'a [u8], usize),
    /// The buffer ends before the frame does.
    Incomplete,
    /// The length is impossible or the checksum does not match.
    Bad,
}

/// Reads the frame starting at the beginning of `buf`.
pub(crate) fn read_frame(buf: &[u8]) -> Frame<'_> {
    if buf.len() < FRAME_HEADER {
        return Frame::Incomplete;
    }
    let len = u32::from_le_bytes(buf[0..4].try_into().expect("4 bytes")) as usize;
    let crc = u32::from_le_bytes(buf[4..8].try_into().expect("4 bytes"));
    if len == 0 || len > MAX_PAYLOAD {
        return Frame::Bad;
    }
    if buf.len() < FRAME_HEADER + len {
        return Frame::Incomplete;
    }
    let payload = &buf[FRAME_HEADER..FRAME_HEADER + len];
    if crc32fast::hash(payload) != crc {
        return Frame::Bad;
    }
    Frame::Good(payload, FRAME_HEADER + len)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn samples() -> Vec<Change> {
        vec![
            Change::Put {
                id: 7,
                queue: Bytes::from_static(b"emails"),
                pri: 1024,
                ttr: 60,
                delay: 5,
                created: 1_700_000_000_000,
                state: PutState::Delayed(1_700_000_005_000),
                unique: Some(Bytes::from_static(b"order-17")),
                body: Bytes::from_static(b"hello\r\nworld\0"),
            },
            Change::Put {
                id: 8,
                queue: Bytes::from_static(b"x"),
                pri: 0,
                ttr: 1,
                delay: 0,
                created: 1,
                state: PutState::Buried,
                unique: None,
                body: Bytes::new(),
            },
            Change::Delete { id: u64::MAX },
            Change::Release {
                id: 3,
                pri: 9,
                ready_at: 0,
            },
            Change::Bury { id: 4, pri: 10 },
            Change::Kick { id: 5 },
        ]
    }

    #[test]
    fn every_change_round_trips_through_a_frame() {
        for change in samples() {
            let mut buf = Vec::new();
            encode_change(&change, &mut buf);
            let Frame::Good(payload, size) = read_frame(&buf) else {
                panic!("frame not readable")
            };
            assert_eq!(size, buf.len());
            assert_eq!(decode_change(payload).unwrap(), change);
        }
    }

    #[test]
    fn a_flipped_bit_is_caught_by_the_checksum() {
        let mut buf = Vec::new();
        encode_change(&samples()[0], &mut buf);
        buf[20] ^= 1;
        assert_eq!(read_frame(&buf), Frame::Bad);
    }

    #[test]
    fn a_cut_frame_is_incomplete_and_every_truncated_payload_is_an_error() {
        let mut buf = Vec::new();
        encode_change(&samples()[0], &mut buf);
        for cut in 0..buf.len() {
            assert_eq!(read_frame(&buf[..cut]), Frame::Incomplete, "cut at {cut}");
        }
        let payload = &buf[FRAME_HEADER..];
        for cut in 0..payload.len() {
            assert!(decode_change(&payload[..cut]).is_err());
        }
    }

    #[test]
    fn unknown_types_states_and_trailing_bytes_are_errors() {
        assert_eq!(decode_change(&[99]), Err(DecodeError::UnknownType(99)));
        let mut kick = vec![KICK];
        kick.extend_from_slice(&1u64.to_le_bytes());
        kick.push(0);
        assert_eq!(decode_change(&kick), Err(DecodeError::TrailingBytes));
        let mut buf = Vec::new();
        encode_change(&samples()[1], &mut buf);
        buf[FRAME_HEADER + 1 + 8 + 12 + 8] = 7; // state tag
        assert_eq!(
            decode_change(&buf[FRAME_HEADER..]),
            Err(DecodeError::BadState(7))
        );
    }
}
