//! How bytes travel in JSON: a body, a result or a preview is a string when it is UTF-8,
//! and base64 (standard alphabet, padded) under a `_base64` name otherwise; attributes
//! are any JSON value.

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use bytes::Bytes;
use serde_json::{Map, Value};

use crate::error::ApiError;
use crate::limits::MAX_ATTRIBUTES_BYTES;

/// Decodes the bytes sent as `text` or as `base64` (at most one of the two; neither is
/// empty bytes), refusing more than `max` bytes.
pub fn bytes_in(
    text: Option<String>,
    base64: Option<String>,
    name: &str,
    max: u32,
) -> Result<Bytes, ApiError> {
    let bytes =
        match (text, base64) {
            (Some(_), Some(_)) => {
                return Err(ApiError::bad_request(format!(
                    "give `{name}` or `{name}_base64`, not both"
                )))
            }
            (Some(t), None) => Bytes::from(t),
            (None, Some(b)) => Bytes::from(STANDARD.decode(b.as_bytes()).map_err(|e| {
                ApiError::bad_request(format!("`{name}_base64` is not base64: {e}"))
            })?),
            (None, None) => Bytes::new(),
        };
    if bytes.len() > max as usize {
        return Err(ApiError::job_too_big(max));
    }
    Ok(bytes)
}

/// Puts `bytes` into `obj` as `name` (UTF-8) or `name_base64`.
pub fn bytes_out(obj: &mut Map<String, Value>, name: &str, bytes: &[u8]) {
    match std::str::from_utf8(bytes) {
        Ok(s) => obj.insert(name.into(), Value::String(s.into())),
        Err(_) => obj.insert(
            format!("{name}_base64"),
            Value::String(STANDARD.encode(bytes)),
        ),
    };
}

/// The first `limit` bytes of a body, cut at a character boundary when the body is UTF-8,
/// as `body_preview` or `body_preview_base64`.
pub fn preview_out(obj: &mut Map<String, Value>, body: &[u8], limit: usize) {
    let mut cut = &body[..body.len().min(limit)];
    if cut.len() < body.len() {
        if let Err(e) = std::str::from_utf8(cut) {
            // A character split by the cut, in an otherwise UTF-8 prefix: drop its start.
            if e.error_len().is_none() {
                cut = &cut[..e.valid_up_to()];
            }
        }
    }
    bytes_out(obj, "body_preview", cut);
    obj.insert("body_size".into(), Value::from(body.len()));
    obj.insert("body_truncated".into(), Value::Bool(cut.len() < body.len()));
}

/// Attributes to keep with a job: serialized JSON, bounded.
pub fn attributes_in(value: Option<Value>) -> Result<Option<Bytes>, ApiError> {
    let Some(value) = value else { return Ok(None) };
    let text = serde_json::to_vec(&value).map_err(|e| ApiError::bad_json(e.to_string()))?;
    if text.len() > MAX_ATTRIBUTES_BYTES {
        return Err(ApiError::attributes_too_big());
    }
    Ok(Some(Bytes::from(text)))
}

/// A job's attributes as JSON: what the API stored, or (for attributes another front end
/// keeps in its own format) the bytes as a string or base64.
pub fn attributes_out(obj: &mut Map<String, Value>, attrs: Option<&Bytes>) {
    let Some(attrs) = attrs else { return };
    match serde_json::from_slice::<Value>(attrs) {
        Ok(v) => {
            obj.insert("attributes".into(), v);
        }
        Err(_) => bytes_out(obj, "attributes_raw", attrs),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_go_in_as_text_or_base64_within_the_limit() {
        assert_eq!(bytes_in(Some("hé".into()), None, "body", 3).unwrap(), "hé");
        assert_eq!(
            bytes_in(None, Some("AP8=".into()), "body", 2).unwrap(),
            &[0u8, 255][..]
        );
        assert_eq!(bytes_in(None, None, "body", 0).unwrap(), "");
        assert_eq!(
            bytes_in(Some("abcd".into()), None, "body", 3)
                .unwrap_err()
                .code,
            "job_too_big"
        );
        assert_eq!(
            bytes_in(Some("a".into()), Some("YQ==".into()), "body", 3)
                .unwrap_err()
                .code,
            "bad_request"
        );
        assert_eq!(
            bytes_in(None, Some("!!".into()), "body", 3)
                .unwrap_err()
                .code,
            "bad_request"
        );
    }

    #[test]
    fn bytes_come_out_as_text_when_utf8_and_base64_otherwise() {
        let mut m = Map::new();
        bytes_out(&mut m, "body", b"ok");
        bytes_out(&mut m, "result", &[0xff]);
        assert_eq!(m["body"], "ok");
        assert_eq!(m["result_base64"], "/w==");
    }

    #[test]
    fn a_preview_cuts_at_a_character_boundary() {
        let mut m = Map::new();
        preview_out(&mut m, "aé".as_bytes(), 2);
        assert_eq!(m["body_preview"], "a");
        assert_eq!(m["body_size"], 3);
        assert_eq!(m["body_truncated"], true);
        let mut m = Map::new();
        preview_out(&mut m, b"abc", 10);
        assert_eq!(m["body_preview"], "abc");
        assert_eq!(m["body_truncated"], false);
    }

    #[test]
    fn attributes_are_bounded_and_foreign_ones_still_show() {
        let big = Value::String("x".repeat(MAX_ATTRIBUTES_BYTES));
        assert_eq!(
            attributes_in(Some(big)).unwrap_err().code,
            "attributes_too_big"
        );
        let ok = attributes_in(Some(serde_json::json!({"a": 1}))).unwrap();
        let mut m = Map::new();
        attributes_out(&mut m, ok.as_ref());
        assert_eq!(m["attributes"]["a"], 1);
        let mut m = Map::new();
        attributes_out(&mut m, Some(&Bytes::from_static(b"\x01row=5")));
        assert_eq!(m["attributes_raw"], "\u{1}row=5");
    }
}
