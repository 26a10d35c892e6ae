//! The headers frame: `key=value` lines joined by LF (spec §3.3), parsed strictly and with
//! bounds, because every value a manager or worker acts on (lock, job, attempt) comes from it.

use crate::error::DecodeError;
use crate::limits::{Limits, MAX_KEY_LEN, MAX_VALUE_LEN};

/// The parsed header lines of one message, in the order they were sent. Keys are unique
/// (a duplicate makes the message malformed); unknown keys are kept so extensions can read
/// them, and ignored by everything else.
///
/// Every key and value lives in one text buffer, located by offsets: a message costs two
/// allocations however many lines it has, where a `(String, String)` per line cost two per
/// line (the manager parses a DONE and a GIVE per job; allocation was the largest share of
/// its own CPU, docs/benchmarks.md "14/WMP").
#[derive(Debug, Clone, Default)]
pub struct Headers {
    text: String,
    lines: Vec<Line>,
}

/// Equal when the lines are, in order: parsed text keeps the frame's `\n` separators and
/// built text does not, so the buffers themselves may differ.
impl PartialEq for Headers {
    fn eq(&self, other: &Headers) -> bool {
        self.len() == other.len() && self.iter().eq(other.iter())
    }
}

impl Eq for Headers {}

/// Where one line's key and value are in [`Headers::text`]: the key is
/// `key_start..key_end`, the value `key_end + 1..value_end` (after the `=`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Line {
    key_start: u32,
    key_end: u32,
    value_end: u32,
}

impl Headers {
    /// No headers.
    pub fn new() -> Self {
        Headers::default()
    }

    /// No headers yet, with room for `lines` lines of `bytes` bytes in all (keys and
    /// values), so a message built line by line allocates once for each.
    pub fn with_capacity(lines: usize, bytes: usize) -> Self {
        Headers {
            text: String::with_capacity(bytes),
            lines: Vec::with_capacity(lines),
        }
    }

    /// Adds a header. Encoding does not re-validate: callers set keys from the fixed set
    /// and values they produced; [`Headers::is_valid_value`] is there for values from outside.
    pub fn push(&mut self, key: &str, value: impl AsRef<str>) {
        let key_start = self.text.len();
        self.text.push_str(key);
        let key_end = self.text.len();
        self.text.push('=');
        self.text.push_str(value.as_ref());
        self.end_line(key_start, key_end);
    }

    /// Adds a header whose value is a number, without formatting it into a `String` first.
    pub fn push_number(&mut self, key: &str, value: u64) {
        let key_start = self.text.len();
        self.text.push_str(key);
        let key_end = self.text.len();
        self.text.push('=');
        self.text.push_str(itoa::Buffer::new().format(value));
        self.end_line(key_start, key_end);
    }

    /// Records the line just appended to the text: its key at `key_start..key_end`, its
    /// value up to the end of the text.
    fn end_line(&mut self, key_start: usize, key_end: usize) {
        self.lines.push(Line {
            key_start: offset(key_start),
            key_end: offset(key_end),
            value_end: offset(self.text.len()),
        });
    }

    /// The value of `key`, if present.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.iter().find(|(k, _)| *k == key).map(|(_, v)| v)
    }

    /// All lines, in order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.lines.iter().map(|line| {
            let key = &self.text[line.key_start as usize..line.key_end as usize];
            let value = &self.text[line.key_end as usize + 1..line.value_end as usize];
            (key, value)
        })
    }

    /// Number of lines.
    pub fn len(&self) -> usize {
        self.lines.len()
    }

    /// True when there are no lines.
    pub fn is_empty(&self) -> bool {
        self.lines.is_empty()
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
        // One pass over the bytes locates and checks every line (the keys are ASCII, so
        // byte offsets are char boundaries); the text is then copied once. `split`,
        // `split_once` and a second scan per value cost the manager about 2,000
        // instructions per message (docs/benchmarks.md, "14/WMP").
        let bytes = body.as_bytes();
        let mut at = 0;
        loop {
            if headers.lines.len() == limits.max_header_count {
                return Err(DecodeError::TooManyHeaders);
            }
            let key_start = at;
            if !bytes.get(at).is_some_and(|&b| is_key_start_byte(b)) {
                return Err(DecodeError::BadHeaderLine);
            }
            at += 1;
            while bytes.get(at).is_some_and(|&b| is_key_byte(b)) {
                at += 1;
            }
            let key_end = at;
            if bytes.get(at) != Some(&b'=') || key_end - key_start > MAX_KEY_LEN {
                return Err(DecodeError::BadHeaderLine);
            }
            at += 1;
            let value_start = at;
            while let Some(&b) = bytes.get(at) {
                match b {
                    b'\n' => break,
                    b'\r' | 0 => return Err(DecodeError::BadHeaderLine),
                    _ => at += 1,
                }
            }
            if at - value_start > MAX_VALUE_LEN {
                return Err(DecodeError::BadHeaderLine);
            }
            let key = &bytes[key_start..key_end];
            let duplicate = headers.lines.iter().any(|line| {
                let (start, end) = (line.key_start as usize, line.key_end as usize);
                end - start == key.len() && &bytes[start..end] == key
            });
            if duplicate {
                return Err(DecodeError::DuplicateHeader);
            }
            headers.lines.push(Line {
                key_start: offset(key_start),
                key_end: offset(key_end),
                value_end: offset(at),
            });
            if at == bytes.len() {
                break;
            }
            at += 1; // the LF; an empty line after it fails as a key above
        }
        headers.text = body.to_owned();
        Ok(headers)
    }

    /// Encodes the lines joined by LF, without a trailing LF.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.text.len() + self.lines.len());
        for (i, (k, v)) in self.iter().enumerate() {
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
    bytes.first().is_some_and(|&b| is_key_start_byte(b))
        && bytes.len() <= MAX_KEY_LEN
        && bytes[1..].iter().all(|&b| is_key_byte(b))
}

/// A byte a key may start with.
fn is_key_start_byte(b: u8) -> bool {
    b.is_ascii_lowercase() || b.is_ascii_digit()
}

/// A byte a key may have after its first.
fn is_key_byte(b: u8) -> bool {
    is_key_start_byte(b) || matches!(b, b'_' | b'.' | b'-')
}

/// An offset into a headers buffer. Parsed frames are bounded far below 4 GiB (`Limits`);
/// headers built locally are a few short lines.
fn offset(n: usize) -> u32 {
    u32::try_from(n).expect("headers text under 4 GiB")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_built_and_parsed_read_back_the_same() {
        let mut built = Headers::with_capacity(1, 4);
        built.push("job", "42");
        built.push_number("attempt", 7);
        built.push("note", String::from("a=b"));
        built.push("empty", "");
        assert_eq!(built.len(), 4);
        assert_eq!(built.get("job"), Some("42"));
        assert_eq!(built.get("attempt"), Some("7"));
        assert_eq!(built.get("note"), Some("a=b"));
        assert_eq!(built.get("empty"), Some(""));
        assert_eq!(built.get("jo"), None);
        let wire = built.encode();
        assert_eq!(wire, b"job=42\nattempt=7\nnote=a=b\nempty=");
        let parsed = Headers::parse(&wire, &Limits::default()).unwrap();
        let lines: Vec<(&str, &str)> = parsed.iter().collect();
        assert_eq!(
            lines,
            [
                ("job", "42"),
                ("attempt", "7"),
                ("note", "a=b"),
                ("empty", "")
            ]
        );
        assert_eq!(parsed.encode(), wire);
        assert_eq!(parsed, built, "the same lines, whatever the buffers hold");
        let mut other = Headers::new();
        other.push("job", "42");
        assert_ne!(other, built);
        other.push_number("attempt", 8);
        other.push("note", "a=b");
        other.push("empty", "");
        assert_ne!(other, built, "a value differs");
    }

    #[test]
    fn a_trailing_lf_is_not_part_of_the_last_value_and_duplicates_are_found_by_key() {
        let parsed = Headers::parse(b"a=1\nbb=22\n", &Limits::default()).unwrap();
        assert_eq!(parsed.get("bb"), Some("22"));
        assert_eq!(parsed.encode(), b"a=1\nbb=22");
        assert_eq!(
            Headers::parse(b"a=1\nb=2\na=3", &Limits::default()),
            Err(DecodeError::DuplicateHeader)
        );
        // A key that is a prefix of another is not a duplicate.
        assert!(Headers::parse(b"ab=1\na=2", &Limits::default()).is_ok());
    }

    /// The rules of `parse` written line by line, as the spec states them: the one-pass
    /// parser must agree with it on every input.
    fn parse_by_lines(frame: &[u8], limits: &Limits) -> Result<Vec<(String, String)>, DecodeError> {
        if frame.len() > limits.max_headers_bytes {
            return Err(DecodeError::HeadersTooLarge);
        }
        let text = std::str::from_utf8(frame).map_err(|_| DecodeError::BadHeaderLine)?;
        let body = text.strip_suffix('\n').unwrap_or(text);
        let mut lines: Vec<(String, String)> = Vec::new();
        if body.is_empty() {
            return Ok(lines);
        }
        for line in body.split('\n') {
            if lines.len() == limits.max_header_count {
                return Err(DecodeError::TooManyHeaders);
            }
            let (key, value) = line.split_once('=').ok_or(DecodeError::BadHeaderLine)?;
            if !is_valid_key(key) || !Headers::is_valid_value(value) {
                return Err(DecodeError::BadHeaderLine);
            }
            if lines.iter().any(|(k, _)| k == key) {
                return Err(DecodeError::DuplicateHeader);
            }
            lines.push((key.to_string(), value.to_string()));
        }
        Ok(lines)
    }

    /// `Headers::parse`'s lines in the shape of [`parse_by_lines`]'s.
    fn parse_to_lines(frame: &[u8], limits: &Limits) -> Result<Vec<(String, String)>, DecodeError> {
        Headers::parse(frame, limits).map(|h| {
            h.iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        })
    }

    #[test]
    fn the_one_pass_parser_agrees_with_the_rules_line_by_line() {
        let limits = Limits {
            max_headers_bytes: 40,
            max_header_count: 3,
            ..Limits::default()
        };
        // Bytes that matter to the rules, and one multi-byte character.
        let alphabet: [&[u8]; 13] = [
            b"a",
            b"b",
            b"7",
            b"=",
            b"=",
            b"\n",
            b"\n",
            b"\r",
            b"\0",
            b"A",
            b"_",
            b"-",
            "\u{e9}".as_bytes(),
        ];
        let mut seed: u64 = 0x2545_f491_4f6c_dd1d;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let mut agreed_ok = 0;
        for _ in 0..200_000 {
            let len = (next() % 16) as usize;
            let mut frame = Vec::new();
            for _ in 0..len {
                frame.extend_from_slice(alphabet[(next() % alphabet.len() as u64) as usize]);
            }
            let want = parse_by_lines(&frame, &limits);
            let got = parse_to_lines(&frame, &limits);
            assert_eq!(got, want, "frame {:?}", String::from_utf8_lossy(&frame));
            agreed_ok += usize::from(want.is_ok());
        }
        assert!(
            agreed_ok > 1_000,
            "the inputs reach valid headers too ({agreed_ok})"
        );
        // Limits at their edges: a key of 64 and 65 bytes, a value of 1024 and 1025.
        let limits = Limits::default();
        for (key, value) in [(64, 1024), (65, 1), (1, 1025)] {
            let frame = format!("{}={}", "k".repeat(key), "v".repeat(value));
            let want = parse_by_lines(frame.as_bytes(), &limits);
            let got = parse_to_lines(frame.as_bytes(), &limits);
            assert_eq!(got, want, "key {key} value {value}");
        }
    }
}
