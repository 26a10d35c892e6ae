//! 14/WMP's wire format (`docs/wmp.md`), shared by both ends: the manager inside
//! `jobyard serve` (`jobyard-wmp`) and the worker side, the worker SDK, the command worker
//! and the device (`jobyard-wmp-worker`). Pure code over bytes: no sockets, no threads, no
//! engine, so either end builds without the other's dependencies and the fuzz targets
//! (`fuzz/fuzz_targets/wmp_decoder.rs`, `zmtp_decoder.rs`) build without either.
//!
//! - [`codec`]: frames ⇄ [`Message`] with every WMP/1 check, within [`Limits`].
//! - [`route`]: the device's alias-stack rule.
//! - [`zmtp`]: the ZMTP 3.x greeting, frame and command codecs and one connection's
//!   protocol as a state machine. They are here rather than with the manager's router
//!   (which alone uses them today, on `mio` sockets) because they read untrusted bytes and
//!   are fuzzed, and a pure codec belongs with the other codecs; the sockets stay with the
//!   manager.
//! - [`Sent`]: what became of a message handed to a socket, reported alike by the
//!   manager's router and the worker side's libzmq sockets.

#![warn(missing_docs)]

pub mod codec;
pub mod error;
pub mod headers;
pub mod limits;
pub mod message;
pub mod route;
mod sent;
pub mod zmtp;

pub use codec::{decode, encode, envelope, Envelope, SIGNATURE};
pub use error::DecodeError;
pub use headers::Headers;
pub use limits::{Limits, HEARTBEAT};
pub use message::*;
pub use sent::Sent;
