//! The ini files jobd and jobd-master are configured with, read as jobd 1.12 reads them.

pub mod ini;
mod master;
mod values;
mod worker;

pub use ini::Ini;
pub use master::MasterConfig;
pub use worker::{hostname, JobdConfig, MysqlConfig};
