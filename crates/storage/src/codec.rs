//! Byte layout of log records. Decoding is bounded and total: any input gives a change or
//! an error, never a panic (a fuzz target holds it to that).

mod retry_records;

use bytes::{BufMut, Bytes};
use jobyard_engine::{
    Change, EndStatus, JobEnd, MissedTicks, Overlap, Pause, PutState, QueuePolicy, RateLimit,
    Schedule, Timing,
};

const PUT: u8 = 1;
const DELETE: u8 = 2;
const RELEASE: u8 = 3;
const BURY: u8 = 4;
const KICK: u8 = 5;
/// A `PUT` whose queue name or unique key is too long for a u16 length: the same fields
/// with u32 lengths. Only used when needed, so every record a `PUT` could hold keeps its
/// old bytes and old logs read as before.
const PUT_WIDE: u8 = 6;
/// A `PUT` that carries what older records cannot: attributes and a fenced attempt
/// number. Always with u32 lengths. Used only when a job has either, so every other put
/// keeps the bytes it always had.
const PUT_EXT: u8 = 7;
/// A job's end with an outcome (status, result, error, exit code, signal).
const END: u8 = 8;
/// A leased job's fenced attempt number.
const ATTEMPT: u8 = 9;
/// The last record of a segment that has a successor: names it, so recovery can tell a
/// newest segment that was removed or cut to nothing from one that never existed. Not a
/// [`Change`]: [`decode_change`] rejects it, recovery reads it with [`decode_segment_end`].
const SEGMENT_END: u8 = 0xE0;
/// A leased job moved to another queue (the next stage of a multi-stage job).
const ROUTE: u8 = 10;
/// A flow transition or definition: opaque bytes the engine encodes (`flows::FlowChange`).
const FLOW: u8 = 11;
/// A queue's whole policy (lease limit, pause, rate limit). A policy that gains fields gets
/// a record type of its own, as `PUT_EXT` did, so this one's bytes never change meaning.
const POLICY: u8 = 12;
/// A periodic job's schedule as it now stands, with its last tick, or its deletion.
const SCHEDULE: u8 = 13;
/// A queue's whole policy with a retry part: the `POLICY` fields, then the retry policy.
const POLICY_RETRY: u8 = 14;
/// A job's failure history under a retry policy, whole, or its forgetting.
const FAILURES: u8 = 15;
const NO_UNIQUE: u16 = u16::MAX;
const NO_UNIQUE_WIDE: u32 = u32::MAX;

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
    BadStatus(u8),
    TrailingBytes,
}

impl std::fmt::Display for DecodeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DecodeError::Truncated => write!(f, "record is shorter than its fields"),
            DecodeError::UnknownType(t) => write!(f, "unknown record type {t}"),
            DecodeError::BadState(s) => write!(f, "unknown job state {s}"),
            DecodeError::BadStatus(s) => write!(f, "unknown end status {s}"),
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

/// Appends the framed record that closes a segment whose successor is segment `next`.
pub(crate) fn encode_segment_end(next: u64, out: &mut Vec<u8>) {
    let start = out.len();
    out.extend_from_slice(&[0; FRAME_HEADER]);
    out.put_u8(SEGMENT_END);
    out.put_u64_le(next);
    let payload = &out[start + FRAME_HEADER..];
    let (len, crc) = (payload.len() as u32, crc32fast::hash(payload));
    out[start..start + 4].copy_from_slice(&len.to_le_bytes());
    out[start + 4..start + 8].copy_from_slice(&crc.to_le_bytes());
}

/// The successor named by a segment-end payload, or `None` if the payload is not one.
pub(crate) fn decode_segment_end(payload: &[u8]) -> Option<u64> {
    match payload {
        [SEGMENT_END, next @ ..] if next.len() == 8 => {
            Some(u64::from_le_bytes(next.try_into().expect("8 bytes")))
        }
        _ => None,
    }
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
            attrs,
            attempt,
            body,
        } => {
            // Lengths used to be written `as u16` unconditionally: a queue name longer than
            // 65535 bytes (a Gearman function name can be: only the packet size bounds it)
            // or a unique key of 65535+ bytes (65535 is the "none" marker) made a record
            // whose checksum was right but whose fields could not be read back, so the
            // next start failed with "corrupt record" (or, as the last record, silently
            // dropped the job as a torn tail). Such puts now use the wide record.
            let ext = attrs.is_some() || *attempt > 0;
            let wide = ext
                || queue.len() > u16::MAX as usize
                || unique
                    .as_ref()
                    .is_some_and(|k| k.len() >= NO_UNIQUE as usize);
            out.put_u8(if ext {
                PUT_EXT
            } else if wide {
                PUT_WIDE
            } else {
                PUT
            });
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
            if wide {
                out.put_u32_le(queue.len() as u32);
            } else {
                out.put_u16_le(queue.len() as u16);
            }
            out.extend_from_slice(queue);
            // 0xFFFF (0xFFFFFFFF in the wide record) means "no unique key".
            match (unique, wide) {
                (Some(key), false) => out.put_u16_le(key.len() as u16),
                (Some(key), true) => out.put_u32_le(key.len() as u32),
                (None, false) => out.put_u16_le(NO_UNIQUE),
                (None, true) => out.put_u32_le(NO_UNIQUE_WIDE),
            }
            if let Some(key) = unique {
                out.extend_from_slice(key);
            }
            if ext {
                out.put_u32_le(*attempt);
                put_opt_bytes(out, attrs.as_deref());
            }
            out.put_u32_le(body.len() as u32);
            out.extend_from_slice(body);
        }
        Change::Delete { id } => {
            out.put_u8(DELETE);
            out.put_u64_le(*id);
        }
        Change::End { id, end } => {
            out.put_u8(END);
            out.put_u64_le(*id);
            out.put_u8(match end.status {
                EndStatus::Deleted => 0,
                EndStatus::Ok => 1,
                EndStatus::Failed => 2,
            });
            put_opt_i32(out, end.exit_code);
            put_opt_i32(out, end.signal);
            put_opt_bytes(out, Some(&end.result));
            put_opt_bytes(out, end.error.as_deref());
        }
        Change::Attempt { id, attempt } => {
            out.put_u8(ATTEMPT);
            out.put_u64_le(*id);
            out.put_u32_le(*attempt);
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
        Change::Route {
            id,
            queue,
            pri,
            attrs,
        } => {
            out.put_u8(ROUTE);
            out.put_u64_le(*id);
            out.put_u32_le(*pri);
            put_opt_bytes(out, Some(queue));
            put_opt_bytes(out, attrs.as_deref());
        }
        Change::Flow(bytes) => {
            out.put_u8(FLOW);
            put_opt_bytes(out, Some(bytes));
        }
        Change::Policy { queue, policy } if policy.retry.is_some() => {
            retry_records::encode_retry_policy(queue, policy, out)
        }
        Change::Policy { queue, policy } => encode_policy(queue, policy, out),
        Change::Failures { id, history } => {
            retry_records::encode_failures(*id, history.as_deref(), out)
        }
        Change::Schedule { name, schedule } => encode_schedule(name, schedule.as_deref(), out),
    }
}

/// The schedule's name, then 0 (deleted) or 1 and the schedule: queue, body, priority,
/// TTR, timing (0 and the cron expression and time zone, or 1 and the interval's text),
/// overlap (0 allow, 1 skip), missed ticks (0 skip, 1 catch up), paused, last tick and
/// last job.
fn encode_schedule(name: &[u8], schedule: Option<&Schedule>, out: &mut Vec<u8>) {
    out.put_u8(SCHEDULE);
    put_opt_bytes(out, Some(name));
    let Some(s) = schedule else {
        out.put_u8(0);
        return;
    };
    out.put_u8(1);
    put_opt_bytes(out, Some(&s.queue));
    put_opt_bytes(out, Some(&s.body));
    out.put_u32_le(s.pri);
    out.put_u32_le(s.ttr);
    match &s.timing {
        Timing::Cron { expr, time_zone } => {
            out.put_u8(0);
            put_opt_bytes(out, Some(expr.as_bytes()));
            put_opt_bytes(out, Some(time_zone.as_bytes()));
        }
        Timing::Interval(text) => {
            out.put_u8(1);
            put_opt_bytes(out, Some(text.as_bytes()));
        }
    }
    out.put_u8(match s.overlap {
        Overlap::Allow => 0,
        Overlap::Skip => 1,
    });
    out.put_u8(match s.missed {
        MissedTicks::Skip => 0,
        MissedTicks::CatchUp => 1,
    });
    out.put_u8(s.paused as u8);
    out.put_u64_le(s.last_tick);
    out.put_u64_le(s.last_job);
}

fn decode_schedule(r: &mut Reader<'_>) -> Result<Change, DecodeError> {
    let name = Bytes::copy_from_slice(r.opt_bytes()?.ok_or(DecodeError::Truncated)?);
    let schedule = match r.u8()? {
        0 => None,
        1 => Some(Box::new(decode_schedule_body(r, name.clone())?)),
        other => return Err(DecodeError::BadState(other)),
    };
    Ok(Change::Schedule { name, schedule })
}

fn decode_schedule_body(r: &mut Reader<'_>, name: Bytes) -> Result<Schedule, DecodeError> {
    let queue = Bytes::copy_from_slice(r.opt_bytes()?.ok_or(DecodeError::Truncated)?);
    let body = Bytes::copy_from_slice(r.opt_bytes()?.ok_or(DecodeError::Truncated)?);
    let (pri, ttr) = (r.u32()?, r.u32()?);
    let timing = match r.u8()? {
        0 => Timing::Cron {
            expr: r.text()?,
            time_zone: r.text()?,
        },
        1 => Timing::Interval(r.text()?),
        other => return Err(DecodeError::BadState(other)),
    };
    let overlap = match r.u8()? {
        0 => Overlap::Allow,
        1 => Overlap::Skip,
        other => return Err(DecodeError::BadState(other)),
    };
    let missed = match r.u8()? {
        0 => MissedTicks::Skip,
        1 => MissedTicks::CatchUp,
        other => return Err(DecodeError::BadState(other)),
    };
    let paused = match r.u8()? {
        0 => false,
        1 => true,
        other => return Err(DecodeError::BadState(other)),
    };
    Ok(Schedule {
        name,
        queue,
        body,
        pri,
        ttr,
        timing,
        overlap,
        missed,
        paused,
        last_tick: r.u64()?,
        last_job: r.u64()?,
    })
}

/// The queue's name, its lease limit, its pause (kind 0 off, 1 until a time, 2 for ever;
/// then the end time and the seconds asked for) and its rate limit (count per
/// milliseconds; a count of 0 is none).
fn encode_policy(queue: &[u8], policy: &QueuePolicy, out: &mut Vec<u8>) {
    out.put_u8(POLICY);
    put_opt_bytes(out, Some(queue));
    out.put_u32_le(policy.lease_limit);
    let (kind, at, secs) = match policy.pause {
        Pause::Off => (0, 0, 0),
        Pause::Until { at, secs } => (1, at, secs),
        Pause::Forever => (2, 0, 0),
    };
    out.put_u8(kind);
    out.put_u64_le(at);
    out.put_u32_le(secs);
    let (count, per_ms) = policy.rate_limit.map_or((0, 0), |r| (r.count, r.per_ms));
    out.put_u32_le(count);
    out.put_u64_le(per_ms);
}

fn decode_policy(r: &mut Reader<'_>) -> Result<Change, DecodeError> {
    let queue = r.opt_bytes()?.ok_or(DecodeError::Truncated)?;
    let lease_limit = r.u32()?;
    let (kind, at, secs) = (r.u8()?, r.u64()?, r.u32()?);
    let pause = match kind {
        0 => Pause::Off,
        1 => Pause::Until { at, secs },
        2 => Pause::Forever,
        other => return Err(DecodeError::BadState(other)),
    };
    let (count, per_ms) = (r.u32()?, r.u64()?);
    let rate_limit = match count {
        0 => None,
        _ => Some(RateLimit::new(count, per_ms).ok_or(DecodeError::BadState(0))?),
    };
    Ok(Change::Policy {
        queue: Bytes::copy_from_slice(queue),
        policy: QueuePolicy {
            lease_limit,
            pause,
            rate_limit,
            retry: None,
        },
    })
}

/// Optional bytes: a u32 length (`u32::MAX` = none), then the bytes.
fn put_opt_bytes(out: &mut Vec<u8>, bytes: Option<&[u8]>) {
    match bytes {
        Some(b) => {
            out.put_u32_le(b.len() as u32);
            out.extend_from_slice(b);
        }
        None => out.put_u32_le(NO_UNIQUE_WIDE),
    }
}

/// An optional i32: a presence byte, then the value if present.
fn put_opt_i32(out: &mut Vec<u8>, v: Option<i32>) {
    match v {
        Some(v) => {
            out.put_u8(1);
            out.put_i32_le(v);
        }
        None => out.put_u8(0),
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
        Ok(u16::from_le_bytes(
            self.take(2)?.try_into().expect("2 bytes"),
        ))
    }
    fn u32(&mut self) -> Result<u32, DecodeError> {
        Ok(u32::from_le_bytes(
            self.take(4)?.try_into().expect("4 bytes"),
        ))
    }
    fn u64(&mut self) -> Result<u64, DecodeError> {
        Ok(u64::from_le_bytes(
            self.take(8)?.try_into().expect("8 bytes"),
        ))
    }
    /// Text written with `put_opt_bytes`: present and UTF-8 (a schedule's timing).
    fn text(&mut self) -> Result<String, DecodeError> {
        let bytes = self.opt_bytes()?.ok_or(DecodeError::Truncated)?;
        String::from_utf8(bytes.to_vec()).map_err(|_| DecodeError::BadState(0))
    }

    fn opt_bytes(&mut self) -> Result<Option<&'a [u8]>, DecodeError> {
        match self.u32()? {
            NO_UNIQUE_WIDE => Ok(None),
            len => self.take(len as usize).map(Some),
        }
    }
    fn opt_i32(&mut self) -> Result<Option<i32>, DecodeError> {
        match self.u8()? {
            0 => Ok(None),
            _ => Ok(Some(self.u32()? as i32)),
        }
    }
}

/// Decodes one payload (without its frame header).
pub fn decode_change(payload: &[u8]) -> Result<Change, DecodeError> {
    let mut r = Reader { buf: payload };
    let change = match r.u8()? {
        kind @ (PUT | PUT_WIDE | PUT_EXT) => {
            let ext = kind == PUT_EXT;
            let wide = kind != PUT;
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
            let qlen = if wide {
                r.u32()? as usize
            } else {
                r.u16()? as usize
            };
            let queue = r.take(qlen)?;
            let ulen = if wide {
                Some(r.u32()?).filter(|&l| l != NO_UNIQUE_WIDE)
            } else {
                Some(r.u16()? as u32).filter(|&l| l != NO_UNIQUE as u32)
            };
            let unique = ulen.map(|l| r.take(l as usize)).transpose()?;
            let (attempt, attrs) = if ext {
                (r.u32()?, r.opt_bytes()?)
            } else {
                (0, None)
            };
            let blen = r.u32()? as usize;
            let body = r.take(blen)?;
            // Copy only once every field is known to be there: recovery tries to decode at
            // every offset of damaged data, and a failed attempt must cost O(1), not a copy
            // of up to a whole body.
            if !r.buf.is_empty() {
                return Err(DecodeError::TrailingBytes);
            }
            Change::Put {
                id,
                queue: Bytes::copy_from_slice(queue),
                pri,
                ttr,
                delay,
                created,
                state,
                unique: unique.map(Bytes::copy_from_slice),
                attrs: attrs.map(Bytes::copy_from_slice),
                attempt,
                body: Bytes::copy_from_slice(body),
            }
        }
        DELETE => Change::Delete { id: r.u64()? },
        END => {
            let id = r.u64()?;
            let status = match r.u8()? {
                0 => EndStatus::Deleted,
                1 => EndStatus::Ok,
                2 => EndStatus::Failed,
                other => return Err(DecodeError::BadStatus(other)),
            };
            let exit_code = r.opt_i32()?;
            let signal = r.opt_i32()?;
            let result = r.opt_bytes()?.unwrap_or_default();
            let error = r.opt_bytes()?;
            if !r.buf.is_empty() {
                return Err(DecodeError::TrailingBytes);
            }
            Change::End {
                id,
                end: JobEnd {
                    status,
                    result: Bytes::copy_from_slice(result),
                    error: error.map(Bytes::copy_from_slice),
                    exit_code,
                    signal,
                },
            }
        }
        ATTEMPT => Change::Attempt {
            id: r.u64()?,
            attempt: r.u32()?,
        },
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
        ROUTE => {
            let id = r.u64()?;
            let pri = r.u32()?;
            let queue = r.opt_bytes()?.ok_or(DecodeError::Truncated)?;
            Change::Route {
                id,
                pri,
                queue: Bytes::copy_from_slice(queue),
                attrs: r.opt_bytes()?.map(Bytes::copy_from_slice),
            }
        }
        FLOW => {
            let bytes = r.opt_bytes()?.ok_or(DecodeError::Truncated)?;
            Change::Flow(Bytes::copy_from_slice(bytes))
        }
        POLICY => decode_policy(&mut r)?,
        POLICY_RETRY => retry_records::decode_retry_policy(&mut r)?,
        FAILURES => retry_records::decode_failures(&mut r)?,
        SCHEDULE => decode_schedule(&mut r)?,
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
                attrs: None,
                attempt: 0,
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
                attrs: None,
                attempt: 0,
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
            // Too long for u16 lengths: written as a wide put.
            Change::Put {
                id: 9,
                queue: Bytes::from(vec![b'f'; 70_000]),
                pri: 3,
                ttr: 4,
                delay: 0,
                created: 2,
                state: PutState::Ready,
                unique: Some(Bytes::from(vec![b'u'; 65_535])),
                attrs: None,
                attempt: 0,
                body: Bytes::from_static(b"wide"),
            },
            Change::Put {
                id: 10,
                queue: Bytes::from(vec![b'f'; 65_536]),
                pri: 3,
                ttr: 4,
                delay: 0,
                created: 2,
                state: PutState::Buried,
                unique: None,
                attrs: None,
                attempt: 0,
                body: Bytes::new(),
            },
            Change::Put {
                id: 11,
                queue: Bytes::from_static(b"flow:stage"),
                pri: 1,
                ttr: 30,
                delay: 0,
                created: 3,
                state: PutState::Ready,
                unique: None,
                attrs: Some(Bytes::from_static(b"{\"row\":1}")),
                attempt: 4,
                body: Bytes::from_static(b"ext"),
            },
            Change::End {
                id: 12,
                end: JobEnd {
                    status: EndStatus::Failed,
                    result: Bytes::from_static(b"out"),
                    error: Some(Bytes::from_static(b"err")),
                    exit_code: Some(-1),
                    signal: Some(9),
                },
            },
            Change::End {
                id: 13,
                end: JobEnd::ok(Bytes::new()),
            },
            Change::Attempt { id: 14, attempt: 7 },
            Change::Route {
                id: 15,
                queue: Bytes::from_static(b"next-stage"),
                pri: 3,
                attrs: Some(Bytes::from_static(b"{\"k\":1}")),
            },
            Change::Route {
                id: 16,
                queue: Bytes::from_static(b"q"),
                pri: 0,
                attrs: None,
            },
            Change::Flow(Bytes::from_static(b"{\"define\":{}}")),
            Change::Policy {
                queue: Bytes::from_static(b"emails"),
                policy: QueuePolicy {
                    lease_limit: 4,
                    pause: Pause::Until {
                        at: 1_700_000_060_000,
                        secs: 60,
                    },
                    rate_limit: Some("10/s".parse().unwrap()),
                    retry: None,
                },
            },
            Change::Policy {
                queue: Bytes::from_static(b"q"),
                policy: QueuePolicy {
                    pause: Pause::Forever,
                    ..QueuePolicy::default()
                },
            },
            Change::Policy {
                queue: Bytes::from_static(b"q"),
                policy: QueuePolicy::default(),
            },
            Change::Schedule {
                name: Bytes::from_static(b"nightly-report"),
                schedule: Some(Box::new(sample_schedule())),
            },
            Change::Schedule {
                name: Bytes::from_static(b"every-30s"),
                schedule: Some(Box::new(Schedule {
                    name: Bytes::from_static(b"every-30s"),
                    timing: Timing::Interval("30s".into()),
                    overlap: Overlap::Allow,
                    missed: MissedTicks::Skip,
                    paused: true,
                    ..sample_schedule()
                })),
            },
            Change::Schedule {
                name: Bytes::from_static(b"gone"),
                schedule: None,
            },
        ]
    }

    fn sample_schedule() -> Schedule {
        Schedule {
            name: Bytes::from_static(b"nightly-report"),
            queue: Bytes::from_static(b"reports"),
            body: Bytes::from_static(b"build the nightly report"),
            pri: 10,
            ttr: 120,
            timing: Timing::Cron {
                expr: "0 0 3 * * *".into(),
                time_zone: "Europe/Berlin".into(),
            },
            overlap: Overlap::Skip,
            missed: MissedTicks::CatchUp,
            paused: false,
            last_tick: 1_700_000_000_000,
            last_job: 42,
        }
    }

    /// A schedule record's bytes are pinned: type 13, the name, then the schedule.
    #[test]
    fn a_schedule_record_has_its_pinned_layout() {
        let schedule = Schedule {
            name: Bytes::from_static(b"s"),
            queue: Bytes::from_static(b"q"),
            body: Bytes::from_static(b"b"),
            pri: 1,
            ttr: 2,
            timing: Timing::Interval("5m".into()),
            overlap: Overlap::Skip,
            missed: MissedTicks::CatchUp,
            paused: true,
            last_tick: 3,
            last_job: 4,
        };
        let change = Change::Schedule {
            name: Bytes::from_static(b"s"),
            schedule: Some(Box::new(schedule)),
        };
        let mut buf = Vec::new();
        encode_change(&change, &mut buf);
        let payload = &buf[FRAME_HEADER..];
        #[rustfmt::skip]
        let want: &[u8] = &[
            SCHEDULE, 1, 0, 0, 0, b's', 1,
            1, 0, 0, 0, b'q', 1, 0, 0, 0, b'b', 1, 0, 0, 0, 2, 0, 0, 0,
            1, 2, 0, 0, 0, b'5', b'm',
            1, 1, 1, 3, 0, 0, 0, 0, 0, 0, 0, 4, 0, 0, 0, 0, 0, 0, 0,
        ];
        assert_eq!(payload, want);
        assert_eq!(decode_change(payload), Ok(change));
        let deleted = Change::Schedule {
            name: Bytes::from_static(b"s"),
            schedule: None,
        };
        buf.clear();
        encode_change(&deleted, &mut buf);
        assert_eq!(&buf[FRAME_HEADER..], &[SCHEDULE, 1, 0, 0, 0, b's', 0]);
        let mut bad_timing = want.to_vec();
        bad_timing[25] = 2;
        assert_eq!(decode_change(&bad_timing), Err(DecodeError::BadState(2)));
    }

    #[test]
    fn a_policy_record_has_its_pinned_layout() {
        let mut buf = Vec::new();
        let policy = QueuePolicy {
            lease_limit: 2,
            pause: Pause::Forever,
            rate_limit: Some("600/m".parse().unwrap()),
            retry: None,
        };
        let change = Change::Policy {
            queue: Bytes::from_static(b"q"),
            policy,
        };
        encode_change(&change, &mut buf);
        let payload = &buf[FRAME_HEADER..];
        #[rustfmt::skip]
        let want: &[u8] = &[
            POLICY, 1, 0, 0, 0, b'q', 2, 0, 0, 0,
            2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
            88, 2, 0, 0, 96, 234, 0, 0, 0, 0, 0, 0,
        ];
        assert_eq!(payload, want);
        assert_eq!(decode_change(payload), Ok(change));
        let mut bad_pause = want.to_vec();
        bad_pause[10] = 3;
        assert_eq!(decode_change(&bad_pause), Err(DecodeError::BadState(3)));
    }

    /// A flow record's bytes are pinned: type 11, then the engine's bytes with a u32 length.
    #[test]
    fn a_flow_record_has_its_pinned_layout() {
        let mut buf = Vec::new();
        encode_change(&Change::Flow(Bytes::from_static(b"{}")), &mut buf);
        assert_eq!(&buf[FRAME_HEADER..], &[11, 2, 0, 0, 0, b'{', b'}']);
        assert_eq!(
            decode_change(&[11, 2, 0, 0, 0, b'{', b'}']).unwrap(),
            Change::Flow(Bytes::from_static(b"{}"))
        );
        assert!(decode_change(&[11, 0xFF, 0xFF, 0xFF, 0xFF]).is_err());
    }

    /// Records as the first release of the log format wrote them: a later version must
    /// read them back unchanged (no silent format drift).
    #[test]
    fn records_of_the_first_format_still_decode() {
        let put: &[u8] = &[
            1, 7, 0, 0, 0, 0, 0, 0, 0, 0, 4, 0, 0, 60, 0, 0, 0, 5, 0, 0, 0, 0, 104, 229, 207, 139,
            1, 0, 0, 1, 136, 123, 229, 207, 139, 1, 0, 0, 6, 0, 101, 109, 97, 105, 108, 115, 8, 0,
            111, 114, 100, 101, 114, 45, 49, 55, 2, 0, 0, 0, 104, 105,
        ];
        match decode_change(put).unwrap() {
            Change::Put {
                id,
                queue,
                unique,
                attrs,
                attempt,
                body,
                ..
            } => {
                assert_eq!(id, 7);
                assert_eq!(&queue[..], b"emails");
                assert_eq!(unique.as_deref(), Some(&b"order-17"[..]));
                assert_eq!((attrs, attempt), (None, 0));
                assert_eq!(&body[..], b"hi");
            }
            other => panic!("{other:?}"),
        }
        let delete: &[u8] = &[2, 42, 0, 0, 0, 0, 0, 0, 0];
        assert_eq!(decode_change(delete).unwrap(), Change::Delete { id: 42 });
    }

    #[test]
    fn only_puts_that_need_it_are_written_wide() {
        let put = |qlen: usize, ulen: Option<usize>| {
            let mut buf = Vec::new();
            let change = Change::Put {
                id: 1,
                queue: Bytes::from(vec![b'q'; qlen]),
                pri: 0,
                ttr: 1,
                delay: 0,
                created: 0,
                state: PutState::Ready,
                unique: ulen.map(|n| Bytes::from(vec![b'u'; n])),
                attrs: None,
                attempt: 0,
                body: Bytes::new(),
            };
            encode_change(&change, &mut buf);
            assert_eq!(decode_change(&buf[FRAME_HEADER..]).unwrap(), change);
            buf[FRAME_HEADER]
        };
        assert_eq!(put(65_535, Some(65_534)), PUT);
        assert_eq!(put(65_535, None), PUT);
        assert_eq!(put(65_536, None), PUT_WIDE);
        assert_eq!(put(1, Some(65_535)), PUT_WIDE);
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
    fn a_segment_end_is_framed_and_is_not_a_change() {
        let mut buf = Vec::new();
        encode_segment_end(42, &mut buf);
        let Frame::Good(payload, size) = read_frame(&buf) else {
            panic!("frame not readable")
        };
        assert_eq!(size, buf.len());
        assert_eq!(decode_segment_end(payload), Some(42));
        assert_eq!(
            decode_change(payload),
            Err(DecodeError::UnknownType(SEGMENT_END))
        );
        let mut put = Vec::new();
        encode_change(&samples()[0], &mut put);
        assert_eq!(decode_segment_end(&put[FRAME_HEADER..]), None);
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
