//! The drop-in command lines: each takes an original server's or tool's own flags, so
//! service files and scripts written for it keep working when the binary is installed (or
//! symlinked) under that name. Each file turns one original's command line into what
//! `jobyard` runs; none serves a protocol itself.

pub mod beanstalkd;
pub mod gearmand;
pub mod jobd;
pub mod wmp;
