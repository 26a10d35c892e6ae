//! Start-up, serving and shutdown.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use jobyard_broker::budget::InflightBudget;
use jobyard_broker::{Broker, ClusterView, Compaction, StorageOptions};
use jobyard_net::placement::Placement;
use jobyard_net::{listen, FrontEnd, Gate, Listener, TcpFrontEnd};
use tokio::signal::unix::{signal, SignalKind};
use tokio::sync::Notify;

use crate::settings::{LogFormat, Settings};
use crate::standby::{self, DoorConfig, FrontDoor, HandedOver};

/// A start-up failure: its message and the process exit code (beanstalkd's codes).
struct Fatal(String, i32);

/// Runs the server until SIGTERM/SIGINT; returns the process exit code.
pub fn run(settings: Settings) -> i32 {
    init_logging(settings.verbosity, settings.log_format);
    let model = jobyard_net::runtime::model(settings.thread_model, settings.threads);
    let runtimes = match jobyard_net::runtime::build(settings.threads, model) {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("jobyard: cannot start the runtime: {e}");
            return 1;
        }
    };
    match runtimes.main.block_on(serve(settings, runtimes.placement)) {
        Ok(()) => 0,
        Err(Fatal(msg, code)) => {
            tracing::error!("{msg}");
            code
        }
    }
}

pub(crate) fn init_logging(verbosity: u8, format: LogFormat) {
    let default = match verbosity {
        0 => "info",
        1 => "debug",
        _ => "trace",
    };
    let filter = tracing_subscriber::EnvFilter::try_from_env("JOBYARD_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let _ = match format {
        LogFormat::Json => builder.json().flatten_event(true).try_init(),
        LogFormat::Text => builder
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .try_init(),
    };
}

/// Where the jobs live, for the log (a PostgreSQL URL without its password).
fn storage_shown(settings: &Settings) -> String {
    match (&settings.postgres, &settings.data_dir) {
        (Some(pg), _) => format!("{}, schema {}", pg.shown(), pg.schema),
        (None, Some(dir)) => dir.display().to_string(),
        (None, None) => "memory only".into(),
    }
}

fn open_broker(
    settings: &Settings,
    cluster_view: Option<Arc<ClusterView>>,
) -> Result<Arc<Broker>, Fatal> {
    // beanstalkd creates `default` before replaying its log, so `list-tubes` (creation
    // order) starts with it after a restart too.
    let queues_first = match settings.beanstalk_listen {
        Some(_) => vec![Bytes::from_static(b"default")],
        None => Vec::new(),
    };
    Broker::open(StorageOptions {
        data_dir: settings.data_dir.clone(),
        fsync: settings.fsync,
        segment_bytes: settings.segment_bytes,
        compaction: Compaction {
            min_bytes: settings.compact_min_bytes,
            ..Compaction::default()
        },
        salvage: settings.salvage,
        bodies_in_log: settings.bodies_in_log,
        hot_body_bytes: settings.hot_body_bytes,
        queues_first,
        postgres: settings.postgres.clone(),
        cluster_view,
    })
    .map_err(|e| Fatal(e.message, e.exit_code))
}

/// [`open_broker`] on a blocking thread, so that SIGTERM or SIGINT while it waits (for
/// PostgreSQL to answer, or as a standby for the leader's lease) stops the process:
/// nothing has been served yet by this node, so there is nothing to finish.
///
/// With PostgreSQL storage, while this node is a standby the front door forwards its
/// clients to the leader (crate::standby); once the node leads, the door closes and its
/// listening sockets are returned for the real front ends.
async fn open_broker_or_stop(
    settings: &Settings,
    signals: &mut Signals,
    activated: &mut Vec<(Option<String>, Listener)>,
) -> Result<(Arc<Broker>, Option<HandedOver>), Fatal> {
    let view = settings
        .postgres
        .as_ref()
        .map(|pg| Arc::new(ClusterView::new(pg.node_name.clone())));
    let opening = {
        let settings = settings.clone();
        let view = view.clone();
        tokio::task::spawn_blocking(move || open_broker(&settings, view))
    };
    tokio::pin!(opening);
    let mut front_door: Option<FrontDoor> = None;
    loop {
        let standing_by = async {
            match &view {
                Some(view) if front_door.is_none() => standby::standing_by(view).await,
                _ => std::future::pending().await,
            }
        };
        tokio::select! {
            opened = &mut opening => {
                let broker =
                    opened.map_err(|e| Fatal(format!("opening storage failed: {e}"), 1))??;
                let handed = match front_door.take() {
                    Some(door) => Some(door.close().await),
                    None => None,
                };
                return Ok((broker, handed));
            }
            () = standing_by => {
                let view = view.clone().expect("a view with PostgreSQL storage");
                let door = FrontDoor::open(&door_config(settings), view, activated)
                    .await
                    .map_err(|e| Fatal(e, 111))?;
                front_door = Some(door);
            }
            _ = signals.term.recv() => stop_while_opening("SIGTERM"),
            _ = signals.int.recv() => stop_while_opening("SIGINT"),
        }
    }
}

/// What a standby's front door listens on: the listeners the node will serve on.
fn door_config(settings: &Settings) -> DoorConfig {
    DoorConfig {
        beanstalk: settings.beanstalk_listen.clone(),
        gearman: settings.gearman_listen.clone(),
        http: (settings.http_listen.clone()).map(|addr| (addr, (*settings.http_security).clone())),
        max_connections: settings.max_connections,
    }
}

/// Ends the process on a signal that came before the server served anything.
fn stop_while_opening(signal: &str) -> ! {
    tracing::info!("{signal} while opening storage: stopping");
    std::process::exit(0);
}

async fn serve(settings: Settings, placement: Option<Arc<Placement>>) -> Result<(), Fatal> {
    // Taken over first: a SIGTERM that arrives while the server starts (after its first
    // replies, before the main loop) must mean a clean stop, not the default kill.
    let mut signals = Signals::install();
    // Before anything is recorded, so `/metrics` counts from the start; only with the HTTP
    // listener that serves it (an installed recorder costs every metric update a lookup).
    if settings.http_listen.is_some() {
        jobyard_http::install_metrics();
    }
    // systemd socket activation replaces the configured addresses, as in beanstalkd.
    // Taken before storage opens: a standby's front door listens on the same sockets.
    let mut activated =
        listen::activated().map_err(|e| Fatal(format!("socket activation: {e}"), 111))?;
    if !activated.is_empty() {
        tracing::info!(
            "socket activation: {} socket(s) from systemd",
            activated.len()
        );
    }
    let (broker, handed_over) =
        open_broker_or_stop(&settings, &mut signals, &mut activated).await?;
    let mut front_door_http = None;
    if let Some(handed) = handed_over {
        // The front door's sockets, taken by name as systemd's are.
        activated.splice(0..0, handed.streams);
        front_door_http = handed.http;
    }
    broker.start();
    broker.start_enqueue(settings.max_job_size as usize);
    // Flows of the config are declared (logged only when new or changed) before any
    // front end can create jobs in them.
    if !settings.flows.is_empty() {
        let lsn = {
            let mut txn = broker.lock();
            for flow in settings.flows.iter().cloned() {
                txn.define_flow(flow);
            }
            txn.commit()
        };
        broker.wait_durable(lsn).await;
    }
    // So are the config's queue policies, before any front end hands out a job.
    crate::settings::queue_policies::apply(&broker, &settings.queues).await;
    // And its schedules, before a front end could see their first jobs.
    crate::settings::schedules::apply(&broker, &settings.schedules).await;

    // The HTTP front end binds its address itself: the front door's socket goes first.
    drop(front_door_http);
    // Notified by the Gearman admin `shutdown` command, when that command is allowed.
    let admin_shutdown = Arc::new(Notify::new());
    let front_ends = front_ends(&settings, &broker, &mut activated, &admin_shutdown).await?;
    for (name, unused) in &activated {
        tracing::warn!(
            "socket activation: no protocol takes {} ({}); ignored",
            unused.describe(),
            name.as_deref().unwrap_or("unnamed")
        );
    }
    if let Some(user) = &settings.user {
        drop_privileges(user).map_err(|e| Fatal(e, 111))?;
    }
    let gate = Gate::new(settings.max_connections).placed_by(placement);
    jobyard_net::serve(front_ends, &gate);
    tracing::info!(
        "jobyard {} ready (storage: {}, fsync: {:?})",
        env!("CARGO_PKG_VERSION"),
        storage_shown(&settings),
        settings.fsync
    );

    signals.wait_for_shutdown(&broker, &admin_shutdown).await;
    tracing::info!("shutting down: no new connections; finishing what is in flight");
    if !gate.shut_down(Duration::from_secs(10)).await {
        tracing::warn!("some connections did not finish within 10 s");
    }
    broker.shutdown();
    tracing::info!("log flushed; bye");
    Ok(())
}

/// The configured front ends, each with its listener. beanstalkd comes first: a single
/// unnamed activated socket is beanstalkd's, as in beanstalkd.
async fn front_ends(
    settings: &Settings,
    broker: &Arc<Broker>,
    activated: &mut Vec<(Option<String>, Listener)>,
    admin_shutdown: &Arc<Notify>,
) -> Result<Vec<Box<dyn FrontEnd>>, Fatal> {
    let mut front_ends: Vec<Box<dyn FrontEnd>> = Vec::new();
    // Body bytes in flight, shared by every protocol's decoders.
    let inflight = InflightBudget::new(settings.max_inflight_bytes);
    if let Some(addr) = &settings.beanstalk_listen {
        let listener = bind(addr, activated, "beanstalk").await?;
        let config = jobyard_beanstalk::Config {
            max_job_size: settings.max_job_size,
            segment_bytes: settings.segment_bytes,
        };
        front_ends.push(Box::new(TcpFrontEnd {
            protocol: jobyard_beanstalk::Server::new(broker.clone(), config, inflight.clone()),
            listener,
        }));
    }
    if let Some(addr) = &settings.gearman_listen {
        let listener = bind(addr, activated, "gearman").await?;
        if listener.is_unix() {
            return Err(Fatal(
                "the Gearman listener takes TCP addresses only".into(),
                111,
            ));
        }
        let protocol = jobyard_gearman::Server::new(
            broker.clone(),
            (*settings.gearman).clone(),
            admin_shutdown.clone(),
            inflight.clone(),
        );
        front_ends.push(Box::new(TcpFrontEnd { protocol, listener }));
    }
    if let Some(addr) = &settings.http_listen {
        let config = jobyard_http::Config {
            max_job_size: settings.max_job_size,
            worker_idle: settings.http_worker_idle,
            security: (*settings.http_security).clone(),
        };
        let http = jobyard_http::HttpFrontEnd::bind(broker.clone(), config, addr)
            .await
            .map_err(|e| Fatal(format!("cannot listen on {addr}: {e}"), 111))?;
        front_ends.push(Box::new(http));
    }
    if let Some(wmp) = &settings.wmp {
        let endpoint = &wmp.listen;
        let config = jobyard_wmp::ManagerConfig {
            name: wmp.name.clone(),
            max_payload: settings.max_job_size as usize,
            gearman_handle_prefix: settings
                .gearman_listen
                .as_ref()
                .map(|_| settings.gearman.handle_prefix.clone()),
            ..Default::default()
        };
        let wmp = jobyard_wmp::WmpFrontEnd::bind(broker.clone(), endpoint, config)
            .map_err(|e| Fatal(format!("cannot listen on {endpoint}: {e}"), 111))?;
        front_ends.push(Box::new(wmp));
    }
    if let Some(path) = &settings.jobd_config {
        let jobd = jobyard_jobd::JobdFrontEnd::bind(broker.clone(), path)
            .await
            .map_err(|e| Fatal(e, 111))?;
        front_ends.push(Box::new(jobd));
    }
    Ok(front_ends)
}

/// A protocol's listener: the activated socket meant for it, else its configured address.
async fn bind(
    addr: &str,
    activated: &mut Vec<(Option<String>, Listener)>,
    protocol: &str,
) -> Result<Listener, Fatal> {
    listen::listener_for(addr, activated, protocol)
        .await
        .map_err(|e| Fatal(format!("cannot listen on {addr}: {e}"), 111))
}

/// The signals the server handles, registered at start.
struct Signals {
    term: tokio::signal::unix::Signal,
    int: tokio::signal::unix::Signal,
    usr1: tokio::signal::unix::Signal,
}

impl Signals {
    fn install() -> Signals {
        Signals {
            term: signal(SignalKind::terminate()).expect("SIGTERM handler"),
            int: signal(SignalKind::interrupt()).expect("SIGINT handler"),
            usr1: signal(SignalKind::user_defined1()).expect("SIGUSR1 handler"),
        }
    }

    /// Returns on SIGTERM, SIGINT or an allowed admin `shutdown`; SIGUSR1 starts draining.
    async fn wait_for_shutdown(mut self, broker: &Arc<Broker>, admin_shutdown: &Notify) {
        loop {
            tokio::select! {
                _ = self.term.recv() => return,
                _ = self.int.recv() => return,
                _ = admin_shutdown.notified() => return,
                _ = self.usr1.recv() => {
                    tracing::info!("SIGUSR1: drain mode; puts now get DRAINING until restart");
                    broker.start_draining();
                }
            }
        }
    }
}

/// Switches to `user` and its group after binding (beanstalkd `-u`).
fn drop_privileges(user: &str) -> Result<(), String> {
    let name = std::ffi::CString::new(user).map_err(|_| format!("bad user name {user:?}"))?;
    // SAFETY: getpwnam returns a pointer into static storage valid until the next call;
    // we read the two ids at once. setgid/setuid take plain integers.
    unsafe {
        let pw = libc::getpwnam(name.as_ptr());
        if pw.is_null() {
            return Err(format!("unknown user {user:?}"));
        }
        let (uid, gid) = ((*pw).pw_uid, (*pw).pw_gid);
        if libc::setgid(gid) != 0 || libc::setuid(uid) != 0 {
            return Err(format!(
                "cannot become {user}: {}",
                std::io::Error::last_os_error()
            ));
        }
    }
    Ok(())
}
