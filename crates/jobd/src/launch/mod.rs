//! Launching a job's process and hearing how it ended. Nothing here knows jobd: a
//! [`LaunchSpec`] and a job id give a process in a session of its own ([`start`]), whose
//! [`Running::wait`] gives its [`Outcome`].

mod job;
mod process;
mod signals;
pub mod spawn;

pub use job::{argv, LaunchSpec, Outcome};
pub use process::{start, Running, PIPE_GRACE};
pub use signals::{signal_group, signal_name, signal_number};
