//! jobd drop-in: the jobd worker daemon, jobd-master and jobctl, speaking jobd 1.12's
//! EOT-framed JSON protocol and working on the user's own MySQL jobs table.
//!
//! Layout, one folder per role:
//!
//! - [`protocol`]: the wire format (decoder, encoders, messages) and jobd's checks of
//!   request arguments; free of I/O (fuzzed through the decoder).
//! - [`connection`]: one connection in either direction, shared by the three programs:
//!   the rules each message is put through (password, pings, invalid and oversized
//!   messages), and a [`connection::PeerConnection`] that answers the peer's requests and
//!   carries ours.
//! - [`config`]: the ini dialect and the worker's and master's configs.
//! - [`worker`]: the worker daemon (accepting, request handlers, run-manual, fetches, the
//!   runner, storing ends, the master registration, shutdown), its targets as queues of
//!   jobyard's engine (`worker::scheduler`), its speed-ups (`worker::batching`,
//!   `worker::carry`), and the worker as a front end of `jobyard serve`
//!   (`worker::front_end`).
//! - [`store`]: the user's MySQL table (fetches, run-manual claims, ends, reconciliation),
//!   the SQL text of fetches, the dedicated connections and the batched done writer.
//! - [`launch`]: running a job's process and reading how it ended; it knows nothing of
//!   jobd and can run a command per job for any queue.
//! - [`master`]: jobd-master, fanning requests out to registered workers.
//! - [`jobctl`]: the client's commands and what it prints.
//!
//! The command lines of `jobd`, `jobd-master` and `jobctl` are the `jobyard` binary's
//! (its drop-in command lines); this crate offers what they call: the configs' parsers,
//! [`start_jobd`], [`start_master`] and [`jobctl::run_command`].

pub mod config;
pub mod connection;
pub mod jobctl;
pub mod launch;
pub mod master;
pub mod protocol;
#[cfg(feature = "mysql")]
pub mod store;
#[cfg(feature = "mysql")]
pub mod worker;

pub use config::{JobdConfig, MasterConfig};
pub use master::{start_master, MasterHandle};
#[cfg(feature = "mysql")]
pub use worker::{serve_jobd, start_jobd, start_jobd_with, JobdFrontEnd, JobdHandle, Worker};
