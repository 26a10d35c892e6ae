//! One jobd connection, shared by the worker, the master and jobctl: the rules each
//! decoded message is put through ([`rules`]), the live connection that answers the
//! peer's requests and carries ours ([`peer`]), and its reading and writing tasks.

mod loops;
pub mod peer;
pub mod rules;

pub use loops::MAX_IN_FLIGHT;
pub use peer::{PeerConnection, Reply, ReplyFuture, RequestError, RequestHandler};
pub use rules::{is_localhost, Action, ConnectionRules};
