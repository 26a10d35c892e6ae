//! Start-up, serving and shutdown.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use jobyard_broker::{Broker, Compaction};
use jobyard_engine::Engine;
use jobyard_storage::{recover, DirLock, Log, LogOptions};
use tokio::signal::unix::{signal, SignalKind};
use tokio::sync::{watch, Notify, Semaphore};

use crate::listen::{self, Listener, Stream};
use crate::settings::Settings;

/// A start-up failure: its message and the process exit code (beanstalkd's codes).
struct Fatal(String, i32);

/// Runs the server until SIGTERM/SIGINT; returns the process exit code.
pub fn run(settings: Settings) -> i32 {
    init_logging(settings.verbosity);
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(worker_threads(settings.threads))
        .enable_all()
        .thread_name("jobyard")
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("jobyard: cannot start the runtime: {e}");
            return 1;
        }
    };
    match runtime.block_on(serve(settings)) {
        Ok(()) => 0,
        Err(Fatal(msg, code)) => {
            tracing::error!("{msg}");
            code
        }
    }
}

/// Runtime threads for connections: the setting, else `JOBYARD_THREADS` (which the
/// beanstalkd and gearmand command lines also honour), else one per core.
fn worker_threads(configured: Option<usize>) -> usize {
    configured
        .or_else(|| std::env::var("JOBYARD_THREADS").ok()?.parse().ok())
        .filter(|&n| n > 0)
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}

pub(crate) fn init_logging(verbosity: u8) {
    let default = match verbosity {
        0 => "info",
        1 => "debug",
        _ => "trace",
    };
    let filter = tracing_subscriber::EnvFilter::try_from_env("JOBYARD_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .try_init();
}

/// Opens the data directory: lock, recover, start the log. Keeps the lock alive with it.
fn open_storage(
    dir: &Path,
    settings: &Settings,
    durable_changed: Arc<Notify>,
) -> Result<(Engine, Log, DirLock), Fatal> {
    std::fs::create_dir_all(dir)
        .map_err(|e| Fatal(format!("cannot create {}: {e}", dir.display()), 1))?;
    let lock = DirLock::acquire(dir).map_err(|e| {
        Fatal(
            format!(
                "data directory {} is in use by another process ({e})",
                dir.display()
            ),
            10,
        )
    })?;
    let started = std::time::Instant::now();
    let mut engine = Engine::new();
    // beanstalkd creates `default` before replaying its log, so `list-tubes` (creation
    // order) starts with it after a restart too. Pinned so that replaying the deletion of
    // its last job cannot drop it and re-create it at the end of the list.
    if settings.beanstalk_listen.is_some() {
        let default = engine.queue_id_or_create(b"default");
        engine.pin(default);
    }
    let report = recover(dir, settings.salvage, |change| engine.replay(change))
        .map_err(|e| Fatal(format!("cannot recover the log: {e}"), 1))?;
    engine.raise_next_id(report.next_id);
    if let Some((path, offset, dropped)) = &report.torn_tail {
        tracing::warn!(
            "dropped {dropped} bytes of a record cut off at {}:{offset} (written when the \
             server stopped; never acknowledged)",
            path.display()
        );
    }
    for (path, offset, skipped) in &report.salvaged {
        tracing::warn!(
            "salvage: skipped {skipped} unreadable bytes at {}:{offset}",
            path.display()
        );
    }
    tracing::info!(
        "recovered {} jobs from {} records in {:?}",
        engine.job_count(),
        report.records,
        started.elapsed()
    );
    let options = LogOptions {
        fsync: settings.fsync,
        segment_bytes: settings.segment_bytes,
    };
    let notify = durable_changed.clone();
    let log = Log::open(
        dir,
        report.next_segment,
        options,
        Box::new(move |_| notify.notify_waiters()),
    )
    .map_err(|e| Fatal(format!("cannot open the log in {}: {e}", dir.display()), 1))?;
    Ok((engine, log, lock))
}

async fn serve(settings: Settings) -> Result<(), Fatal> {
    let durable_changed = Arc::new(Notify::new());
    let (engine, log, _lock) = match &settings.data_dir {
        Some(dir) => {
            let (engine, log, lock) = open_storage(dir, &settings, durable_changed.clone())?;
            (engine, Some((log, dir.clone())), Some(lock))
        }
        None => (Engine::new(), None, None),
    };
    let compaction = Compaction {
        min_bytes: settings.compact_min_bytes,
        ..Compaction::default()
    };
    let broker = Broker::new(engine, log, durable_changed, compaction);
    broker.start();

    // systemd socket activation replaces the configured addresses, as in beanstalkd.
    let mut activated =
        listen::activated().map_err(|e| Fatal(format!("socket activation: {e}"), 111))?;
    if !activated.is_empty() {
        tracing::info!(
            "socket activation: {} socket(s) from systemd",
            activated.len()
        );
    }
    // beanstalkd first: a single unnamed activated socket is beanstalkd's, as in beanstalkd.
    let beanstalk = listener_for(&settings.beanstalk_listen, &mut activated, "beanstalk").await?;
    let gearman = listener_for(&settings.gearman_listen, &mut activated, "gearman").await?;
    if gearman.as_ref().is_some_and(Listener::is_unix) {
        return Err(Fatal(
            "the Gearman listener takes TCP addresses only".into(),
            111,
        ));
    }
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
    let (shutdown_tx, shutdown_rx) = watch::channel(false);
    let slots = Arc::new(Semaphore::new(settings.max_connections));
    if let Some(listener) = beanstalk {
        let server = jobyard_beanstalk::Server::new(
            broker.clone(),
            settings.max_job_size,
            settings.segment_bytes,
        );
        tracing::info!("beanstalkd protocol listening on {}", listener.describe());
        let slots = slots.clone();
        let rx = shutdown_rx.clone();
        tokio::spawn(accept_loop(
            listener,
            slots,
            settings.max_connections,
            rx,
            move |s, rx| {
                let server = server.clone();
                async move {
                    match s {
                        Stream::Tcp(s) => jobyard_beanstalk::handle(s, server, rx).await,
                        Stream::Unix(s) => jobyard_beanstalk::handle_unix(s, server, rx).await,
                    }
                }
            },
        ));
    }
    // Notified by the Gearman admin `shutdown` command, when that command is allowed.
    let admin_shutdown = Arc::new(Notify::new());
    if let Some(listener) = gearman {
        let server = jobyard_gearman::Server::new(
            broker.clone(),
            (*settings.gearman).clone(),
            admin_shutdown.clone(),
        );
        tracing::info!("Gearman protocol listening on {}", listener.describe());
        let slots = slots.clone();
        let rx = shutdown_rx.clone();
        tokio::spawn(accept_loop(
            listener,
            slots,
            settings.max_connections,
            rx,
            move |s, rx| {
                let server = server.clone();
                async move {
                    // Checked at start-up: the Gearman listener is TCP.
                    if let Stream::Tcp(s) = s {
                        jobyard_gearman::handle(s, server, rx).await
                    }
                }
            },
        ));
    }
    tracing::info!(
        "jobyard {} ready (storage: {}, fsync: {:?})",
        env!("CARGO_PKG_VERSION"),
        settings
            .data_dir
            .as_ref()
            .map(|d| d.display().to_string())
            .unwrap_or_else(|| "memory only".into()),
        settings.fsync
    );

    wait_for_shutdown(&broker, &admin_shutdown).await;
    tracing::info!("shutting down: no new connections; finishing what is in flight");
    let _ = shutdown_tx.send(true);
    let all = settings.max_connections as u32;
    if tokio::time::timeout(Duration::from_secs(10), slots.acquire_many(all))
        .await
        .is_err()
    {
        tracing::warn!("some connections did not finish within 10 s");
    }
    broker.shutdown();
    tracing::info!("log flushed; bye");
    Ok(())
}

/// A protocol's listener: the activated socket meant for it if systemd passed one, else
/// its configured address; none when the protocol is off.
async fn listener_for(
    configured: &Option<String>,
    activated: &mut Vec<(Option<String>, Listener)>,
    protocol: &str,
) -> Result<Option<Listener>, Fatal> {
    let Some(addr) = configured else {
        return Ok(None);
    };
    match listen::take_activated(activated, protocol) {
        Some(l) => Ok(Some(l)),
        None => bind(addr).await.map(Some),
    }
}

async fn bind(addr: &str) -> Result<Listener, Fatal> {
    Listener::bind(addr)
        .await
        .map_err(|e| Fatal(format!("cannot listen on {addr}: {e}"), 111))
}

/// Accepts connections while slots are free; refuses (and says so in the log) otherwise.
async fn accept_loop<F>(
    listener: Listener,
    slots: Arc<Semaphore>,
    max: usize,
    mut shutdown: watch::Receiver<bool>,
    handler: impl Fn(Stream, watch::Receiver<bool>) -> F + Send + 'static,
) where
    F: std::future::Future<Output = ()> + Send + 'static,
{
    let mut last_warning: Option<std::time::Instant> = None;
    loop {
        let accepted = tokio::select! {
            a = listener.accept() => a,
            _ = shutdown.changed() => return,
        };
        let (stream, peer) = match accepted {
            Ok(a) => a,
            Err(e) => {
                tracing::warn!("accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let Ok(permit) = slots.clone().try_acquire_owned() else {
            if last_warning.is_none_or(|t| t.elapsed() > Duration::from_secs(1)) {
                tracing::warn!("connection limit of {max} reached: refusing {peer}");
                last_warning = Some(std::time::Instant::now());
            }
            drop(stream);
            continue;
        };
        let connection = handler(stream, shutdown.clone());
        tokio::spawn(async move {
            connection.await;
            drop(permit);
        });
    }
}

async fn wait_for_shutdown(broker: &Arc<Broker>, admin_shutdown: &Notify) {
    let mut term = signal(SignalKind::terminate()).expect("SIGTERM handler");
    let mut int = signal(SignalKind::interrupt()).expect("SIGINT handler");
    let mut usr1 = signal(SignalKind::user_defined1()).expect("SIGUSR1 handler");
    loop {
        tokio::select! {
            _ = term.recv() => return,
            _ = int.recv() => return,
            _ = admin_shutdown.notified() => return,
            _ = usr1.recv() => {
                tracing::info!("SIGUSR1: drain mode; puts now get DRAINING until restart");
                broker.start_draining();
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
