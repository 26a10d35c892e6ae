//! `jobyard wmp-worker` and `jobyard wmp-device`: thin command lines over the
//! `jobyard-wmp-worker` library (the worker SDK's command worker, and the device).

use std::time::Duration;

use clap::Args;
use jobyard_wmp_worker::device::Upstream;
use jobyard_wmp_worker::WorkerConfig;

/// `jobyard wmp-worker`: run COMMAND per job, body on stdin, stdout as the result.
#[derive(Args)]
pub struct WorkerArgs {
    /// Manager or device endpoint (repeat for several managers), e.g. tcp://127.0.0.1:5570.
    #[arg(long = "connect", required = true)]
    connect: Vec<String>,
    /// Queue to serve (repeat for several).
    #[arg(long = "role", required = true)]
    role: Vec<String>,
    /// Jobs run at once.
    #[arg(long, default_value_t = 1)]
    concurrency: usize,
    /// Name sent in READY (`worker=`), for the manager's listings.
    #[arg(long)]
    name: Option<String>,
    /// How long a lock waits for TAKE or NO, in milliseconds.
    #[arg(long, default_value_t = 5000)]
    lock_timeout_ms: u64,
    /// Longest READY retry interval, in milliseconds.
    #[arg(long, default_value_t = 30000)]
    ready_retry_max_ms: u64,
    /// More log output (-V debug, -VV trace).
    #[arg(short = 'V', action = clap::ArgAction::Count)]
    verbose: u8,
    /// The program and its arguments.
    #[arg(last = true, required = true)]
    command: Vec<String>,
}

/// `jobyard wmp-device`: forward between workers and managers.
#[derive(Args)]
pub struct DeviceArgs {
    /// Where workers (or lower devices) connect, e.g. tcp://0.0.0.0:5571.
    #[arg(long)]
    listen: String,
    /// An upstream manager or device: ENDPOINT or ALIAS=ENDPOINT (repeat).
    #[arg(long = "upstream", required = true)]
    upstream: Vec<String>,
    /// More log output (-V debug, -VV trace).
    #[arg(short = 'V', action = clap::ArgAction::Count)]
    verbose: u8,
}

/// Runs the command worker until SIGTERM/SIGINT; returns the exit code.
pub fn worker(args: WorkerArgs) -> i32 {
    crate::run::init_logging(args.verbose, Default::default());
    let config = WorkerConfig {
        concurrency: args.concurrency.max(1),
        name: args.name,
        lock_timeout: Duration::from_millis(args.lock_timeout_ms),
        ready_retry_max: Duration::from_millis(args.ready_retry_max_ms),
        ..WorkerConfig::default()
    };
    let result = runtime().block_on(jobyard_wmp_worker::run_command_worker(
        args.connect,
        args.role,
        args.command,
        config,
        stop_signal(),
    ));
    match result {
        Ok(stats) => {
            tracing::info!(?stats, "wmp worker stopped");
            0
        }
        Err(e) => {
            eprintln!("jobyard wmp-worker: {e}");
            2
        }
    }
}

/// Runs the device until SIGTERM/SIGINT; returns the exit code.
pub fn device(args: DeviceArgs) -> i32 {
    crate::run::init_logging(args.verbose, Default::default());
    let upstreams = args
        .upstream
        .iter()
        .enumerate()
        .map(|(i, s)| Upstream::parse(s, i))
        .collect();
    match runtime().block_on(jobyard_wmp_worker::device::run(
        &args.listen,
        upstreams,
        stop_signal(),
    )) {
        Ok(stats) => {
            tracing::info!(?stats, "wmp device stopped");
            0
        }
        Err(e) => {
            eprintln!("jobyard wmp-device: {e}");
            111
        }
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime")
}

async fn stop_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate()).expect("SIGTERM handler");
    tokio::select! {
        _ = term.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
}
