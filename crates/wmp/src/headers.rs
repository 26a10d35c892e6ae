//! The headers frame: `key=value` lines joined by LF (spec §3.3), parsed strictly and with
//! bounds, because every value a manager or worker acts on (lock, job, attempt) comes from it.

use crate::error::DecodeError;
use crate::limits::{Limits, MAX_KEY_LEN, MAX_VALUE_LEN};

/// The parsed header lines of one message, in the order they were sent. Keys are unique
/// (a duplicate makes the message malformed); unknown keys are kept so extensions can read
/// them, and ignored by everything else.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Headers {
    entries: Vec<(String, String)>,
}

impl Headers {
    /// No headers.
    pub fn new() -> Self {
        Headers::default()
    }

    /// Adds a header. Encoding does not re-validate: callers set keys from the fixed set
    /// and values they produced; [`Headers::is_valid_value`] is there for values from outside.
    pub fn push(&mut self, key: &str, value: impl Into<String>) {
        self.entries.push((key.to_owned(), value.into()));
    }

    /// The value of `key`, if present.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.entries
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// All lines, in order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.entries.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }

    /// Number of lines.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True when there are no lines.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Parses a headers frame. An empty frame means no headers; one trailing LF is allowed;
    /// anything else that is not `key=value` with a valid key and value is malformed.
    pub fn parse(frame: &[u8], limits: &Limits) -> Result<Headers, DecodeError> {
        if frame.len() > limits.max_headers_bytes {
            return Err(DecodeError::HeadersTooLarge);
        }
        let text = std::str::from_utf8(frame).map_err(|_| DecodeError::BadHeaderLine)?;
        let body = text.strip_suffix('\n').unwrap_or(text);
        let mut headers = Headers::new();
        if body.is_empty() {
            // "" and "\n" both mean no headers; "\n\n" leaves an empty line and fails below.
            return Ok(headers);
        }
        for line in body.split('\n') {
            if headers.entries.len() == limits.max_header_count {
                return Err(DecodeError::TooManyHeaders);
            }
            let (key, value) = line.split_once('=').ok_or(DecodeError::BadHeaderLine)?;
            if !is_valid_key(key) || !Headers::is_valid_value(value) {
                return Err(DecodeError::BadHeaderLine);
            }
            if headers.get(key).is_some() {
                return Err(DecodeError::DuplicateHeader);
            }
            headers.push(key, value);
        }
        Ok(headers)
    }

    /// Encodes the lines joined by LF, without a trailing LF.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(
            self.entries
                .iter()
                .map(|(k, v)| k.len() + v.len() + 2)
                .sum(),
        );
        for (i, (k, v)) in self.entries.iter().enumerate() {
            if i > 0 {
                out.push(b'\n');
            }
            out.extend_from_slice(k.as_bytes());
            out.push(b'=');
            out.extend_from_slice(v.as_bytes());
        }
        out
    }

    /// True for a value that may appear in a header: at most 1024 bytes, no LF, CR or NUL.
    pub fn is_valid_value(value: &str) -> bool {
        value.len() <= MAX_VALUE_LEN && !value.bytes().any(|b| matches!(b, b'\n' | b'\r' | 0))
    }
}

/// Keys are `[a-z0-9][a-z0-9_.-]{0,63}`: lowercase so there is one spelling of each.
pub fn is_valid_key(key: &str) -> bool {
    let bytes = key.as_bytes();
    match bytes.first() {
        Some(b) if b.is_ascii_lowercase() || b.is_ascii_digit() => {}
        _ => return false,
    }
    bytes.len() <= MAX_KEY_LEN
        && bytes[1..].iter().all(|b| {
            b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'_' | b'.' | b'-')
        })
}
