//! 14/WMP's worker side (`docs/wmp.md`): what runs beside the jobs rather than in the
//! server. Used by `jobyard wmp-worker` and `jobyard wmp-device`, and by any Rust program
//! that serves WMP managers.
//!
//! - [`worker`]: an async worker with a handler per role, serving several managers at once.
//! - [`command`]: the command worker, a program run per job ([`run_command_worker`]).
//! - [`device`]: a stateless forwarder between workers and many managers.
//! - [`transport`], [`link`]: libzmq sockets driven from tokio, and one connection that
//!   reports its ups and downs; why libzmq and not the pure-Rust `zeromq` crate is in
//!   [`transport`] and `docs/wmp.md`.
//!
//! The messages are [`jobyard_wmp_wire`]'s (re-exported as [`wire`]). Nothing here depends
//! on the server's engine, broker or storage: a worker builds without them.

#![warn(missing_docs)]

pub mod command;
pub mod device;
pub mod link;
pub mod transport;
pub mod worker;

pub use command::run_command_worker;
pub use jobyard_wmp_wire as wire;
pub use worker::{Job, Outcome, Worker, WorkerConfig};
/// The `zmq` crate whose sockets and errors [`transport`] hands out.
pub use zmq;
