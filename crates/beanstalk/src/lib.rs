//! The beanstalkd protocol on the jobyard engine.
//!
//! Reading follows the frame → parse → apply → reply shape: [`decode`] turns bytes into
//! requests (bounded), [`command`] parses lines, [`session`] applies requests to the engine,
//! and [`connection`] runs the loop, sending replies only once their log records are
//! durable. A tube is an engine queue; nothing here is specific to how jobs are stored.

pub mod command;
mod connection;
pub mod decode;
mod session;
mod stats;

use std::sync::Arc;

use jobyard_broker::budget::InflightBudget;
use jobyard_broker::Broker;

pub use connection::{handle, handle_unix};
pub use stats::Stats;

/// Settings and shared state of the beanstalkd listener.
pub struct Server {
    pub broker: Arc<Broker>,
    pub stats: Stats,
    /// Largest accepted body (`-z`); a body of exactly this size is accepted.
    pub max_job_size: u32,
    /// Reported as `binlog-max-size`.
    pub segment_bytes: u64,
    /// Bytes of unfinished put bodies all connections may buffer (shared with Gearman).
    pub inflight: Arc<InflightBudget>,
}

impl Server {
    /// Creates the listener's state and pins `default`, which beanstalkd always has.
    pub fn new(
        broker: Arc<Broker>,
        max_job_size: u32,
        segment_bytes: u64,
        inflight: Arc<InflightBudget>,
    ) -> Arc<Server> {
        {
            let mut txn = broker.lock();
            let q = txn.queue_id_or_create(b"default");
            txn.pin(q);
        }
        Arc::new(Server {
            broker,
            stats: Stats::new(),
            max_job_size,
            segment_bytes,
            inflight,
        })
    }
}
