//! The beanstalkd protocol on the jobyard engine.
//!
//! A front end of the connection layer ([`jobyard_net`]): [`decode`] turns bytes into
//! requests (bounded), [`command`] parses lines, and `session` applies requests to the
//! engine and writes replies; the layer runs the loop and sends replies only once their log
//! records are durable. A tube is an engine queue; nothing here is specific to how jobs
//! are stored.

pub mod command;
pub mod decode;
mod session;
mod stats;

use std::sync::Arc;

use jobyard_broker::budget::InflightBudget;
use jobyard_broker::{Broker, ProtocolMetrics};
use jobyard_engine::ConnId;
use jobyard_net::{Peer, Protocol};

pub use stats::{Counted, Stats, COUNTED_NAMES};

/// The beanstalkd protocol version jobyard implements: what `stats` reports as `version`
/// (tools compare it), and what `jobyard beanstalkd -v` prints.
pub const PROTOCOL_VERSION: &str = "1.12";

/// Settings of the beanstalkd front end.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Config {
    /// Largest accepted body (`-z`); a body of exactly this size is accepted.
    pub max_job_size: u32,
    /// Reported as `binlog-max-size`.
    pub segment_bytes: u64,
}

/// The beanstalkd front end: settings and state shared by its connections.
pub struct Server {
    pub broker: Arc<Broker>,
    pub config: Config,
    pub stats: Stats,
    /// Bytes of unfinished put bodies all connections may buffer (shared with Gearman).
    pub inflight: Arc<InflightBudget>,
    pub(crate) metrics: Arc<ProtocolMetrics>,
}

impl Server {
    /// Creates the front end and pins `default`, which beanstalkd always has.
    pub fn new(broker: Arc<Broker>, config: Config, inflight: Arc<InflightBudget>) -> Arc<Server> {
        {
            let mut txn = broker.lock();
            let q = txn.queue_id_or_create(b"default");
            txn.pin(q);
        }
        let metrics = broker.metrics().protocol("beanstalk", &COUNTED_NAMES);
        Arc::new(Server {
            broker,
            config,
            stats: Stats::new(),
            inflight,
            metrics,
        })
    }
}

impl Protocol for Server {
    type Decoder = decode::Decoder;
    type Session = session::Session;

    fn name(&self) -> &'static str {
        "beanstalk"
    }
    fn broker(&self) -> &Arc<Broker> {
        &self.broker
    }
    fn metrics(&self) -> &Arc<ProtocolMetrics> {
        &self.metrics
    }
    fn decoder(&self) -> decode::Decoder {
        decode::Decoder::with_budget(self.config.max_job_size, self.inflight.clone())
    }
    fn open(self: &Arc<Self>, conn: ConnId, _peer: &Peer) -> session::Session {
        session::Session::new(self.clone(), conn)
    }
}
