//! The connection layer shared by every front end.
//!
//! A front end is three things: a decoder that frames bytes into requests (bounded), a
//! session that applies requests to the broker and writes replies, and its settings. This
//! crate does everything else, once: listening (TCP, UNIX sockets, systemd activation), the
//! connection limit, shutdown, and the loop of mini-redis's `connection.rs`/`server.rs` —
//! read, decode every complete request, execute, reply once the log made the changes a
//! reply acknowledges durable, and pass engine notices to the session in between.
//!
//! Front ends whose peers are not one TCP stream each (a ZeroMQ ROUTER carrying many
//! workers, stateless HTTP requests) implement [`FrontEnd`] themselves and take a
//! [`Slot`] from the [`Gate`] for each session they keep (a worker token), so the
//! connection limit and shutdown apply to them too.
//!
//! The thread model is decided in one place, [`runtime`]; with the adaptive model,
//! [`placement`] moves connections between one thread and the multi-threaded runtime.

mod connection;
mod frontend;
mod gate;
mod hop;
pub mod listen;
pub mod placement;
mod protocol;
pub mod runtime;

pub use connection::serve_stream;
pub use frontend::{serve, FrontEnd, TcpFrontEnd};
pub use gate::{Gate, Slot, StopBell, StopWait};
pub use listen::{Listener, Peer, Stream};
pub use protocol::{Decode, Protocol, Session, Step};
