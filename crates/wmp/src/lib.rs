//! 14/WMP, the ZeroMQ Worker-Manager Protocol, as jobyard publishes it (`docs/wmp.md`):
//! the message codec, the device, and the worker SDK.
//!
//! - [`codec`]: frames ⇄ [`Message`] with every WMP/1 check and bound ([`Limits`]); pure,
//!   shared by managers, devices and workers, fuzzed by `fuzz/fuzz_targets/wmp_decoder.rs`.
//! - [`route`]: the device's alias-stack rule, pure.
//! - [`manager`]: the engine-independent manager rules (remembered READYs, wake
//!   throttling, effective roles of a GIVE), pure.
//! - [`device`]: a stateless forwarder between workers and many managers.
//! - [`worker`]: an async worker with a handler per role; [`command::run_command_worker`]
//!   runs a program per job.
//!
//! - [`zmtp`]: the manager's own ZMTP 3.x ROUTER (codec pure and fuzzed; sockets on `mio`).
//!
//! Transport of the device and the worker ([`transport`], [`link`]) is libzmq (the `zmq` crate, libzmq built from source)
//! driven from tokio; why not the pure-Rust `zeromq` crate is in [`transport`] and
//! `docs/wmp.md`.

#![warn(missing_docs)]

pub mod codec;
#[cfg(feature = "transport")]
pub mod command;
#[cfg(feature = "transport")]
pub mod device;
pub mod error;
pub mod headers;
pub mod limits;
#[cfg(feature = "transport")]
pub mod link;
pub mod manager;
pub mod message;
pub mod route;
#[cfg(feature = "transport")]
pub mod transport;
#[cfg(feature = "transport")]
pub mod worker;
pub mod zmtp;

pub use codec::{decode, encode, envelope, Envelope, SIGNATURE};
#[cfg(feature = "transport")]
pub use command::run_command_worker;
pub use error::DecodeError;
pub use headers::Headers;
pub use limits::Limits;
pub use message::*;
