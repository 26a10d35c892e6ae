//! ZMTP 3.x frames: a flags byte (MORE, LONG, COMMAND), a 1- or 8-byte big-endian size, the
//! body. The decoder looks only at the header and checks the announced size against the
//! caller's limit before anyone reserves a byte for the body: a peer's length is a claim,
//! never an allocation size.

/// Flag: more frames of this message follow.
pub const MORE: u8 = 0x01;
/// Flag: the size is 8 bytes, not 1.
pub const LONG: u8 = 0x02;
/// Flag: a command frame (handshake, heartbeat), not part of a message.
pub const COMMAND: u8 = 0x04;

/// Why a frame header was refused (the connection is closed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FrameError {
    /// Bits 3-7 of the flags byte are reserved and must be zero.
    ReservedFlags(u8),
    /// A command frame with MORE set: commands are single frames.
    CommandWithMore,
    /// The announced size exceeds the limit.
    TooLarge(u64),
}

impl std::fmt::Display for FrameError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FrameError::ReservedFlags(flags) => write!(f, "reserved frame flags {flags:#04x}"),
            FrameError::CommandWithMore => f.write_str("command frame with MORE set"),
            FrameError::TooLarge(size) => write!(f, "frame of {size} bytes exceeds the limit"),
        }
    }
}

/// A decoded frame header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// More frames of this message follow.
    pub more: bool,
    /// A command frame.
    pub command: bool,
    /// Bytes of header (2 or 9).
    pub header_len: usize,
    /// Bytes of body, at most the limit the header was checked against.
    pub body_len: usize,
}

impl Header {
    /// Header plus body: what must be buffered before the frame is whole.
    pub fn total_len(&self) -> usize {
        self.header_len + self.body_len
    }
}

/// Decodes the frame header at the start of `buf`: `Ok(None)` when more bytes are needed,
/// `Err` when the header is invalid or announces more than `max_body` bytes.
pub fn parse_header(buf: &[u8], max_body: usize) -> Result<Option<Header>, FrameError> {
    let Some(&flags) = buf.first() else {
        return Ok(None);
    };
    if flags & !(MORE | LONG | COMMAND) != 0 {
        return Err(FrameError::ReservedFlags(flags));
    }
    let command = flags & COMMAND != 0;
    let more = flags & MORE != 0;
    if command && more {
        return Err(FrameError::CommandWithMore);
    }
    let (header_len, size) = if flags & LONG != 0 {
        let Some(bytes) = buf.get(1..9) else {
            return Ok(None);
        };
        let mut be = [0u8; 8];
        be.copy_from_slice(bytes);
        (9, u64::from_be_bytes(be))
    } else {
        let Some(&size) = buf.get(1) else {
            return Ok(None);
        };
        (2, u64::from(size))
    };
    if size > max_body as u64 {
        return Err(FrameError::TooLarge(size));
    }
    Ok(Some(Header {
        more,
        command,
        header_len,
        body_len: size as usize,
    }))
}

/// Appends one frame (header and body) to `out`.
pub fn put_frame(out: &mut Vec<u8>, flags: u8, body: &[u8]) {
    match u8::try_from(body.len()) {
        Ok(short) => out.extend_from_slice(&[flags & !LONG, short]),
        Err(_) => {
            out.push(flags | LONG);
            out.extend_from_slice(&(body.len() as u64).to_be_bytes());
        }
    }
    out.extend_from_slice(body);
}

/// Appends a message's frames, MORE set on all but the last.
pub fn put_message<B: AsRef<[u8]>>(out: &mut Vec<u8>, frames: &[B]) {
    let last = frames.len().saturating_sub(1);
    for (i, frame) in frames.iter().enumerate() {
        put_frame(out, if i < last { MORE } else { 0 }, frame.as_ref());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_and_long_frames_round_trip() {
        for len in [0usize, 1, 255, 256, 70_000] {
            let body = vec![7u8; len];
            let mut out = Vec::new();
            put_frame(&mut out, MORE, &body);
            let h = parse_header(&out, 1 << 20).unwrap().unwrap();
            assert_eq!(h.body_len, len);
            assert!(h.more && !h.command);
            assert_eq!(h.header_len, if len < 256 { 2 } else { 9 });
            assert_eq!(&out[h.header_len..], &body[..]);
        }
    }

    #[test]
    fn truncated_headers_ask_for_more() {
        assert_eq!(parse_header(&[], 10), Ok(None));
        assert_eq!(parse_header(&[0], 10), Ok(None));
        assert_eq!(parse_header(&[LONG, 0, 0, 0, 0, 0, 0, 0], 10), Ok(None));
    }

    #[test]
    fn an_oversized_announcement_is_refused_from_the_header_alone() {
        let mut huge = vec![LONG];
        huge.extend_from_slice(&(1u64 << 62).to_be_bytes());
        assert_eq!(
            parse_header(&huge, 1 << 20),
            Err(FrameError::TooLarge(1 << 62))
        );
        assert_eq!(parse_header(&[0, 11], 10), Err(FrameError::TooLarge(11)));
        assert!(parse_header(&[0, 10], 10).unwrap().is_some());
    }

    #[test]
    fn bad_flags_are_refused() {
        assert_eq!(
            parse_header(&[0x08, 0], 10),
            Err(FrameError::ReservedFlags(8))
        );
        assert_eq!(
            parse_header(&[COMMAND | MORE, 0], 10),
            Err(FrameError::CommandWithMore)
        );
        let h = parse_header(&[COMMAND, 4], 10).unwrap().unwrap();
        assert!(h.command && !h.more);
    }

    #[test]
    fn messages_set_more_on_all_but_the_last_frame() {
        let mut out = Vec::new();
        put_message(&mut out, &[&b"a"[..], b"", b"bc"]);
        assert_eq!(out, [MORE, 1, b'a', MORE, 0, 0, 2, b'b', b'c']);
    }
}
