//! The credentials a request presents: a bearer token, or the password of basic auth
//! (what a browser sends once its user typed the token).

use axum::http::{header, HeaderMap};
use base64::Engine as _;

use super::Refusal;

/// Longest `Authorization` header the server reads; a longer one is refused unread.
pub const MAX_AUTHORIZATION_BYTES: usize = 1024;

/// The token in `Authorization: Bearer TOKEN`, or the password of
/// `Authorization: Basic base64(USER:PASSWORD)` (the user name is not checked).
pub(super) fn presented_token(headers: &HeaderMap) -> Result<Option<Vec<u8>>, Refusal> {
    headers
        .get(header::AUTHORIZATION)
        .map(|value| decode_authorization(value.as_bytes()))
        .transpose()
}

/// Decodes an `Authorization` header value into the token it presents (public for the
/// fuzz target, fuzz/fuzz_targets/http_credentials.rs). Bounded: a value over
/// [`MAX_AUTHORIZATION_BYTES`] is refused before it is decoded.
pub fn decode_authorization(value: &[u8]) -> Result<Vec<u8>, Refusal> {
    if value.len() > MAX_AUTHORIZATION_BYTES {
        return Err(Refusal::Unknown);
    }
    let (scheme, rest) = match value.iter().position(|&b| b == b' ') {
        Some(i) => (&value[..i], value[i + 1..].trim_ascii()),
        None => (value, &b""[..]),
    };
    if scheme.eq_ignore_ascii_case(b"bearer") {
        Ok(rest.to_vec())
    } else if scheme.eq_ignore_ascii_case(b"basic") {
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(rest)
            .map_err(|_| Refusal::Unknown)?;
        let colon = decoded.iter().position(|&b| b == b':');
        Ok(colon.map_or(Vec::new(), |i| decoded[i + 1..].to_vec()))
    } else {
        Err(Refusal::Unknown)
    }
}
