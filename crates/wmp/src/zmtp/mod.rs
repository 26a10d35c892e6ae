//! The manager's own ZMTP 3.x (RFC 23/37, NULL mechanism) ROUTER, so that the manager's
//! thread reads, decodes, decides, encodes and writes with no libzmq I/O thread and no
//! hand-off per message (`docs/wmp.md`, "Transport"). The device and the worker SDK keep
//! libzmq; each end's test suite exercises the other.
//!
//! - [`greeting`], [`frame`], [`command`]: the wire formats, pure functions.
//! - [`session`]: one connection's protocol as a pure state machine (bytes in, events out).
//! - `router` (with the `manager` feature): the sockets, on one `mio` poll.
//!
//! Every length a peer announces is checked against a limit before any buffer grows for
//! it (fuzzed by `fuzz/fuzz_targets/zmtp_decoder.rs`).

pub mod command;
pub mod frame;
pub mod greeting;
#[cfg(feature = "manager")]
pub mod router;
pub mod session;
