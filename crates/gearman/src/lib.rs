//! The Gearman protocol (as gearmand 1.1 speaks it) on the jobyard engine.
//!
//! A front end of the connection layer ([`jobyard_net`]), shaped like the beanstalkd one:
//! [`decode`] frames bytes (bounded), [`packet`] knows the packet layouts, [`admin`] parses
//! admin text lines and `admin_exec` runs them, `session` applies requests to the engine,
//! `functions` keeps Gearman's function table and `registry` what else Gearman remembers.
//! A foreground client watches its job in the engine, so its WORK_* packets reach it
//! however the job ends. A Gearman function is an engine queue, so beanstalkd tubes and
//! Gearman functions of one name are one queue.

pub mod admin;
mod admin_exec;
pub mod decode;
mod functions;
pub mod handle;
mod jobs;
pub mod packet;
mod registry;
mod session;

use std::os::fd::AsRawFd;
use std::sync::{Arc, Mutex, MutexGuard};

use jobyard_broker::budget::InflightBudget;
use jobyard_broker::{Broker, ProtocolMetrics};
use jobyard_engine::ConnId;
use jobyard_net::{Peer, Protocol};
use tokio::sync::Notify;

/// The gearmand version jobyard's admin `version` reports (one token: tools parse it).
pub const PROTOCOL_VERSION: &str = "1.1.20";

/// Default largest packet body: 64 MiB. gearmand has no limit at all (it allocates
/// whatever a header claims); one is needed so a bad header cannot exhaust memory.
pub const DEFAULT_MAX_PACKET: u32 = 64 << 20;

/// Engine priorities for Gearman's three levels. HIGH sorts before every beanstalkd
/// "urgent" job, NORMAL equals beanstalkd's default-ish urgency threshold, LOW is last.
pub const PRI_HIGH: u32 = 0;
pub const PRI_NORMAL: u32 = 1024;
pub const PRI_LOW: u32 = u32::MAX;

/// Lease in seconds a beanstalkd consumer gets when it reserves a Gearman job.
pub const GEARMAN_JOB_TTR: u32 = 120;

/// TCP keepalive for accepted connections (gearmand's `--keepalive*`).
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct Keepalive {
    pub idle_secs: Option<u32>,
    pub interval_secs: Option<u32>,
    pub count: Option<u32>,
}

/// Settings of the Gearman listener, mostly gearmand's flags.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    /// Largest packet body accepted; larger ones get an ERROR and the connection closes.
    pub max_packet: u32,
    /// `--job-retries`: a job is handed out at most this many times (0 = unlimited).
    pub job_retries: u32,
    /// `--round-robin`: the ability just served goes to the back of the worker's list.
    pub round_robin: bool,
    /// `--exceptions`: every connection starts with the `exceptions` option on.
    pub exceptions: bool,
    /// Job handles are `PREFIX:ID` (`--job-handle-prefix`; default `H:<hostname>`).
    pub handle_prefix: String,
    /// Whether the admin `shutdown` command works (off by default: the admin protocol has
    /// no access control, and gearmand 1.1.15+ removed the command for that reason).
    pub allow_shutdown: bool,
    /// SO_KEEPALIVE settings for accepted sockets, if enabled.
    pub keepalive: Option<Keepalive>,
    /// What the `verbose` admin command reports (gearmand's level names).
    pub verbose_level: String,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            max_packet: DEFAULT_MAX_PACKET,
            job_retries: 0,
            round_robin: false,
            exceptions: false,
            handle_prefix: handle::default_prefix(),
            allow_shutdown: false,
            keepalive: None,
            verbose_level: "INFO".into(),
        }
    }
}

/// Shared state of the Gearman listener.
pub struct Server {
    pub broker: Arc<Broker>,
    pub config: Config,
    /// Bytes of unfinished packets all connections may buffer (shared with beanstalkd).
    pub inflight: Arc<InflightBudget>,
    registry: Mutex<registry::Registry>,
    shutdown: Arc<Notify>,
    pub(crate) metrics: Arc<ProtocolMetrics>,
}

impl Server {
    /// Creates the listener's state. `shutdown` is notified when an allowed admin
    /// `shutdown` command asks the whole server to stop.
    pub fn new(
        broker: Arc<Broker>,
        config: Config,
        shutdown: Arc<Notify>,
        inflight: Arc<InflightBudget>,
    ) -> Arc<Server> {
        let metrics = broker.metrics().protocol("gearman", &[]);
        Arc::new(Server {
            broker,
            config,
            inflight,
            registry: Mutex::new(registry::Registry::default()),
            shutdown,
            metrics,
        })
    }

    /// The Gearman-side state. Take the broker lock first if both are needed.
    pub(crate) fn registry(&self) -> MutexGuard<'_, registry::Registry> {
        self.registry.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn request_shutdown(&self) {
        self.shutdown.notify_one();
    }
}

impl Protocol for Server {
    type Decoder = decode::Decoder;
    type Session = session::Session;

    fn name(&self) -> &'static str {
        "gearman"
    }
    fn broker(&self) -> &Arc<Broker> {
        &self.broker
    }
    fn metrics(&self) -> &Arc<ProtocolMetrics> {
        &self.metrics
    }
    fn decoder(&self) -> decode::Decoder {
        decode::Decoder::with_budget(self.config.max_packet, self.inflight.clone())
    }
    fn open(self: &Arc<Self>, conn: ConnId, peer: &Peer) -> session::Session {
        session::Session::new(self.clone(), conn, peer.fd, peer.ip().to_string())
    }
    fn configure_tcp(&self, stream: &tokio::net::TcpStream) {
        if let Some(k) = &self.config.keepalive {
            if let Err(e) = set_keepalive(stream, k) {
                tracing::debug!("gearman: cannot set keepalive: {e}");
            }
        }
    }
}

/// SO_KEEPALIVE plus the TCP_KEEP* knobs gearmand's `--keepalive-*` flags set.
fn set_keepalive(stream: &tokio::net::TcpStream, k: &Keepalive) -> std::io::Result<()> {
    let fd = stream.as_raw_fd();
    let set = |level: libc::c_int, name: libc::c_int, value: u32| -> std::io::Result<()> {
        let v = value.min(i32::MAX as u32) as libc::c_int;
        // SAFETY: fd is a live socket owned by `stream`; we pass a pointer to a c_int and
        // its exact size.
        let rc = unsafe {
            libc::setsockopt(
                fd,
                level,
                name,
                (&v as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        if rc == 0 {
            Ok(())
        } else {
            Err(std::io::Error::last_os_error())
        }
    };
    set(libc::SOL_SOCKET, libc::SO_KEEPALIVE, 1)?;
    if let Some(v) = k.idle_secs {
        set(libc::IPPROTO_TCP, libc::TCP_KEEPIDLE, v)?;
    }
    if let Some(v) = k.interval_secs {
        set(libc::IPPROTO_TCP, libc::TCP_KEEPINTVL, v)?;
    }
    if let Some(v) = k.count {
        set(libc::IPPROTO_TCP, libc::TCP_KEEPCNT, v)?;
    }
    Ok(())
}
