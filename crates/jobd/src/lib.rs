//! jobd drop-in: the jobd worker daemon, jobd-master and jobctl, speaking jobd 1.12's
//! EOT-framed JSON protocol and working on the user's own MySQL jobs table.
//!
//! Layout: [`protocol`] (codec) and [`session`] (per-connection rules) are I/O-free so they
//! can move onto the shared connection layer; [`link`] runs a connection in both
//! directions; [`worker`], [`master`] and [`jobctl`] are the three programs; [`slots`] is
//! the scheduling interface and `engine_slots` its implementation on jobyard's engine (a
//! target = a queue, its concurrency = the queue's lease limit); `serve` runs the worker
//! inside `jobyard serve` on the server's engine; [`store`] is the MySQL table;
//! [`launcher`] runs a job's process (it does not depend on jobd and can run a command per
//! job for any queue).

#[cfg(feature = "mysql")]
pub mod batching;
#[cfg(feature = "mysql")]
pub mod carry;
pub mod config;
#[cfg(feature = "mysql")]
pub mod dedicated;
#[cfg(feature = "mysql")]
pub mod engine_slots;
pub mod ini;
pub mod jobctl;
pub mod launcher;
pub mod link;
pub mod master;
pub mod memory;
#[cfg(feature = "mysql")]
pub mod metrics;
pub mod protocol;
#[cfg(feature = "mysql")]
pub mod serve;
pub mod session;
#[cfg(feature = "mysql")]
pub mod slots;
pub mod spawn;
#[cfg(feature = "mysql")]
pub mod sqltext;
#[cfg(feature = "mysql")]
pub mod store;
#[cfg(feature = "mysql")]
pub mod timing;
pub mod validate;
#[cfg(feature = "mysql")]
pub mod worker;
#[cfg(feature = "mysql")]
pub mod writer;

use std::path::{Path, PathBuf};

pub use config::{JobdConfig, MasterConfig};
pub use jobctl::run_jobctl;
pub use master::{start_master, MasterHandle};
#[cfg(feature = "mysql")]
pub use serve::JobdFrontEnd;
#[cfg(feature = "mysql")]
pub use worker::{serve_jobd, start_jobd, start_jobd_with, JobdHandle, Worker};

/// What `jobd`/`jobd-master` were asked to do by their command line.
enum Cli {
    Run(PathBuf),
    Exit(i32),
}

/// jobd's command line: `--config PATH` (default given), `--help`, `--version`; with no
/// arguments at all jobd printed its usage, and so does this.
fn parse_cli(program: &str, default_config: &str, args: &[String]) -> Cli {
    let usage = format!(
        "Usage: {program} [--config PATH]\n\nOptions:\n    --config PATH  config file (default: {default_config})\n    --help         show this help\n    --version      show the version\n"
    );
    if args.is_empty() {
        print!("{usage}");
        return Cli::Exit(0);
    }
    let mut config = PathBuf::from(default_config);
    let mut i = 0;
    while i < args.len() {
        let a = args[i].as_str();
        match a {
            "--help" | "-h" => {
                print!("{usage}");
                return Cli::Exit(0);
            }
            "--version" | "-v" => {
                println!("{}", env!("CARGO_PKG_VERSION"));
                return Cli::Exit(0);
            }
            "--config" | "-c" => {
                i += 1;
                match args.get(i) {
                    Some(p) => config = PathBuf::from(p),
                    None => {
                        eprintln!("{program}: --config needs a path");
                        return Cli::Exit(1);
                    }
                }
            }
            other if other.starts_with("--config=") => {
                config = PathBuf::from(&other["--config=".len()..]);
            }
            other => {
                eprintln!("{program}: unknown option '{other}'\n{usage}");
                return Cli::Exit(1);
            }
        }
        i += 1;
    }
    Cli::Run(config)
}

fn read_config(path: &Path) -> Result<String, String> {
    std::fs::read_to_string(path)
        .map_err(|e| format!("config parsing error: cannot read {}: {e}", path.display()))
}

fn init_logging(console: &str, file: Option<&Path>, file_level: &str) {
    // sqlx logs every statement at info; only its warnings are of interest here.
    let console = format!("{console},sqlx=warn");
    let file_level = format!("{file_level},sqlx=warn");
    let builder = tracing_subscriber::fmt().with_target(false);
    let result = match file.and_then(|p| {
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(p)
            .ok()
    }) {
        Some(f) => builder
            .with_ansi(false)
            .with_env_filter(file_level.as_str())
            .with_writer(std::sync::Mutex::new(f))
            .try_init(),
        None => builder
            .with_writer(std::io::stderr)
            .with_env_filter(console.as_str())
            .try_init(),
    };
    let _ = result;
}

async fn until_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        return std::future::pending().await;
    };
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
}

/// `jobd [--config PATH]`: runs the worker daemon until SIGTERM/SIGINT, then shuts down
/// gracefully. Returns the process exit code.
#[cfg(feature = "mysql")]
pub fn run_jobd(args: Vec<String>) -> i32 {
    let path = match parse_cli("jobd", "/etc/jobd.conf", &args) {
        Cli::Run(p) => p,
        Cli::Exit(code) => return code,
    };
    let config = match read_config(&path).and_then(|t| JobdConfig::parse(&t)) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("{e}");
            return 1;
        }
    };
    init_logging(
        &config.log_level_console,
        config.log_file.as_deref(),
        &config.log_level_file,
    );
    // Two threads: forking a launcher blocks the thread that does it, and with one thread
    // nothing else (reading exits, writing rows) runs meanwhile; a second one let the 1x8
    // benchmark shape reach the launch floor (docs/benchmarks.md#jobd). Launchers are
    // forked on runtime worker threads, which live as long as the daemon, so their
    // parent-death signal fires only when the daemon dies.
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime");
    rt.block_on(async move {
        let handle = match start_jobd(config).await {
            Ok(h) => h,
            Err(e) => {
                eprintln!("jobd: cannot listen: {e}");
                return 1;
            }
        };
        tracing::info!(addr = %handle.addr, "jobd: listening");
        until_signal().await;
        tracing::info!("jobd: shutting down");
        handle.shutdown().await;
        0
    })
}

/// `jobd-master [--config PATH]`: runs the master until SIGTERM/SIGINT.
pub fn run_master(args: Vec<String>) -> i32 {
    let path = match parse_cli("jobd-master", "/etc/jobd-master.conf", &args) {
        Cli::Run(p) => p,
        Cli::Exit(code) => return code,
    };
    let config = match read_config(&path).and_then(|t| MasterConfig::parse(&t)) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("{e}");
            return 1;
        }
    };
    init_logging(
        &config.log_level_console,
        config.log_file.as_deref(),
        &config.log_level_file,
    );
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    rt.block_on(async move {
        let handle = match start_master(config).await {
            Ok(h) => h,
            Err(e) => {
                eprintln!("jobd-master: cannot listen: {e}");
                return 1;
            }
        };
        tracing::info!(addr = %handle.addr, "jobd-master: listening");
        until_signal().await;
        handle.shutdown().await;
        0
    })
}
