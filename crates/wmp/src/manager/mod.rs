//! The WMP manager (docs/wmp.md, "Manager behaviour").
//!
//! The engine-independent rules (remembered READYs, wake throttling, effective roles of a
//! GIVE) are pure and unit-tested without sockets or an engine; with the `manager` feature,
//! [`WmpFrontEnd`] puts them on jobyard's engine as a front end of `jobyard serve`.

#[cfg(feature = "manager")]
mod core;
#[cfg(feature = "manager")]
mod counters;
#[cfg(feature = "manager")]
mod event_loop;
#[cfg(feature = "manager")]
mod frontend;
#[cfg(feature = "manager")]
mod leases;
#[cfg(feature = "manager")]
mod published;
mod registry;
mod roles;
#[cfg(feature = "manager")]
mod wakes;

#[cfg(feature = "manager")]
pub use self::core::ManagerConfig;
#[cfg(feature = "manager")]
pub use frontend::{is_manager_name, WmpFrontEnd};
pub use registry::{ReadyOutcome, ReadyRegistry, RegistryConfig};
pub use roles::{effective_roles, Choice};
