//! The manager's state and its dispatch: one decoded message or engine notice at a time,
//! with the messages to send collected in [`Manager::out`] (the front end sends them after
//! the log has made every TAKE's attempt number durable).

use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use jobyard_broker::{Broker, Lsn, ProtocolMetrics};
use jobyard_engine::{ConnId, JobId, NoticeKind, QueueId};
use jobyard_wmp_wire::codec::{decode, encode};
use jobyard_wmp_wire::limits::Limits;
use jobyard_wmp_wire::message::{Command, Message, Path};

use crate::counters::{self, Counter};
use crate::leases::Retries;
use crate::registry::{ReadyRegistry, RegistryConfig};

/// Settings of the manager in `jobyard serve`.
#[derive(Debug, Clone)]
pub struct ManagerConfig {
    /// The `manager` header: stable across restarts so DONEs still match (decision 9).
    /// `None`: `HOSTNAME:PORT` of the listener.
    pub name: Option<String>,
    /// Largest DONE payload accepted (the server's job size limit).
    pub max_payload: usize,
    /// Remembered READYs: TTL, wake interval, bound.
    pub registry: RegistryConfig,
    /// `fail`s plus lease expiries before a job is buried (decision 5).
    pub failure_limit: u32,
    /// The Gearman job handle prefix when the server speaks Gearman: every TAKE then
    /// carries `handle=PREFIX:ID`, the handle Gearman clients know the job by (a foreground
    /// client was given it in JOB_CREATED), so a worker can correlate. `None`: no `handle`.
    pub gearman_handle_prefix: Option<String>,
}

impl Default for ManagerConfig {
    fn default() -> Self {
        ManagerConfig {
            name: None,
            max_payload: Limits::default().max_payload,
            registry: RegistryConfig::default(),
            failure_limit: 3,
            gearman_handle_prefix: None,
        }
    }
}

/// A message to send, with what to undo if its first hop is gone.
pub(crate) struct Outgoing {
    pub(crate) frames: Vec<Bytes>,
    pub(crate) kind: OutKind,
}

/// What an [`Outgoing`] is, for the bookkeeping after a failed send.
pub(crate) enum OutKind {
    /// A WAKE: if unreachable, the remembered READY is forgotten.
    Wake(Path),
    /// A TAKE: if unreachable the worker never got it, so the job goes back at once.
    Take {
        path: Path,
        job: JobId,
        attempt: u32,
    },
    /// A NO.
    No,
}

/// The queues of the engine wait that tells the manager when a job becomes ready.
#[derive(Debug, Default)]
pub(crate) struct Armed {
    pub(crate) names: std::collections::HashSet<String>,
    pub(crate) any: bool,
}

/// One manager: a broker session owning every lease it hands out.
pub(crate) struct Manager {
    pub(crate) broker: Arc<Broker>,
    pub(crate) conn: ConnId,
    pub(crate) name: String,
    pub(crate) limits: Limits,
    pub(crate) failure_limit: u32,
    /// See [`ManagerConfig::gearman_handle_prefix`].
    pub(crate) handle_prefix: Option<String>,
    /// Where a TAKE's `handle` is written, kept so writing one allocates nothing.
    pub(crate) handle_scratch: String,
    pub(crate) metrics: Arc<ProtocolMetrics>,
    pub(crate) registry: ReadyRegistry,
    pub(crate) retries: Retries,
    /// Messages to send once `lsn` is durable.
    pub(crate) out: Vec<Outgoing>,
    /// The log position the queued TAKEs' fences must reach first.
    pub(crate) lsn: Lsn,
    /// `Some` while an engine wait covers these queues; `None` while polling.
    pub(crate) armed: Option<Armed>,
    /// Queues pinned (as consumers) for the wait.
    pub(crate) pinned: Vec<QueueId>,
    /// When the next wake pass is due (polling while ready jobs wait for workers).
    pub(crate) pass_at: Option<Instant>,
}

impl Manager {
    pub(crate) fn new(
        broker: Arc<Broker>,
        conn: ConnId,
        name: String,
        config: &ManagerConfig,
        metrics: Arc<ProtocolMetrics>,
    ) -> Manager {
        Manager {
            broker,
            conn,
            name,
            limits: Limits {
                max_payload: config.max_payload,
                ..Limits::default()
            },
            failure_limit: config.failure_limit.max(1),
            handle_prefix: config.gearman_handle_prefix.clone(),
            handle_scratch: String::new(),
            metrics,
            registry: ReadyRegistry::new(config.registry),
            retries: Retries::default(),
            out: Vec::new(),
            lsn: 0,
            armed: None,
            pinned: Vec::new(),
            pass_at: Some(Instant::now()),
        }
    }

    /// Handles one received ZeroMQ message.
    pub(crate) fn on_frames(&mut self, frames: Vec<Bytes>) {
        let msg = match decode(&frames, &self.limits) {
            Ok(msg) => msg,
            Err(e) => {
                tracing::debug!(reason = e.reason(), error = %e, "wmp manager dropped a message");
                counters::malformed(&self.metrics, &e);
                return;
            }
        };
        let path = msg.path;
        match msg.command {
            Command::Ready(ready) => {
                counters::count(&self.metrics, Counter::Ready);
                self.on_ready(path, ready);
            }
            Command::Give(give) => {
                counters::count(&self.metrics, Counter::Give);
                self.on_give(path, give);
            }
            Command::Done(done) => {
                counters::count(&self.metrics, Counter::Done);
                self.on_done(done);
            }
            Command::Status(progress) => {
                counters::count(&self.metrics, Counter::Status);
                self.on_status(progress);
            }
            other => {
                tracing::debug!(
                    command = other.name(),
                    "wmp manager dropped a command meant for workers"
                );
                counters::count(&self.metrics, Counter::UnexpectedCommand);
            }
        }
    }

    /// Handles one engine notice for the manager's session.
    pub(crate) fn on_notice(&mut self, notice: NoticeKind) {
        match notice {
            // The wait ended because a watched queue has a ready job.
            NoticeKind::Wake => {
                self.armed = None;
                self.pass_at = Some(Instant::now());
            }
            NoticeKind::LeaseExpired(id) => self.on_lease_expired(id),
            _ => {}
        }
    }

    /// When the loop must run [`Manager::pass`] next.
    pub(crate) fn deadline(&self) -> Option<Instant> {
        match (self.pass_at, self.registry.next_deadline()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Queues a message for sending.
    pub(crate) fn send(&mut self, path: Path, command: Command, kind: OutKind) {
        self.out.push(Outgoing {
            frames: encode(&Message::new(path, command)),
            kind,
        });
    }

    /// Gives back what the session holds in the engine: the wait, the pinned queues, and
    /// (through the broker) the leases.
    pub(crate) fn stop(&mut self) {
        self.publish_stop();
        {
            let mut txn = self.broker.lock();
            txn.cancel_wait(self.conn);
            for q in self.pinned.drain(..) {
                txn.remove_consumer(q);
            }
        }
        self.broker.disconnect(self.conn);
    }
}
