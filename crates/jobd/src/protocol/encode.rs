//! Messages as bytes on the wire, with the field order jobd's Node side writes.

use serde_json::{Map, Number, Value};

use super::{kind, EOT};

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
