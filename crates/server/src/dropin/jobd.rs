//! `jobyard jobd`, `jobyard jobd-master` and `jobyard jobctl` (and the binary invoked as
//! `jobd`, `jobd-master` or `jobctl`): jobd 1.12's command lines over the `jobyard-jobd`
//! library. The worker daemon and the master start the same way ([`run_daemon`]): read
//! the ini file, log as it says, start on a runtime, run until SIGTERM or SIGINT, and
//! shut down gracefully.

use std::io::{BufRead, Write};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use jobyard_jobd::config::{Ini, JobdConfig, MasterConfig};
use jobyard_jobd::jobctl::{run_command, Endpoint};
use jobyard_jobd::{start_jobd, start_master, JobdHandle, MasterHandle};

/// `jobd [--config PATH]`: runs the worker daemon until SIGTERM/SIGINT, then shuts down
/// gracefully. Returns the process exit code.
pub fn jobd(args: Vec<String>) -> i32 {
    run_daemon::<JobdHandle>(&args)
}

/// `jobd-master [--config PATH]`: runs the master until SIGTERM/SIGINT.
pub fn master(args: Vec<String>) -> i32 {
    run_daemon::<MasterHandle>(&args)
}

/// A daemon with jobd's command line: how it is configured, started and stopped.
trait Daemon: Sized {
    /// What its ini file holds.
    type Config;
    /// Its name in messages and in its usage.
    const PROGRAM: &'static str;
    /// The ini file read without `--config`.
    const DEFAULT_CONFIG: &'static str;
    /// Reads the ini text (errors are jobd's, ready to print).
    fn parse(text: &str) -> Result<Self::Config, String>;
    /// Where and how much it logs.
    fn logging(config: &Self::Config) -> Logging<'_>;
    /// The runtime it runs on.
    fn runtime() -> std::io::Result<tokio::runtime::Runtime>;
    /// Starts it listening.
    async fn start(config: Self::Config) -> std::io::Result<Self>;
    /// Where it listens.
    fn addr(&self) -> SocketAddr;
    /// Stops it gracefully.
    async fn shutdown(self);
}

impl Daemon for JobdHandle {
    type Config = JobdConfig;
    const PROGRAM: &'static str = "jobd";
    const DEFAULT_CONFIG: &'static str = "/etc/jobd.conf";

    fn parse(text: &str) -> Result<JobdConfig, String> {
        JobdConfig::parse(text)
    }

    fn logging(config: &JobdConfig) -> Logging<'_> {
        Logging {
            console_level: &config.log_level_console,
            file: config.log_file.as_deref(),
            file_level: &config.log_level_file,
        }
    }

    /// Two threads: forking a launcher blocks the thread that does it, and with one thread
    /// nothing else (reading exits, writing rows) runs meanwhile; a second one let the 1x8
    /// benchmark shape reach the launch floor (docs/benchmarks.md#jobd). Launchers are
    /// forked on runtime worker threads, which live as long as the daemon, so their
    /// parent-death signal fires only when the daemon dies.
    fn runtime() -> std::io::Result<tokio::runtime::Runtime> {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
    }

    async fn start(config: JobdConfig) -> std::io::Result<JobdHandle> {
        start_jobd(config).await
    }

    fn addr(&self) -> SocketAddr {
        self.addr
    }

    async fn shutdown(self) {
        JobdHandle::shutdown(self).await
    }
}

impl Daemon for MasterHandle {
    type Config = MasterConfig;
    const PROGRAM: &'static str = "jobd-master";
    const DEFAULT_CONFIG: &'static str = "/etc/jobd-master.conf";

    fn parse(text: &str) -> Result<MasterConfig, String> {
        MasterConfig::parse(text)
    }

    fn logging(config: &MasterConfig) -> Logging<'_> {
        Logging {
            console_level: &config.log_level_console,
            file: config.log_file.as_deref(),
            file_level: &config.log_level_file,
        }
    }

    fn runtime() -> std::io::Result<tokio::runtime::Runtime> {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
    }

    async fn start(config: MasterConfig) -> std::io::Result<MasterHandle> {
        start_master(config).await
    }

    fn addr(&self) -> SocketAddr {
        self.addr
    }

    async fn shutdown(self) {
        MasterHandle::shutdown(self).await
    }
}

/// The start-up both daemons share; returns the process exit code.
fn run_daemon<D: Daemon>(args: &[String]) -> i32 {
    let path = match parse_cli(D::PROGRAM, D::DEFAULT_CONFIG, args) {
        Cli::Run(p) => p,
        Cli::Exit(code) => return code,
    };
    let config = match read_config(&path).and_then(|t| D::parse(&t)) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("{e}");
            return 1;
        }
    };
    init_logging(D::logging(&config));
    let rt = D::runtime().expect("tokio runtime");
    rt.block_on(async move {
        let handle = match D::start(config).await {
            Ok(h) => h,
            Err(e) => {
                eprintln!("{}: cannot listen: {e}", D::PROGRAM);
                return 1;
            }
        };
        tracing::info!(addr = %handle.addr(), "{}: listening", D::PROGRAM);
        until_signal().await;
        tracing::info!("{}: shutting down", D::PROGRAM);
        handle.shutdown().await;
        0
    })
}

/// What `jobd`/`jobd-master` were asked to do by their command line.
#[derive(Debug, PartialEq)]
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

/// A daemon's logging, from its ini file: levels for the console and the log file.
struct Logging<'a> {
    console_level: &'a str,
    file: Option<&'a Path>,
    file_level: &'a str,
}

/// Logs to the ini's `log_file` if it can be opened (jobd's daemons log to their file
/// alone then), else to stderr.
fn init_logging(logging: Logging<'_>) {
    // sqlx logs every statement at info; only its warnings are of interest here.
    let console = format!("{},sqlx=warn", logging.console_level);
    let file_level = format!("{},sqlx=warn", logging.file_level);
    let builder = tracing_subscriber::fmt().with_target(false);
    let file = logging.file.and_then(|p| {
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(p)
            .ok()
    });
    let _ = match file {
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

const JOBCTL_USAGE: &str = "Usage: jobctl [OPTIONS] COMMAND [ARGS]

Options:
    --master             Connect to jobd-master instead of a jobd worker.
    --host HOST          Host to connect to (default: 127.0.0.1).
    --port PORT          Port (default: 7080, or 7081 with --master).
    --config PATH        Config file (default: ~/.jobctl.conf; keys: master, host,
                         port, password, log_level).
    --password           Ask for the password on standard input.
    --log-level LEVEL    error, warn, info, debug or trace (default: warn).
    --help               Show this help.
    --version            Show the version.

Worker commands:
    list-targets                      List targets with their state.
    memory-usage                      Show memory usage.
    poll TARGET...                    Ask the worker to fetch jobs of targets.
    set-target-concurrency TARGET N   Change a target's concurrency.
    pause TARGET...                   Pause targets.
    continue TARGET...                Continue targets.
    add-target TARGET N               Add a target.
    remove-target TARGET              Remove an idle target.
    run-manual ID...                  Run manual jobs and print their results.
    send-signal ID SIGNAL             Signal a running job's process group.

Master commands:
    list-workers                      List workers and their targets.
    memory-usage                      Show memory usage.
    poke TARGET...                    Make the workers of targets fetch jobs.
    pause [TARGET...]                 Pause targets on the workers.
    continue [TARGET...]              Continue targets on the workers.
    run-manual ID:TARGET...           Run manual jobs through the workers.
    send-signal ID SIGNAL TARGET      Signal a running job.
";

/// jobctl's options (those before the command).
#[derive(Debug, Default)]
struct JobctlOptions {
    master: bool,
    host: Option<String>,
    port: Option<u16>,
    config: Option<String>,
    ask_password: bool,
    help: bool,
    version: bool,
}

/// `jobctl [OPTIONS] COMMAND [ARGS]`: runs one command against a worker or the master;
/// returns the exit code.
pub fn jobctl(args: Vec<String>) -> i32 {
    let mut out = std::io::stdout();
    let mut err = std::io::stderr();
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("ERROR [jobctl] {e}");
            return 1;
        }
    };
    rt.block_on(jobctl_with(args, &mut out, &mut err))
}

/// [`jobctl`] printing to `out` and `err`.
async fn jobctl_with(args: Vec<String>, out: &mut dyn Write, err: &mut dyn Write) -> i32 {
    let (options, rest) = match parse_jobctl_options(&args) {
        Ok(x) => x,
        Err(e) => {
            let _ = writeln!(err, "ERROR [jobctl] {e}");
            return 1;
        }
    };
    if options.version {
        let _ = writeln!(out, "{}", env!("CARGO_PKG_VERSION"));
        return 0;
    }
    let Some((command, command_args)) = rest.split_first().filter(|_| !options.help) else {
        let _ = write!(out, "{JOBCTL_USAGE}");
        return 0;
    };
    let config_path = options.config.clone().or_else(|| {
        std::env::var("HOME")
            .ok()
            .map(|h| format!("{h}/.jobctl.conf"))
    });
    let config = config_path
        .and_then(|path| std::fs::read_to_string(path).ok())
        .map(|text| Ini::parse(&text));
    let mut endpoint = jobctl_endpoint(&options, config.as_ref());
    if options.ask_password {
        let _ = write!(out, "Password: ");
        let _ = out.flush();
        let mut line = String::new();
        let _ = std::io::stdin().lock().read_line(&mut line);
        endpoint.password = Some(line.trim_end_matches(['\r', '\n']).to_string());
    }
    run_command(&endpoint, command, command_args, out, err).await
}

/// Where jobctl connects: the options first, then the config file's keys (`master`,
/// `host`, `port`, `password`), then the defaults (127.0.0.1, port 7080, or 7081 for the
/// master).
fn jobctl_endpoint(options: &JobctlOptions, config: Option<&Ini>) -> Endpoint {
    let from_config = |key: &str| config.and_then(|ini| ini.get(key));
    let master = options.master || matches!(from_config("master"), Some("1") | Some("true"));
    let host = options
        .host
        .clone()
        .or_else(|| from_config("host").map(str::to_string))
        .unwrap_or_else(|| "127.0.0.1".into());
    let port = options
        .port
        .or_else(|| from_config("port").and_then(|p| p.parse().ok()))
        .unwrap_or(if master { 7081 } else { 7080 });
    let password = from_config("password")
        .filter(|p| !p.is_empty())
        .map(str::to_string);
    Endpoint {
        master,
        host,
        port,
        password,
    }
}

fn parse_jobctl_options(args: &[String]) -> Result<(JobctlOptions, Vec<String>), String> {
    let mut o = JobctlOptions::default();
    let mut i = 0;
    while i < args.len() {
        let a = &args[i];
        if !a.starts_with("--") {
            break;
        }
        let (name, inline) = match a[2..].split_once('=') {
            Some((n, v)) => (n.to_string(), Some(v.to_string())),
            None => (a[2..].to_string(), None),
        };
        let value = |i: &mut usize| -> Result<String, String> {
            if let Some(v) = inline.clone() {
                return Ok(v);
            }
            *i += 1;
            args.get(*i)
                .cloned()
                .ok_or(format!("option --{name} needs a value"))
        };
        match name.as_str() {
            "master" => o.master = true,
            "password" => o.ask_password = true,
            "help" => o.help = true,
            "version" => o.version = true,
            "host" => o.host = Some(value(&mut i)?),
            "port" => {
                let v = value(&mut i)?;
                o.port = Some(v.parse().map_err(|_| format!("invalid port '{v}'"))?);
            }
            "config" => o.config = Some(value(&mut i)?),
            "log-level" => {
                value(&mut i)?;
            }
            _ => return Err(format!("unknown option --{name}")),
        }
        i += 1;
    }
    Ok((o, args[i..].to_vec()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(args: &[&str]) -> Vec<String> {
        args.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn daemon_options() {
        let cli = |args: &[&str]| parse_cli("jobd", "/etc/jobd.conf", &strings(args));
        assert_eq!(cli(&["--config", "a.conf"]), Cli::Run("a.conf".into()));
        assert_eq!(cli(&["--config=b.conf"]), Cli::Run("b.conf".into()));
        assert_eq!(cli(&["--config"]), Cli::Exit(1));
        assert_eq!(cli(&["--nope"]), Cli::Exit(1));
    }

    #[test]
    fn options_stop_at_the_command() {
        let args = strings(&["--master", "--port=9", "poke", "--host"]);
        let (o, rest) = parse_jobctl_options(&args).unwrap();
        assert!(o.master);
        assert_eq!(o.port, Some(9));
        assert_eq!(rest, vec!["poke", "--host"]);
    }

    #[test]
    fn options_win_over_the_config_file() {
        let ini = Ini::parse("host = h\nport = 1\npassword = pw\n");
        let (o, _) = parse_jobctl_options(&strings(&["--port", "2", "x"])).unwrap();
        let e = jobctl_endpoint(&o, Some(&ini));
        assert_eq!((e.host.as_str(), e.port), ("h", 2));
        assert_eq!(e.password.as_deref(), Some("pw"));
        let e = jobctl_endpoint(&o, None);
        assert_eq!((e.host.as_str(), e.password), ("127.0.0.1", None));
    }

    #[test]
    fn the_config_file_may_ask_for_the_master() {
        let ini = Ini::parse("master = true\n");
        let e = jobctl_endpoint(&JobctlOptions::default(), Some(&ini));
        assert!(e.master);
        assert_eq!(e.port, 7081);
        assert_eq!(jobctl_endpoint(&JobctlOptions::default(), None).port, 7080);
    }
}
