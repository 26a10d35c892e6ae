//! Engine-independent parts of a WMP manager (docs/wmp.md, "Manager behaviour"): which
//! workers to wake, and which queues a GIVE may take from. The manager in the job server
//! owns the engine calls (reserve, leases, requeue); these pure pieces decide the protocol
//! side, so every rule is unit-tested without sockets or an engine.

mod registry;
mod roles;

pub use registry::{ReadyOutcome, ReadyRegistry, RegistryConfig};
pub use roles::{effective_roles, Choice};
