//! The jobd wire format: UTF-8 JSON arrays, each followed by one EOT byte (`0x04`), and
//! the checks jobd makes on requests' arguments.
//!
//! [`Decoder`] cuts a connection's bytes into messages and validates them exactly as jobd
//! does (same checks, same order, same error strings), so clients that match on those
//! strings keep working. Unlike jobd, every frame is bounded ([`MAX_REQUEST_FRAME`] for
//! what servers read), and text that is not JSON gets a `no: 0` error instead of silence.
//! Everything here is free of I/O (the fuzz target drives the decoder directly).

mod decode;
mod encode;
mod js;
mod memory_usage;
mod message;
pub mod validate;

pub use decode::{parse, Decoder};
pub use encode::{encode_data, encode_error, encode_ping, encode_pong, encode_request};
pub use js::{js_string, js_typeof};
pub use memory_usage::memory_usage;
pub use message::{Incoming, Request, Response};

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
