//! The bounds every WMP/1 decoder enforces, so that no peer can make a receiver hold more
//! than a known amount of memory for one message, and the heartbeat every WMP socket keeps.

use std::time::Duration;

/// Bounds for one decoded message. [`Limits::default`] is the published WMP/1 profile
/// (`docs/wmp.md`, "Limits"); a manager may lower or raise `max_payload` for its jobs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Most frames before the delimiter, counting the ROUTER's own routing id (16).
    pub max_path: usize,
    /// Longest path frame in bytes: a ZeroMQ routing id is at most 255 bytes.
    pub max_path_frame: usize,
    /// Largest headers frame in bytes (8 KiB).
    pub max_headers_bytes: usize,
    /// Most header lines (64): a dozen are defined, the rest is room for extensions.
    pub max_header_count: usize,
    /// Largest payload frame in bytes (the job body or the result).
    pub max_payload: usize,
}

/// Longest header key, in bytes.
pub const MAX_KEY_LEN: usize = 64;
/// Longest header value, in bytes.
pub const MAX_VALUE_LEN: usize = 1024;
/// ZMTP heartbeat interval of every WMP socket: a silent dead peer is noticed after three.
pub const HEARTBEAT: Duration = Duration::from_secs(5);

/// Longest frame that carries a command name (`CANCEL`, `STATUS` are the longest known).
pub const MAX_COMMAND_LEN: usize = 16;

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_path: 16,
            max_path_frame: 255,
            max_headers_bytes: 8 * 1024,
            max_header_count: 64,
            max_payload: 64 << 20,
        }
    }
}

impl Limits {
    /// Most frames a whole message may have: path, delimiter, signature, command, headers,
    /// payload.
    pub fn max_frames(&self) -> usize {
        self.max_path + 5
    }

    /// The largest single frame that lets every valid message in: the payload limit, or
    /// the headers limit if larger (path frames and the rest are smaller still). Sockets
    /// refuse a longer frame before reading it.
    pub fn max_frame_len(&self) -> usize {
        self.max_payload.max(self.max_headers_bytes)
    }
}
