//! ZMTP 3.x (RFC 23/37, NULL mechanism) as pure code, for the manager's own ROUTER
//! (`jobyard-wmp`'s `router`, its sockets on `mio`), so that the manager's thread reads,
//! decodes, decides, encodes and writes with no libzmq I/O thread and no hand-off per
//! message (`docs/wmp.md`, "Transport"). The device and the worker SDK keep libzmq; each
//! end's test suite exercises the other.
//!
//! - [`greeting`], [`frame`], [`command`]: the wire formats, pure functions.
//! - [`session`]: one connection's protocol as a pure state machine (bytes in, events out).
//!
//! Every length a peer announces is checked against a limit before any buffer grows for
//! it (fuzzed by `fuzz/fuzz_targets/zmtp_decoder.rs`).

pub mod command;
pub mod frame;
pub mod greeting;
pub mod session;
