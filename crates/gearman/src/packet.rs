//! Gearman packet types, their field layouts, and packet encoding.
//!
//! Kept apart from decoding so the session can build replies and the decoder can validate
//! headers from one table: the number of fields each request type carries.

use bytes::{BufMut, Bytes, BytesMut};

/// Packet type numbers as gearmand 1.1 defines them (1-42).
pub mod kind {
    pub const CAN_DO: u32 = 1;
    pub const CANT_DO: u32 = 2;
    pub const RESET_ABILITIES: u32 = 3;
    pub const PRE_SLEEP: u32 = 4;
    pub const UNUSED: u32 = 5;
    pub const NOOP: u32 = 6;
    pub const SUBMIT_JOB: u32 = 7;
    pub const JOB_CREATED: u32 = 8;
    pub const GRAB_JOB: u32 = 9;
    pub const NO_JOB: u32 = 10;
    pub const JOB_ASSIGN: u32 = 11;
    pub const WORK_STATUS: u32 = 12;
    pub const WORK_COMPLETE: u32 = 13;
    pub const WORK_FAIL: u32 = 14;
    pub const GET_STATUS: u32 = 15;
    pub const ECHO_REQ: u32 = 16;
    pub const ECHO_RES: u32 = 17;
    pub const SUBMIT_JOB_BG: u32 = 18;
    pub const ERROR: u32 = 19;
    pub const STATUS_RES: u32 = 20;
    pub const SUBMIT_JOB_HIGH: u32 = 21;
    pub const SET_CLIENT_ID: u32 = 22;
    pub const CAN_DO_TIMEOUT: u32 = 23;
    pub const ALL_YOURS: u32 = 24;
    pub const WORK_EXCEPTION: u32 = 25;
    pub const OPTION_REQ: u32 = 26;
    pub const OPTION_RES: u32 = 27;
    pub const WORK_DATA: u32 = 28;
    pub const WORK_WARNING: u32 = 29;
    pub const GRAB_JOB_UNIQ: u32 = 30;
    pub const JOB_ASSIGN_UNIQ: u32 = 31;
    pub const SUBMIT_JOB_HIGH_BG: u32 = 32;
    pub const SUBMIT_JOB_LOW: u32 = 33;
    pub const SUBMIT_JOB_LOW_BG: u32 = 34;
    pub const SUBMIT_JOB_SCHED: u32 = 35;
    pub const SUBMIT_JOB_EPOCH: u32 = 36;
    pub const SUBMIT_REDUCE_JOB: u32 = 37;
    pub const SUBMIT_REDUCE_JOB_BACKGROUND: u32 = 38;
    pub const GRAB_JOB_ALL: u32 = 39;
    pub const JOB_ASSIGN_ALL: u32 = 40;
    pub const GET_STATUS_UNIQUE: u32 = 41;
    pub const STATUS_RES_UNIQUE: u32 = 42;
    /// The highest type gearmand knows; anything above closes the connection.
    pub const MAX: u32 = 42;
}

/// Request magic, `\0REQ`.
pub const REQ: [u8; 4] = *b"\0REQ";
/// Response magic, `\0RES`.
pub const RES: [u8; 4] = *b"\0RES";
/// Header length: magic, type, size.
pub const HEADER: usize = 12;
/// Longest job handle or unique a request may carry (gearmand's 64-byte buffers).
pub const MAX_HANDLE: usize = 64;
/// Longest unique ID; longer ones get `ARGUMENT_TOO_LARGE` as from gearmand.
pub const MAX_UNIQUE: usize = 64;

/// How many `\0`-separated fields a request type carries, so the decoder can split a body
/// without reading past its declared size (gearmand's parser does not bound that scan).
/// `None` for types a server never accepts.
pub fn request_fields(t: u32) -> Option<usize> {
    use kind::*;
    Some(match t {
        RESET_ABILITIES | PRE_SLEEP | GRAB_JOB | GRAB_JOB_UNIQ | GRAB_JOB_ALL | ALL_YOURS => 0,
        CAN_DO | CANT_DO | GET_STATUS | GET_STATUS_UNIQUE | ECHO_REQ | SET_CLIENT_ID
        | OPTION_REQ | WORK_FAIL => 1,
        CAN_DO_TIMEOUT | WORK_COMPLETE | WORK_DATA | WORK_WARNING | WORK_EXCEPTION => 2,
        WORK_STATUS => 3,
        SUBMIT_JOB | SUBMIT_JOB_BG | SUBMIT_JOB_HIGH | SUBMIT_JOB_HIGH_BG | SUBMIT_JOB_LOW
        | SUBMIT_JOB_LOW_BG => 3,
        SUBMIT_JOB_EPOCH => 4,
        SUBMIT_REDUCE_JOB | SUBMIT_REDUCE_JOB_BACKGROUND => 5,
        SUBMIT_JOB_SCHED => 8,
        _ => return None,
    })
}

/// Splits a body into exactly `n` fields: `n - 1` `\0`-terminated ones and the rest.
/// `None` when the body has fewer separators than that. Never looks past the body.
pub fn split_fields(body: &Bytes, n: usize) -> Option<Vec<Bytes>> {
    let mut fields = Vec::with_capacity(n);
    if n == 0 {
        return Some(fields);
    }
    let mut start = 0;
    for _ in 0..n - 1 {
        let nul = body[start..].iter().position(|&b| b == 0)?;
        fields.push(body.slice(start..start + nul));
        start += nul + 1;
    }
    fields.push(body.slice(start..));
    Some(fields)
}

/// Appends one response packet whose body is `fields` joined with `\0`.
pub fn put_response(out: &mut BytesMut, t: u32, fields: &[&[u8]]) {
    let len: usize = fields.iter().map(|f| f.len()).sum::<usize>() + fields.len().saturating_sub(1);
    out.reserve(HEADER + len);
    out.put_slice(&RES);
    out.put_u32(t);
    out.put_u32(len as u32);
    for (i, f) in fields.iter().enumerate() {
        if i > 0 {
            out.put_u8(0);
        }
        out.put_slice(f);
    }
}

/// One response packet as its own buffer, for sending to another connection.
pub fn response(t: u32, fields: &[&[u8]]) -> Bytes {
    let mut out = BytesMut::new();
    put_response(&mut out, t, fields);
    out.freeze()
}

/// Appends an `ERROR` packet: code and text.
pub fn put_error(out: &mut BytesMut, code: &str, text: &str) {
    put_response(out, kind::ERROR, &[code.as_bytes(), text.as_bytes()]);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_split_without_reading_past_the_body() {
        let b = Bytes::from_static(b"f\0u\0da\0ta");
        let f = split_fields(&b, 3).unwrap();
        assert_eq!(f, vec![&b"f"[..], &b"u"[..], &b"da\0ta"[..]]);
        assert!(split_fields(&Bytes::from_static(b"handle"), 2).is_none());
        assert_eq!(split_fields(&Bytes::new(), 1).unwrap(), vec![Bytes::new()]);
        assert!(split_fields(&Bytes::new(), 0).unwrap().is_empty());
    }

    #[test]
    fn responses_are_framed_with_res_magic_and_size() {
        let p = response(kind::JOB_CREATED, &[b"H:x:1"]);
        assert_eq!(&p[..], b"\0RES\0\0\0\x08\0\0\0\x05H:x:1");
        let p = response(kind::STATUS_RES, &[b"h", b"1", b"0"]);
        assert_eq!(&p[12..], b"h\x001\x000");
        assert_eq!(&response(kind::NOOP, &[])[..], b"\0RES\0\0\0\x06\0\0\0\0");
    }

    #[test]
    fn every_request_type_has_a_layout_and_responses_do_not() {
        for t in [
            1, 2, 3, 4, 7, 9, 12, 13, 14, 15, 16, 18, 21, 22, 23, 24, 25, 26, 28, 29, 30,
        ] {
            assert!(request_fields(t).is_some(), "{t}");
        }
        for t in [32, 33, 34, 35, 36, 37, 38, 39, 41] {
            assert!(request_fields(t).is_some(), "{t}");
        }
        for t in [0, 5, 6, 8, 10, 11, 17, 19, 20, 27, 31, 40, 42, 43, u32::MAX] {
            assert!(request_fields(t).is_none(), "{t}");
        }
    }
}
