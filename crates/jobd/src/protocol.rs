//! The jobd wire format: UTF-8 JSON arrays, each followed by one EOT byte (`0x04`).
//!
//! [`Decoder`] cuts a connection's bytes into messages and validates them exactly as jobd
//! does (same checks, same order, same error strings), so clients that match on those
//! strings keep working. Unlike jobd, every frame is bounded ([`MAX_REQUEST_FRAME`] for
//! what servers read), and text that is not JSON gets a `no: 0` error instead of silence.

use bytes::{Buf, BytesMut};
use serde_json::{Map, Number, Value};

/// The byte that ends every message.
pub const EOT: u8 = 0x04;

/// Largest message a daemon accepts from a client (16 MiB). jobd had no limit; a frame
/// that grows past this gets an error reply and the connection is closed.
pub const MAX_REQUEST_FRAME: usize = 16 << 20;

/// Largest message read as a reply from a daemon (256 MiB): run-manual replies carry the
/// captured output of every job, each up to `max_output_buffer`.
pub const MAX_RESPONSE_FRAME: usize = 256 << 20;

/// Message type numbers, as on the wire.
pub mod kind {
    /// A request.
    pub const REQUEST: u64 = 0;
    /// A response.
    pub const RESPONSE: u64 = 1;
    /// A ping, answered with a pong.
    pub const PING: u64 = 2;
    /// A pong.
    pub const PONG: u64 = 3;
}

/// A validated request.
#[derive(Debug, Clone, PartialEq)]
pub struct Request {
    /// The client's request number, echoed verbatim in the reply.
    pub no: Number,
    /// The request type, e.g. `poll`.
    pub kind: String,
    /// Arguments; falsy values (`null`, `0`, `""`) become `{}` as in jobd.
    pub data: Value,
    /// Only looked at on an unauthorised connection's first request.
    pub password: Option<String>,
}

/// A validated response.
#[derive(Debug, Clone, PartialEq)]
pub struct Response {
    /// The number of the request this answers (0 = "your message could not be parsed").
    pub no: Number,
    /// The result on success.
    pub data: Option<Value>,
    /// The error message on failure.
    pub error: Option<String>,
}

/// One decoded message, or why it could not be one.
#[derive(Debug, Clone, PartialEq)]
pub enum Incoming {
    /// A well-formed request.
    Request(Request),
    /// A well-formed response.
    Response(Response),
    /// `[2]`.
    Ping,
    /// `[3]`.
    Pong,
    /// Not a valid message: the text is sent back as a `no: 0` error; the stream goes on.
    Invalid(String),
    /// The frame exceeded the cap: reply with the text, then close (the stream is lost).
    TooLarge(String),
}

/// Splits a byte stream at EOT bytes and validates each message. Bounded: never holds more
/// than `max_frame` bytes of an unfinished message.
#[derive(Debug)]
pub struct Decoder {
    max_frame: usize,
    /// How much of the buffer is already known to contain no EOT.
    scanned: usize,
    failed: bool,
}

impl Decoder {
    /// A decoder whose frames may be at most `max_frame` bytes (EOT excluded).
    pub fn new(max_frame: usize) -> Self {
        Decoder {
            max_frame,
            scanned: 0,
            failed: false,
        }
    }

    /// The next message in `buf`, consuming its bytes; `None` when more input is needed.
    /// Empty frames (a lone EOT) are skipped. After [`Incoming::TooLarge`] it yields nothing.
    pub fn decode(&mut self, buf: &mut BytesMut) -> Option<Incoming> {
        loop {
            if self.failed {
                buf.clear();
                return None;
            }
            let found = buf[self.scanned..].iter().position(|&b| b == EOT);
            let Some(offset) = found else {
                self.scanned = buf.len();
                if buf.len() > self.max_frame {
                    self.failed = true;
                    buf.clear();
                    return Some(Incoming::TooLarge(format!(
                        "message too large (limit {} bytes)",
                        self.max_frame
                    )));
                }
                return None;
            };
            let end = self.scanned + offset;
            self.scanned = 0;
            if end > self.max_frame {
                self.failed = true;
                buf.clear();
                return Some(Incoming::TooLarge(format!(
                    "message too large (limit {} bytes)",
                    self.max_frame
                )));
            }
            let frame = buf.split_to(end);
            buf.advance(1);
            if frame.iter().all(|b| b.is_ascii_whitespace()) {
                continue;
            }
            return Some(parse(&frame));
        }
    }
}

/// Validates one frame (without its EOT) the way jobd's message parser does.
pub fn parse(frame: &[u8]) -> Incoming {
    let value: Value = match serde_json::from_slice(frame) {
        Ok(v) => v,
        Err(e) => return Incoming::Invalid(format!("malformed JSON: {e}")),
    };
    let Value::Array(items) = value else {
        return Incoming::Invalid(format!("JSON array expected, got: {}", js_string(&value)));
    };
    let first = items.first().cloned().unwrap_or(Value::Null);
    let type_text = if items.is_empty() {
        "undefined".to_string()
    } else {
        js_string(&first)
    };
    match first.as_u64() {
        Some(kind::REQUEST) if first.is_u64() => parse_request(items.get(1)),
        Some(kind::RESPONSE) if first.is_u64() => parse_response(items.get(1)),
        Some(kind::PING) if first.is_u64() => Incoming::Ping,
        Some(kind::PONG) if first.is_u64() => Incoming::Pong,
        _ => Incoming::Invalid(format!("unexpected type {type_text}")),
    }
}

fn parse_request(body: Option<&Value>) -> Incoming {
    let bad = |m: &str| Incoming::Invalid(format!("malformed REQUEST message: {m}"));
    let Some(Value::Object(obj)) = body else {
        return bad("data is not an object");
    };
    let kind = match obj.get("type") {
        None => return bad("missing required field type"),
        Some(Value::String(s)) => s.clone(),
        Some(_) => return bad("'type' must be string"),
    };
    let no = match obj.get("no") {
        None => return bad("missing required field no"),
        Some(v) => match integer(v) {
            Some(n) => n,
            None => return bad("'no' must be integer"),
        },
    };
    let password = match obj.get("password") {
        None => None,
        Some(Value::String(s)) => Some(s.clone()),
        Some(_) => return bad("'password' must be string"),
    };
    let data = match obj.get("data") {
        None => Value::Object(Map::new()),
        Some(Value::Bool(_)) => {
            return bad("'data' must be any of: string, number, object, array");
        }
        Some(v) if is_falsy(v) => Value::Object(Map::new()),
        Some(v) => v.clone(),
    };
    Incoming::Request(Request {
        no,
        kind,
        data,
        password,
    })
}

fn parse_response(body: Option<&Value>) -> Incoming {
    let bad = |m: &str| Incoming::Invalid(format!("malformed RESPONSE message: {m}"));
    let Some(Value::Object(obj)) = body else {
        return bad("data is not an object");
    };
    let no = match obj.get("no") {
        None => return bad("missing required field no"),
        Some(v) => match integer(v) {
            Some(n) => n,
            None => return bad("'no' must be integer"),
        },
    };
    let error = match obj.get("error") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) if s.is_empty() => None,
        Some(Value::String(s)) => Some(s.clone()),
        Some(_) => return bad("'error' must be string"),
    };
    let data = obj.get("data").filter(|v| !v.is_null()).cloned();
    Incoming::Response(Response { no, data, error })
}

/// JS's `Number.isInteger`: `3.0` counts (and is echoed as `3`).
fn integer(v: &Value) -> Option<Number> {
    let Value::Number(n) = v else { return None };
    if n.is_i64() || n.is_u64() {
        return Some(n.clone());
    }
    let f = n.as_f64()?;
    if f.fract() == 0.0 && f.abs() < 9.0e15 {
        Some(Number::from(f as i64))
    } else {
        None
    }
}

fn is_falsy(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::Number(n) => n.as_f64() == Some(0.0),
        Value::String(s) => s.is_empty(),
        _ => false,
    }
}

/// How JavaScript's `String(value)` prints a JSON value (jobd puts it in error messages).
pub fn js_string(v: &Value) -> String {
    match v {
        Value::Null => "null".into(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        Value::String(s) => s.clone(),
        Value::Array(items) => items
            .iter()
            .map(|i| match i {
                Value::Null => String::new(),
                other => js_string(other),
            })
            .collect::<Vec<_>>()
            .join(","),
        Value::Object(_) => "[object Object]".into(),
    }
}

/// JavaScript's `typeof` for a JSON value (used in jobd's type errors).
pub fn js_typeof(v: &Value) -> &'static str {
    match v {
        Value::Null | Value::Array(_) | Value::Object(_) => "object",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
    }
}

fn frame(v: Value) -> Vec<u8> {
    let mut out = serde_json::to_vec(&v).unwrap_or_default();
    out.push(EOT);
    out
}

/// `[1,{"no":N,"data":…}]` + EOT.
pub fn encode_data(no: &Number, data: Value) -> Vec<u8> {
    let mut m = Map::new();
    m.insert("no".into(), Value::Number(no.clone()));
    m.insert("data".into(), data);
    frame(Value::Array(vec![kind::RESPONSE.into(), Value::Object(m)]))
}

/// `[1,{"no":N,"error":"…"}]` + EOT.
pub fn encode_error(no: &Number, error: &str) -> Vec<u8> {
    let mut m = Map::new();
    m.insert("no".into(), Value::Number(no.clone()));
    m.insert("error".into(), Value::String(error.into()));
    frame(Value::Array(vec![kind::RESPONSE.into(), Value::Object(m)]))
}

/// `[0,{"no":N,"type":"…","data":…,"password"?:"…"}]` + EOT, the Node side's field order.
pub fn encode_request(no: i64, kind_name: &str, data: Value, password: Option<&str>) -> Vec<u8> {
    let mut m = Map::new();
    m.insert("no".into(), no.into());
    m.insert("type".into(), kind_name.into());
    m.insert("data".into(), data);
    if let Some(p) = password {
        m.insert("password".into(), p.into());
    }
    frame(Value::Array(vec![kind::REQUEST.into(), Value::Object(m)]))
}

/// `[2]` + EOT.
pub fn encode_ping() -> Vec<u8> {
    frame(Value::Array(vec![kind::PING.into()]))
}

/// `[3]` + EOT.
pub fn encode_pong() -> Vec<u8> {
    frame(Value::Array(vec![kind::PONG.into()]))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(input: &[u8]) -> Option<Incoming> {
        let mut d = Decoder::new(64);
        let mut b = BytesMut::from(input);
        d.decode(&mut b)
    }

    fn invalid(input: &[u8]) -> String {
        match one(input) {
            Some(Incoming::Invalid(s)) => s,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn splits_messages_in_one_buffer_and_across_buffers() {
        let mut d = Decoder::new(64);
        let mut b = BytesMut::from(&b"[2]\x04[3]\x04[0,{\"no\":1,"[..]);
        assert_eq!(d.decode(&mut b), Some(Incoming::Ping));
        assert_eq!(d.decode(&mut b), Some(Incoming::Pong));
        assert_eq!(d.decode(&mut b), None);
        b.extend_from_slice(b"\"type\":\"status\"}]\x04");
        match d.decode(&mut b) {
            Some(Incoming::Request(r)) => {
                assert_eq!(r.kind, "status");
                assert_eq!(r.data, serde_json::json!({}));
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn empty_frames_are_skipped() {
        let mut d = Decoder::new(64);
        let mut b = BytesMut::from(&b"\x04\x04[2]\x04"[..]);
        assert_eq!(d.decode(&mut b), Some(Incoming::Ping));
        assert!(b.is_empty());
    }

    #[test]
    fn jobd_error_strings() {
        assert_eq!(
            invalid(b"{\"a\":1}\x04"),
            "JSON array expected, got: [object Object]"
        );
        assert_eq!(invalid(b"[7]\x04"), "unexpected type 7");
        assert_eq!(invalid(b"[]\x04"), "unexpected type undefined");
        let m = "malformed REQUEST message: ";
        assert_eq!(invalid(b"[0]\x04"), format!("{m}data is not an object"));
        assert_eq!(
            invalid(b"[0,{\"no\":1}]\x04"),
            format!("{m}missing required field type")
        );
        assert_eq!(
            invalid(b"[0,{\"type\":\"x\"}]\x04"),
            format!("{m}missing required field no")
        );
        assert_eq!(
            invalid(b"[0,{\"type\":\"x\",\"no\":1.5}]\x04"),
            format!("{m}'no' must be integer")
        );
        assert_eq!(
            invalid(b"[0,{\"type\":\"x\",\"no\":1,\"password\":1}]\x04"),
            format!("{m}'password' must be string")
        );
        assert_eq!(
            invalid(b"[0,{\"type\":\"x\",\"no\":1,\"data\":true}]\x04"),
            format!("{m}'data' must be any of: string, number, object, array")
        );
        assert!(invalid(b"garbage\x04").starts_with("malformed JSON"));
    }

    #[test]
    fn falsy_data_becomes_empty_object_and_no_is_echoed() {
        match one(b"[0,{\"type\":\"poll\",\"no\":-5,\"data\":0}]\x04") {
            Some(Incoming::Request(r)) => {
                assert_eq!(r.data, serde_json::json!({}));
                assert_eq!(
                    encode_data(&r.no, "ok".into()),
                    b"[1,{\"no\":-5,\"data\":\"ok\"}]\x04"
                );
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn frame_cap_is_enforced_without_eot_and_with_it() {
        let mut d = Decoder::new(8);
        let mut b = BytesMut::from(&b"[0,{\"no\":"[..]);
        assert!(matches!(d.decode(&mut b), Some(Incoming::TooLarge(_))));
        assert_eq!(d.decode(&mut b), None);
        // Exactly the cap is fine.
        let mut d = Decoder::new(3);
        let mut b = BytesMut::from(&b"[2]\x04"[..]);
        assert_eq!(d.decode(&mut b), Some(Incoming::Ping));
        let mut b = BytesMut::from(&b" [2]\x04"[..]);
        assert!(matches!(d.decode(&mut b), Some(Incoming::TooLarge(_))));
    }

    #[test]
    fn encodes_like_json_stringify() {
        let no = Number::from(6);
        assert_eq!(
            encode_data(&no, serde_json::json!({"a/b": "é"})),
            "[1,{\"no\":6,\"data\":{\"a/b\":\"é\"}}]\x04".as_bytes()
        );
        assert_eq!(
            encode_error(&no, "invalid password"),
            b"[1,{\"no\":6,\"error\":\"invalid password\"}]\x04"
        );
    }
}
