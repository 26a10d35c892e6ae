//! 14/WMP's manager (`docs/wmp.md`, "Manager behaviour"): the front end that
//! `jobyard serve --wmp-listen` runs beside the beanstalkd, Gearman and HTTP ones. Its WMP
//! roles are the engine's queues, and one broker session holds every lease it hands out;
//! the server (`crates/server`) is its only user. Workers and devices are
//! `jobyard-wmp-worker`; the messages both speak are `jobyard-wmp-wire`.
//!
//! - [`WmpFrontEnd`] (`frontend`): binds the ROUTER and starts the manager's thread
//!   (`event_loop`), which sends after the log made each batch's TAKEs durable.
//! - `manager`: the state and its dispatch; `wakes` (READY and WAKE), `leases` (GIVE,
//!   DONE, STATUS, expiry), `published` (the broker's worker registry), `counters`.
//! - [`ReadyRegistry`] and [`effective_roles`]: the rules that need no engine (remembered
//!   READYs and wake throttling, the roles a GIVE may be served from), public so they are
//!   tested without sockets.
//! - `router`: the manager's own ZMTP 3.x ROUTER on `mio`, the sockets around the pure
//!   ZMTP codecs of `jobyard_wmp_wire::zmtp`. It stays here, not in the wire crate, because
//!   only the manager serves ZMTP itself (the worker side uses libzmq), and sockets and a
//!   poll loop are not wire format.

#![warn(missing_docs)]

mod counters;
mod event_loop;
mod frontend;
mod leases;
mod manager;
mod published;
mod registry;
mod roles;
mod router;
mod wakes;

pub use frontend::{is_manager_name, WmpFrontEnd};
pub use manager::ManagerConfig;
pub use registry::{ReadyOutcome, ReadyRegistry, RegistryConfig};
pub use roles::{effective_roles, Choice};
