//! Cutting a byte stream into messages and validating each one as jobd does.

use bytes::{Buf, BytesMut};
use serde_json::{Map, Number, Value};

use super::{js_string, kind, Incoming, Request, Response, EOT};

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::encode_data;

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
}
