//! Why a message was refused. Every decoder failure is one of these, so a receiver can drop
//! the message, count it under a stable reason name and log it, without ever answering
//! (an answer to a malformed message can loop in a many-to-many mesh, spec §3.6).

use std::fmt;

/// A message that does not follow WMP/1. The receiver drops it and counts
/// [`DecodeError::reason`]; it never replies.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DecodeError {
    /// More frames than a WMP/1 message can have (path limit + 5), or the ZeroMQ message was empty.
    TooManyFrames,
    /// No empty delimiter frame before the path limit ran out.
    NoDelimiter,
    /// More path frames than [`crate::Limits::max_path`].
    PathTooLong,
    /// A frame before the delimiter is longer than [`crate::Limits::max_path_frame`].
    PathFrameTooLong,
    /// The frame after the delimiter is missing or is not `WMP01`.
    BadSignature,
    /// No command frame after the signature.
    NoCommand,
    /// A command name that this side does not know (ignored and counted, spec §3.2).
    UnknownCommand,
    /// No headers frame after the command.
    NoHeaders,
    /// The headers frame is larger than [`crate::Limits::max_headers_bytes`].
    HeadersTooLarge,
    /// More header lines than [`crate::Limits::max_header_count`].
    TooManyHeaders,
    /// A header line is not `key=value` with a valid key and value (see `docs/wmp.md`).
    BadHeaderLine,
    /// The same key twice in one headers frame.
    DuplicateHeader,
    /// More than one frame after the headers.
    ExtraFrames,
    /// The payload frame is larger than [`crate::Limits::max_payload`].
    PayloadTooLarge,
    /// A header the command requires is absent.
    MissingHeader(&'static str),
    /// A header that must be a number, a status or a token is not one.
    BadHeaderValue(&'static str),
    /// A command that carries no payload came with a non-empty one.
    UnexpectedPayload,
    /// A device got a non-READY message from below whose path names no upstream alias.
    NoAlias,
}

impl DecodeError {
    /// Stable, low-cardinality name for counters (`wmp_malformed_total{reason}`) and logs.
    pub fn reason(&self) -> &'static str {
        match self {
            DecodeError::TooManyFrames => "too_many_frames",
            DecodeError::NoDelimiter => "no_delimiter",
            DecodeError::PathTooLong => "path_too_long",
            DecodeError::PathFrameTooLong => "path_frame_too_long",
            DecodeError::BadSignature => "bad_signature",
            DecodeError::NoCommand => "no_command",
            DecodeError::UnknownCommand => "unknown_command",
            DecodeError::NoHeaders => "no_headers",
            DecodeError::HeadersTooLarge => "headers_too_large",
            DecodeError::TooManyHeaders => "too_many_headers",
            DecodeError::BadHeaderLine => "bad_header_line",
            DecodeError::DuplicateHeader => "duplicate_header",
            DecodeError::ExtraFrames => "extra_frames",
            DecodeError::PayloadTooLarge => "payload_too_large",
            DecodeError::MissingHeader(_) => "missing_header",
            DecodeError::BadHeaderValue(_) => "bad_header_value",
            DecodeError::UnexpectedPayload => "unexpected_payload",
            DecodeError::NoAlias => "no_alias",
        }
    }
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DecodeError::MissingHeader(k) => write!(f, "missing header {k}"),
            DecodeError::BadHeaderValue(k) => write!(f, "bad value for header {k}"),
            other => f.write_str(other.reason()),
        }
    }
}

impl std::error::Error for DecodeError {}
