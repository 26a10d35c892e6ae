//! The outcome of a send, in one type for both ends so that the manager's router and the
//! libzmq sockets of the device and the worker are handled by the same rules.

/// What became of a message handed to a socket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sent {
    /// Queued for the peer (in libzmq, or in the manager's ZMTP router).
    Queued,
    /// The peer's queue is full (high-water mark): dropped; a manager drops WAKEs first.
    Full,
    /// A ROUTER has no peer with that routing id (`EHOSTUNREACH`): the path is gone, forget it.
    Unreachable,
    /// Another error; dropped.
    Failed,
}
