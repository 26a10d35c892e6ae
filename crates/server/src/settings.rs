//! Server settings: flags, `JOBYARD_*` environment variables, an optional TOML file.
//!
//! Precedence is flag, then environment, then file, then default. Every setting is
//! declared once, in [`ServeArgs`]: the file's keys are its flags' names (with
//! underscores), and the file's values become the flags' defaults before the command line
//! is parsed ([`with_file_defaults`]), so the file needs no declaration of its own and an
//! unknown key is an error. The same [`Settings`] is produced by `jobyard serve` and by
//! the beanstalkd- and gearmand-compatible command lines.

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use jobyard_engine::flows::FlowDefinition;
use jobyard_storage::{redact_url, Addrs, FsyncMode, PgLocation, DEFAULT_PG_SCHEMA};

mod advertise;
pub(crate) mod queue_policies;
pub(crate) mod schedules;

/// Everything the server needs to start.
#[derive(Clone, Debug, PartialEq)]
pub struct Settings {
    /// `None`: jobs live in memory only (beanstalkd without `-b`).
    pub data_dir: Option<PathBuf>,
    /// The log in PostgreSQL instead of `data_dir` (`--storage postgres://...`).
    pub postgres: Option<PgLocation>,
    /// `None`: the beanstalkd listener is off.
    pub beanstalk_listen: Option<String>,
    pub fsync: FsyncMode,
    pub max_job_size: u32,
    pub max_connections: usize,
    pub segment_bytes: u64,
    pub compact_min_bytes: u64,
    pub salvage: bool,
    /// Keep durable bodies only in the log once written (on by default: memory per job).
    pub bodies_in_log: bool,
    /// With `bodies_in_log`: the most bytes of just-written bodies kept in memory.
    pub hot_body_bytes: usize,
    /// Bytes of unfinished request bodies all connections together may buffer.
    pub max_inflight_bytes: u64,
    /// Switch to this user after binding (beanstalkd `-u`).
    pub user: Option<String>,
    pub verbosity: u8,
    /// Log lines as text for people, or as JSON objects for log shippers.
    pub log_format: LogFormat,
    /// `None`: the Gearman listener is off.
    pub gearman_listen: Option<String>,
    /// Runtime threads serving connections; `None`: `JOBYARD_THREADS`, else one per core.
    pub threads: Option<usize>,
    /// `None`: `JOBYARD_THREAD_MODEL`, else fixed with `threads`, else the default.
    pub thread_model: Option<jobyard_net::runtime::Model>,
    /// `None`: the HTTP/JSON API is off.
    pub http_listen: Option<String>,
    /// An HTTP worker session with no request and no lease for this long ends.
    pub http_worker_idle: Duration,
    /// Flows declared at start (`--flows`), validated. Behind one pointer, as `gearman`.
    pub flows: std::sync::Arc<Vec<FlowDefinition>>,
    /// Periodic jobs declared at start (`--schedules`, the config's `[[schedules]]`).
    pub schedules: std::sync::Arc<Vec<jobyard_engine::Schedule>>,
    /// Queue policies declared at start (`--queues`, the config's `[queues.NAME]` tables).
    pub queues: std::sync::Arc<Vec<queue_policies::DeclaredQueue>>,
    /// `None`: the WMP manager is off (the default). Boxed to keep `Settings` small.
    pub wmp: Option<Box<WmpSettings>>,
    /// Tokens, TLS and exposure of the HTTP listener (docs/security.md). Boxed, as `gearman`.
    pub http_security: Box<jobyard_http::Security>,
    /// Gearman protocol options (gearmand's flags and jobyard's limits).
    /// Boxed: it is large and rarely touched, and `Settings` travels inside enums.
    pub gearman: Box<jobyard_gearman::Config>,
    /// `None`: no jobd worker; else its ini file (docs/jobd.md).
    /// Boxed: `Settings` travels inside enums and is kept small.
    pub jobd_config: Option<Box<PathBuf>>,
}

pub use jobyard_broker::budget::DEFAULT_MAX_INFLIGHT_BYTES;
pub use jobyard_broker::{DEFAULT_BODIES_IN_LOG, DEFAULT_HOT_BODY_BYTES};

impl Default for Settings {
    /// The built-in defaults every command line starts from and overrides, with every
    /// listener off and jobs in memory only: each command line turns on what it serves,
    /// so a listener added later is never opened by a drop-in that does not ask for it.
    fn default() -> Self {
        Settings {
            data_dir: None,
            postgres: None,
            beanstalk_listen: None,
            fsync: FsyncMode::Always,
            max_job_size: DEFAULT_MAX_JOB_SIZE,
            max_connections: 10_000,
            segment_bytes: 64 << 20,
            compact_min_bytes: 64 << 20,
            salvage: false,
            bodies_in_log: DEFAULT_BODIES_IN_LOG,
            hot_body_bytes: DEFAULT_HOT_BODY_BYTES,
            max_inflight_bytes: DEFAULT_MAX_INFLIGHT_BYTES,
            user: None,
            verbosity: 0,
            log_format: LogFormat::default(),
            gearman_listen: None,
            threads: None,
            thread_model: None,
            http_listen: None,
            http_worker_idle: jobyard_http::DEFAULT_WORKER_IDLE,
            flows: Default::default(),
            schedules: Default::default(),
            queues: Default::default(),
            wmp: None,
            http_security: Default::default(),
            gearman: Default::default(),
            jobd_config: None,
        }
    }
}

/// The 14/WMP manager's settings (`--wmp-listen`, `--wmp-name`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WmpSettings {
    /// The ZeroMQ endpoint its ROUTER binds.
    pub listen: String,
    /// The `manager` header; `None`: `HOSTNAME:PORT`.
    pub name: Option<String>,
}

/// How log lines are written (`--log-format`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Text,
    /// One JSON object per event, with its fields (conn, protocol, queue, ...) as keys.
    Json,
}

/// beanstalkd's default and jobyard's: 2^16 − 1.
pub const DEFAULT_MAX_JOB_SIZE: u32 = 65_535;
/// The largest `--max-job-size` (1 GiB), as in beanstalkd.
pub const MAX_MAX_JOB_SIZE: u32 = 1 << 30;

/// `jobyard serve` flags. Every one can also come from the environment or the file.
#[derive(Args, Debug, Default, Clone)]
pub struct ServeArgs {
    /// TOML file with any of the settings below (keys use underscores).
    #[arg(long, env = "JOBYARD_CONFIG")]
    pub config: Option<PathBuf>,
    /// Directory of the durable log [default: ./jobyard-data].
    #[arg(long, env = "JOBYARD_DATA_DIR")]
    pub data_dir: Option<PathBuf>,
    /// Keep the log in PostgreSQL instead of --data-dir: postgres://USER@HOST:PORT/DB
    /// (postgresql:// too; sslmode= and passfile= in the URL). Give the password with
    /// PGPASSWORD or a password file, not here, where `ps` shows it (docs/postgres.md).
    #[arg(long, env = "JOBYARD_STORAGE")]
    pub storage: Option<String>,
    /// The PostgreSQL schema of jobyard's tables [default: jobyard].
    #[arg(long, env = "JOBYARD_STORAGE_SCHEMA")]
    pub storage_schema: Option<String>,
    /// This node's name among the nodes sharing --storage [default: HOSTNAME:PORT, the
    /// port of the HTTP listener].
    #[arg(long, env = "JOBYARD_NODE_NAME")]
    pub node_name: Option<String>,
    /// The host other nodes sharing --storage use to reach this node's listeners (a
    /// standby forwards its clients there when this node leads) [default: the listen
    /// address's host, or this machine's host name when that is 0.0.0.0 or ::].
    #[arg(long, env = "JOBYARD_ADVERTISE_HOST")]
    pub advertise_host: Option<String>,
    /// Address for beanstalkd clients, or `off` [default: 127.0.0.1:11300].
    #[arg(long, env = "JOBYARD_BEANSTALK_LISTEN")]
    pub beanstalk_listen: Option<String>,
    /// `always` (reply after fsync), `interval=<ms>` or `never` (reply after write) [default: always].
    #[arg(long, env = "JOBYARD_FSYNC")]
    pub fsync: Option<String>,
    /// Largest job body in bytes; a body of exactly this size is accepted [default: 65535].
    #[arg(long, env = "JOBYARD_MAX_JOB_SIZE")]
    pub max_job_size: Option<u32>,
    /// Open connections allowed at once, all protocols together [default: 10000].
    #[arg(long, env = "JOBYARD_MAX_CONNECTIONS")]
    pub max_connections: Option<usize>,
    /// Size at which a log segment is closed and a new one started [default: 67108864].
    #[arg(long, env = "JOBYARD_SEGMENT_BYTES")]
    pub segment_bytes: Option<u64>,
    /// Never compact a log smaller than this many bytes [default: 67108864].
    #[arg(long, env = "JOBYARD_COMPACT_MIN_BYTES")]
    pub compact_min_bytes: Option<u64>,
    /// Start even if the log has damaged records, skipping what cannot be read.
    #[arg(long, env = "JOBYARD_SALVAGE")]
    pub salvage: bool,
    /// Keep a durable job's body only in the log once written and read it back when the
    /// job is handed out (memory per queued job, docs/performance.md); `=false` keeps every
    /// body in memory [default: true].
    #[arg(
        long,
        env = "JOBYARD_BODIES_IN_LOG",
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = "true",
        value_parser = clap::builder::BoolishValueParser::new()
    )]
    pub bodies_in_log: Option<bool>,
    /// With bodies kept in the log: the most bytes of just-written bodies kept in memory
    /// (the last write's, and at least the newest 64), so jobs handed out right after their
    /// put are not read back; 0 keeps none [default: 1048576].
    #[arg(long, env = "JOBYARD_HOT_BODY_BYTES")]
    pub hot_body_bytes: Option<usize>,
    /// Bytes of request bodies still being received that all connections together may
    /// buffer; past it a put gets OUT_OF_MEMORY (Gearman: ERROR) [default: 268435456].
    #[arg(long, env = "JOBYARD_MAX_INFLIGHT_BYTES")]
    pub max_inflight_bytes: Option<u64>,
    /// Threads of the multi-threaded runtime; setting it also selects the fixed thread
    /// model unless --thread-model names one (docs/performance.md) [default: one per core].
    #[arg(long, env = "JOBYARD_THREADS")]
    pub threads: Option<usize>,
    /// `adaptive`: connections on one thread while it keeps up, moved to one thread per
    /// core when it saturates (docs/performance.md); `fixed`: always `--threads` threads
    /// [default: adaptive, fixed when --threads is given].
    #[arg(long, env = "JOBYARD_THREAD_MODEL")]
    pub thread_model: Option<jobyard_net::runtime::Model>,
    /// Address for Gearman clients and workers, or `off` [default: 127.0.0.1:4730].
    #[arg(long, env = "JOBYARD_GEARMAN_LISTEN")]
    pub gearman_listen: Option<String>,
    /// Largest Gearman packet body in bytes [default: 67108864].
    #[arg(long, env = "JOBYARD_GEARMAN_MAX_PACKET")]
    pub gearman_max_packet: Option<u32>,
    /// Hand a Gearman job out at most this many times; 0 = unlimited (gearmand -j) [default: 0].
    #[arg(long, env = "JOBYARD_GEARMAN_JOB_RETRIES")]
    pub gearman_job_retries: Option<u32>,
    /// Let the Gearman admin command `shutdown` stop the server (off: it is unknown).
    #[arg(long, env = "JOBYARD_GEARMAN_ALLOW_SHUTDOWN")]
    pub gearman_allow_shutdown: bool,
    /// Address of the HTTP/JSON API (docs/http-api.md), or `off` [default: 127.0.0.1:8080].
    #[arg(long, env = "JOBYARD_HTTP_LISTEN")]
    pub http_listen: Option<String>,
    /// An HTTP worker session that sends no request and holds no lease for this many
    /// milliseconds ends [default: 60000].
    #[arg(long, env = "JOBYARD_HTTP_WORKER_IDLE_MS")]
    pub http_worker_idle_ms: Option<u64>,
    /// TOML file of flow definitions (`[[flows]]` tables, docs/http-api.md "Flows") declared at start;
    /// in the config file, the `[[flows]]` tables may stand in it instead of a path.
    #[arg(long, env = "JOBYARD_FLOWS")]
    pub flows: Option<String>,
    /// TOML file of periodic jobs (`[[schedules]]` tables, docs/schedules.md) declared at
    /// start; in the config file, the `[[schedules]]` tables may stand in it instead of a path.
    #[arg(long, env = "JOBYARD_SCHEDULES")]
    pub schedules: Option<String>,
    /// TOML file of `[queues.NAME]` tables (lease_limit, rate_limit, paused) set at start;
    /// in the config file, the `[queues.NAME]` tables may stand in it instead of a path.
    #[arg(long, env = "JOBYARD_QUEUES")]
    pub queues: Option<String>,
    /// ZeroMQ endpoint where jobyard is a 14/WMP manager (docs/wmp.md), e.g.
    /// `tcp://127.0.0.1:5570`, or `off` [default: off].
    #[arg(long, env = "JOBYARD_WMP_LISTEN")]
    pub wmp_listen: Option<String>,
    /// The WMP manager's name in WAKE/TAKE/NO; keep it stable across restarts
    /// [default: HOSTNAME:PORT].
    #[arg(long, env = "JOBYARD_WMP_NAME")]
    pub wmp_name: Option<String>,
    /// Run a jobd worker daemon with this jobd ini file, its targets as queues of this
    /// server (docs/jobd.md) [default: none].
    #[arg(long, env = "JOBYARD_JOBD_CONFIG")]
    pub jobd_config: Option<PathBuf>,
    /// Tokens the HTTP listener requires: comma-separated `[ROLE:]TOKEN`, role `read` or
    /// `admin` (the default); prefer --http-token-file, which `ps` does not show.
    #[arg(long, env = "JOBYARD_HTTP_TOKEN", hide_env_values = true)]
    pub http_token: Option<String>,
    /// File of HTTP tokens, one `ROLE TOKEN` per line (`#` comments).
    #[arg(long, env = "JOBYARD_HTTP_TOKEN_FILE")]
    pub http_token_file: Option<PathBuf>,
    /// Serve the HTTP listener without tokens on a non-loopback address.
    #[arg(long, env = "JOBYARD_HTTP_INSECURE")]
    pub http_insecure: bool,
    /// PEM certificate chain for HTTPS on the HTTP listener (with --http-tls-key).
    #[arg(long, env = "JOBYARD_HTTP_TLS_CERT")]
    pub http_tls_cert: Option<PathBuf>,
    /// PEM private key for --http-tls-cert.
    #[arg(long, env = "JOBYARD_HTTP_TLS_KEY")]
    pub http_tls_key: Option<PathBuf>,
    /// More log output (repeatable).
    #[arg(short = 'V', long = "verbose", action = clap::ArgAction::Count)]
    pub verbose: u8,
    /// `text` for people, `json` for log shippers (one object per event) [default: text].
    #[arg(long, env = "JOBYARD_LOG_FORMAT", value_enum)]
    pub log_format: Option<LogFormat>,
}

/// Parses `always`, `never` or `interval=<ms>`.
pub fn parse_fsync(s: &str) -> Result<FsyncMode, String> {
    match s {
        "always" => Ok(FsyncMode::Always),
        "never" => Ok(FsyncMode::Never),
        _ => s
            .strip_prefix("interval=")
            .and_then(|ms| ms.parse::<u64>().ok())
            .map(|ms| FsyncMode::Interval(Duration::from_millis(ms)))
            .ok_or_else(|| format!("bad fsync mode {s:?}: use always, never or interval=<ms>")),
    }
}

/// `off` disables a listener.
fn listen(addr: String) -> Option<String> {
    (addr != "off").then_some(addr)
}

/// The config file named on the command line (`--config F`, `--config=F`) or in
/// `JOBYARD_CONFIG`, read before the command line is parsed.
fn config_path(argv: &[String]) -> Option<PathBuf> {
    let mut args = argv.iter();
    while let Some(a) = args.next() {
        if a == "--config" {
            return args.next().map(PathBuf::from);
        }
        if let Some(v) = a.strip_prefix("--config=") {
            return Some(PathBuf::from(v));
        }
    }
    std::env::var_os("JOBYARD_CONFIG").map(PathBuf::from)
}

/// `cmd` with the `serve` subcommand's defaults taken from the config file, if one is
/// named: each key must be the name of a flag (underscores for dashes).
pub fn with_file_defaults(cmd: clap::Command, argv: &[String]) -> Result<clap::Command, String> {
    // Only `serve` reads this file; other subcommands (jobd's, ...) have configs of their own.
    let subcommand = argv.iter().skip(1).find(|a| !a.starts_with('-'));
    if subcommand.map(String::as_str) != Some("serve") {
        return Ok(cmd);
    }
    let Some(path) = config_path(argv) else {
        return Ok(cmd);
    };
    let text = std::fs::read_to_string(&path)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let table: toml::Table =
        toml::from_str(&text).map_err(|e| format!("bad config {}: {e}", path.display()))?;
    let serve = cmd
        .find_subcommand("serve")
        .expect("the serve subcommand")
        .clone();
    let mut defaults = Vec::new();
    for (key, value) in table {
        let known = serve
            .get_arguments()
            .any(|a| a.get_id().as_str() == key && key != "config" && key != "verbose");
        if !known {
            return Err(format!(
                "bad config {}: unknown key `{key}` (keys are the flags of `jobyard serve`, \
                 with underscores)",
                path.display()
            ));
        }
        let value = match value {
            // Flow definitions written in the config itself travel to `--flows` as JSON,
            // and `[[schedules]]` to `--schedules`.
            toml::Value::Array(tables) if key == "flows" || key == "schedules" => {
                serde_json::to_string(&tables).expect("TOML values serialize as JSON")
            }
            // So do the `[queues.NAME]` tables, to `--queues`.
            toml::Value::Table(queues) if key == "queues" => {
                serde_json::to_string(&queues).expect("TOML values serialize as JSON")
            }
            toml::Value::String(s) => s,
            toml::Value::Integer(n) => n.to_string(),
            toml::Value::Boolean(b) => b.to_string(),
            other => {
                return Err(format!(
                    "bad config {}: `{key}` must be a string, number or boolean, not {}",
                    path.display(),
                    other.type_str()
                ))
            }
        };
        defaults.push((key, value));
    }
    Ok(cmd.mut_subcommand("serve", |mut sc| {
        for (key, value) in defaults {
            sc = sc.mut_arg(key, |a| a.default_value(value));
        }
        sc
    }))
}

/// `--storage` and `--storage-schema`: a PostgreSQL URL and its schema, or nothing. Any
/// other storage is refused (the file log is `--data-dir`). Messages never show the URL's
/// password.
fn postgres_location(
    storage: Option<String>,
    schema: Option<String>,
    node_name: String,
    advertise: Addrs,
) -> Result<Option<PgLocation>, String> {
    let Some(url) = storage else {
        return match schema {
            Some(_) => Err("--storage-schema needs --storage postgres://...".into()),
            None => Ok(None),
        };
    };
    if !PgLocation::is_postgres_url(&url) {
        return Err(format!(
            "--storage {}: expected postgres://USER@HOST:PORT/DATABASE (the file log is \
             --data-dir)",
            redact_url(&url)
        ));
    }
    Ok(Some(PgLocation {
        url,
        schema: schema.unwrap_or_else(|| DEFAULT_PG_SCHEMA.to_string()),
        node_name,
        advertise,
    }))
}

/// A node's name unless `--node-name` says otherwise: the host's name and the port of
/// its HTTP listener (`listen`), which tells two nodes on one host apart.
fn default_node_name(listen: &str) -> String {
    let host = advertise::hostname();
    match listen.rsplit_once(':') {
        Some((_, port)) if port.parse::<u16>().is_ok() => format!("{host}:{port}"),
        _ => format!("{host}:{}", std::process::id()),
    }
}

/// The flow definitions of `--flows`: a TOML file of `[[flows]]` tables, or (from the
/// config file) the tables themselves as JSON. Each is validated; a name twice is an error.
fn load_flows(source: &str) -> Result<Vec<FlowDefinition>, String> {
    #[derive(serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    struct FlowsFile {
        #[serde(default)]
        flows: Vec<FlowDefinition>,
    }
    let flows: Vec<FlowDefinition> = if source.starts_with('[') {
        serde_json::from_str(source).map_err(|e| format!("bad flows in the config: {e}"))?
    } else {
        let text = std::fs::read_to_string(source)
            .map_err(|e| format!("cannot read flows file {source}: {e}"))?;
        toml::from_str::<FlowsFile>(&text)
            .map_err(|e| format!("bad flows file {source}: {e}"))?
            .flows
    };
    let mut names = std::collections::HashSet::new();
    for flow in &flows {
        flow.validate()
            .map_err(|e| format!("bad flow {:?}: {e}", flow.name))?;
        if !names.insert(flow.name.clone()) {
            return Err(format!("flow {:?} is declared twice", flow.name));
        }
    }
    Ok(flows)
}

impl ServeArgs {
    /// Fills in the built-in defaults (flags, environment and file are already applied):
    /// [`Settings::default`], with `serve`'s data directory and listeners on.
    pub fn resolve(self) -> Result<Settings, String> {
        let defaults = Settings::default();
        let max_job_size = self.max_job_size.unwrap_or(defaults.max_job_size);
        if max_job_size > MAX_MAX_JOB_SIZE {
            return Err(format!("--max-job-size is at most {MAX_MAX_JOB_SIZE}"));
        }
        let http = self.http_listen.as_deref().unwrap_or("127.0.0.1:8080");
        let node_name = (self.node_name.clone()).unwrap_or_else(|| default_node_name(http));
        let beanstalk_listen = listen(
            self.beanstalk_listen
                .unwrap_or_else(|| "127.0.0.1:11300".into()),
        );
        let gearman_listen = listen(
            self.gearman_listen
                .unwrap_or_else(|| "127.0.0.1:4730".into()),
        );
        let http_listen = listen(self.http_listen.unwrap_or_else(|| "127.0.0.1:8080".into()));
        if self.advertise_host.is_some() && self.storage.is_none() {
            return Err("--advertise-host needs --storage postgres://...".into());
        }
        let advertise = advertise::advertised(
            self.advertise_host.as_deref(),
            beanstalk_listen.as_deref(),
            gearman_listen.as_deref(),
            http_listen.as_deref(),
        );
        let postgres = postgres_location(self.storage, self.storage_schema, node_name, advertise)?;
        Ok(Settings {
            data_dir: Some(
                self.data_dir
                    .unwrap_or_else(|| PathBuf::from("jobyard-data")),
            ),
            // Bodies are read back only from segment files: in PostgreSQL they stay in memory.
            bodies_in_log: self.bodies_in_log.unwrap_or(defaults.bodies_in_log)
                && postgres.is_none(),
            postgres,
            beanstalk_listen,
            fsync: match &self.fsync {
                Some(mode) => parse_fsync(mode)?,
                None => defaults.fsync,
            },
            max_job_size,
            max_connections: self.max_connections.unwrap_or(defaults.max_connections),
            segment_bytes: self.segment_bytes.unwrap_or(defaults.segment_bytes),
            compact_min_bytes: self.compact_min_bytes.unwrap_or(defaults.compact_min_bytes),
            salvage: self.salvage,
            hot_body_bytes: self.hot_body_bytes.unwrap_or(defaults.hot_body_bytes),
            max_inflight_bytes: self
                .max_inflight_bytes
                .unwrap_or(defaults.max_inflight_bytes),
            verbosity: self.verbose,
            log_format: self.log_format.unwrap_or(defaults.log_format),
            threads: self.threads.filter(|&n| n > 0),
            thread_model: self.thread_model,
            gearman_listen,
            http_listen,
            wmp: self.wmp_listen.and_then(listen).map(|listen| {
                Box::new(WmpSettings {
                    listen,
                    name: self.wmp_name,
                })
            }),
            http_worker_idle: self
                .http_worker_idle_ms
                .map_or(defaults.http_worker_idle, Duration::from_millis),
            flows: match &self.flows {
                Some(source) => std::sync::Arc::new(load_flows(source)?),
                None => defaults.flows,
            },
            schedules: match &self.schedules {
                Some(source) => std::sync::Arc::new(schedules::load(source)?),
                None => defaults.schedules,
            },
            queues: match &self.queues {
                Some(source) => std::sync::Arc::new(queue_policies::load(source)?),
                None => defaults.queues,
            },
            http_security: Box::new(jobyard_http::Security::from_flags(
                self.http_token.as_deref(),
                self.http_token_file.as_deref(),
                self.http_insecure,
                self.http_tls_cert,
                self.http_tls_key,
            )?),
            gearman: Box::new(jobyard_gearman::Config {
                max_packet: self
                    .gearman_max_packet
                    .unwrap_or(defaults.gearman.max_packet),
                job_retries: self
                    .gearman_job_retries
                    .unwrap_or(defaults.gearman.job_retries),
                allow_shutdown: self.gearman_allow_shutdown,
                verbose_level: if self.verbose > 0 { "DEBUG" } else { "INFO" }.into(),
                ..*defaults.gearman
            }),
            jobd_config: self.jobd_config.map(Box::new),
            ..defaults
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fsync_modes_parse_and_bad_ones_are_explained() {
        assert_eq!(parse_fsync("always"), Ok(FsyncMode::Always));
        assert_eq!(parse_fsync("never"), Ok(FsyncMode::Never));
        assert_eq!(
            parse_fsync("interval=50"),
            Ok(FsyncMode::Interval(Duration::from_millis(50)))
        );
        assert!(parse_fsync("sometimes")
            .unwrap_err()
            .contains("interval=<ms>"));
        assert!(parse_fsync("interval=x").is_err());
    }

    #[test]
    fn bodies_stay_in_the_log_by_default_and_the_switch_turns_it_off() {
        let s = serve(&[]).unwrap();
        assert!(s.bodies_in_log);
        assert_eq!(s.hot_body_bytes, 1 << 20);
        assert!(serve(&["--bodies-in-log"]).unwrap().bodies_in_log);
        assert!(!serve(&["--bodies-in-log=false"]).unwrap().bodies_in_log);
        assert!(!serve(&["--bodies-in-log=no"]).unwrap().bodies_in_log);
        assert!(serve(&["--bodies-in-log=maybe"]).is_err());
        let s = serve(&["--hot-body-bytes", "0"]).unwrap();
        assert_eq!(s.hot_body_bytes, 0);

        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("j.toml");
        std::fs::write(&path, "bodies_in_log = false\nhot_body_bytes = 4096\n").unwrap();
        let cfg = path.to_str().unwrap();
        let s = serve(&["--config", cfg]).unwrap();
        assert!(!s.bodies_in_log, "false from the file");
        assert_eq!(s.hot_body_bytes, 4096);
        assert!(
            serve(&["--config", cfg, "--bodies-in-log"])
                .unwrap()
                .bodies_in_log
        );
    }

    /// What `jobyard serve ARGS` resolves to, through the same path as `main`.
    fn serve(args: &[&str]) -> Result<Settings, String> {
        #[derive(clap::Parser)]
        struct Cli {
            #[command(subcommand)]
            cmd: Cmd,
        }
        #[derive(clap::Subcommand)]
        enum Cmd {
            Serve(ServeArgs),
        }
        use clap::{CommandFactory, FromArgMatches};
        let argv: Vec<String> = std::iter::once("jobyard")
            .chain(std::iter::once("serve"))
            .chain(args.iter().copied())
            .map(String::from)
            .collect();
        let cmd = with_file_defaults(Cli::command(), &argv)?;
        let matches = cmd.try_get_matches_from(&argv).map_err(|e| e.to_string())?;
        let Cmd::Serve(a) = Cli::from_arg_matches(&matches)
            .map_err(|e| e.to_string())?
            .cmd;
        a.resolve()
    }

    #[test]
    fn the_thread_model_is_a_flag_and_unknown_models_are_refused() {
        use jobyard_net::runtime::Model;
        let s = serve(&["--thread-model", "fixed"]).unwrap();
        assert_eq!(s.thread_model, Some(Model::Fixed));
        let s = serve(&["--thread-model", "adaptive", "--threads", "4"]).unwrap();
        assert_eq!(
            (s.thread_model, s.threads),
            (Some(Model::Adaptive), Some(4))
        );
        assert!(serve(&["--thread-model", "pinned"])
            .unwrap_err()
            .contains("pinned"));
    }

    #[test]
    fn jobd_config_comes_from_the_flag_or_the_file() {
        assert_eq!(
            serve(&[]).unwrap().jobd_config,
            None,
            "no jobd worker by default"
        );
        let s = serve(&["--jobd-config", "/etc/jobd.conf"]).unwrap();
        assert_eq!(
            s.jobd_config.as_deref(),
            Some(&PathBuf::from("/etc/jobd.conf"))
        );
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("j.toml");
        std::fs::write(&path, "jobd_config = \"/srv/jobd.conf\"\n").unwrap();
        let s = serve(&["--config", path.to_str().unwrap()]).unwrap();
        assert_eq!(
            s.jobd_config.as_deref(),
            Some(&PathBuf::from("/srv/jobd.conf"))
        );
    }

    #[test]
    fn defaults_file_and_flags_combine_in_order() {
        let s = ServeArgs::default().resolve().unwrap();
        assert_eq!(s.data_dir, Some(PathBuf::from("jobyard-data")));
        assert_eq!(s.beanstalk_listen.as_deref(), Some("127.0.0.1:11300"));
        assert_eq!(s.gearman_listen.as_deref(), Some("127.0.0.1:4730"));
        assert_eq!(s.http_listen.as_deref(), Some("127.0.0.1:8080"));
        assert_eq!(s.http_worker_idle, Duration::from_secs(60));
        assert_eq!(s.wmp, None, "the WMP manager is off unless asked for");
        assert_eq!(s.gearman.job_retries, 0);
        assert!(
            !s.gearman.allow_shutdown,
            "admin shutdown is off unless asked for"
        );
        assert_eq!(s.fsync, FsyncMode::Always);
        assert_eq!(s.max_job_size, 65535);
        assert_eq!(s.threads, None, "one per core unless set");
        assert_eq!(s.max_inflight_bytes, 256 << 20);

        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("j.toml");
        let cfg = path.to_str().unwrap();
        std::fs::write(
            &path,
            "fsync = \"never\"\nmax_job_size = 10\nbeanstalk_listen = \"off\"\nthreads = 1\n\
             salvage = true\ngearman_allow_shutdown = true\nhttp_listen = \"off\"\n\
             http_worker_idle_ms = 500\nwmp_listen = \"tcp://127.0.0.1:5570\"\n",
        )
        .unwrap();
        let s = serve(&["--config", cfg, "--max-job-size", "20"]).unwrap();
        assert_eq!(s.fsync, FsyncMode::Never);
        assert_eq!(s.max_job_size, 20, "a flag beats the file");
        assert_eq!(s.beanstalk_listen, None, "off disables the listener");
        assert_eq!(s.threads, Some(1));
        assert_eq!(s.http_listen, None, "off disables the HTTP API");
        assert_eq!(s.http_worker_idle, Duration::from_millis(500));
        assert_eq!(
            s.wmp.as_ref().map(|w| w.listen.as_str()),
            Some("tcp://127.0.0.1:5570")
        );
        assert!(
            s.salvage && s.gearman.allow_shutdown,
            "booleans from the file"
        );
        let s = serve(&[&format!("--config={cfg}")]).unwrap();
        assert_eq!(s.max_job_size, 10, "the file beats the default");

        // Another subcommand's --config is not this file.
        #[derive(clap::Parser)]
        struct Other {
            #[arg(long)]
            config: Option<String>,
        }
        let other: Vec<String> = ["jobyard", "jobd", "--config", "/etc/jobd.conf"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        assert!(with_file_defaults(<Other as clap::CommandFactory>::command(), &other).is_ok());

        std::fs::write(&path, "no_such_key = 1\n").unwrap();
        let err = serve(&["--config", cfg]).unwrap_err();
        assert!(err.contains("no_such_key"), "{err}");
        std::fs::write(&path, "threads = [1]\n").unwrap();
        assert!(serve(&["--config", cfg]).unwrap_err().contains("threads"));
    }

    #[test]
    fn queue_tables_of_the_config_become_declared_policies() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("j.toml");
        let tables = "[queues.emails]\nrate_limit = \"10/s\"\nlease_limit = 4\n\
                      [queues.reports]\npaused = true\n";
        std::fs::write(&path, format!("http_listen = \"off\"\n{tables}")).unwrap();
        let s = serve(&["--config", path.to_str().unwrap()]).unwrap();
        let names: Vec<&str> = s.queues.iter().map(|q| q.name.as_str()).collect();
        assert_eq!(names, ["emails", "reports"]);
        assert_eq!(s.queues[0].lease_limit, Some(4));
        assert_eq!(s.queues[1].paused, Some(true));
        std::fs::write(&path, "[queues.emails]\nrate_limit = \"fast\"\n").unwrap();
        let err = serve(&["--config", path.to_str().unwrap()]).unwrap_err();
        assert!(err.contains("[queues.emails]"), "{err}");
    }

    #[test]
    fn flows_come_from_the_config_or_a_file_and_are_validated() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("j.toml");
        let cfg = path.to_str().unwrap();
        let flow = "[[flows]]\nname = \"f\"\nlookupAttributes = [\"u\"]\n\
                    [[flows.stages]]\nname = \"a\"\nnext = \"b\"\n\
                    [[flows.stages]]\nname = \"b\"\npriorities = 3\n";
        std::fs::write(&path, format!("http_listen = \"off\"\n{flow}")).unwrap();
        let s = serve(&["--config", cfg]).unwrap();
        assert_eq!(s.flows.len(), 1);
        assert_eq!(s.flows[0].stages[1].priorities, 3);
        let file = dir.path().join("flows.toml");
        std::fs::write(&file, flow).unwrap();
        let s = serve(&["--flows", file.to_str().unwrap()]).unwrap();
        assert_eq!(s.flows[0].lookup_attributes, ["u"]);
        std::fs::write(&file, flow.replace("next = \"b\"", "next = \"z\"")).unwrap();
        let err = serve(&["--flows", file.to_str().unwrap()]).unwrap_err();
        assert!(err.contains("\"z\""), "{err}");
        std::fs::write(&file, format!("{flow}{flow}")).unwrap();
        let err = serve(&["--flows", file.to_str().unwrap()]).unwrap_err();
        assert!(err.contains("twice"), "{err}");
    }

    #[test]
    fn serve_starts_from_the_defaults_the_drop_ins_share() {
        let serve = ServeArgs::default().resolve().unwrap();
        let defaults = Settings::default();
        assert_eq!(
            (
                defaults.data_dir.as_ref(),
                defaults.beanstalk_listen.as_ref()
            ),
            (None, None),
            "the defaults are memory only with no listener"
        );
        assert_eq!(
            (&defaults.gearman_listen, &defaults.http_listen),
            (&None, &None)
        );
        assert_eq!(
            serve,
            Settings {
                data_dir: serve.data_dir.clone(),
                beanstalk_listen: serve.beanstalk_listen.clone(),
                gearman_listen: serve.gearman_listen.clone(),
                http_listen: serve.http_listen.clone(),
                ..defaults
            },
            "serve differs from the defaults only in its data directory and listeners"
        );
    }

    #[test]
    fn storage_takes_a_postgres_url_and_never_shows_its_password() {
        let s = serve(&["--storage", "postgresql://app:pw@db:5432/jobs"]).unwrap();
        let location = s.postgres.as_ref().unwrap();
        assert_eq!(location.schema, "jobyard");
        assert!(!s.bodies_in_log, "bodies stay in memory with PostgreSQL");
        assert!(!format!("{s:?}").contains(":pw@"), "{s:?}");
        let s = serve(&["--storage", "postgres://a@h/d", "--storage-schema", "q1"]).unwrap();
        assert_eq!(s.postgres.unwrap().schema, "q1");
        let err = serve(&["--storage", "mysql://app:pw@db/jobs"]).unwrap_err();
        assert!(
            err.contains("postgres://") && !err.contains(":pw@"),
            "{err}"
        );
        let err = serve(&["--storage-schema", "x"]).unwrap_err();
        assert!(err.contains("--storage"), "{err}");
    }

    #[test]
    fn the_advertised_listeners_go_to_the_storage_with_the_advertise_host() {
        let s = serve(&[
            "--storage",
            "postgres://a@h/d",
            "--beanstalk-listen",
            "0.0.0.0:11311",
            "--gearman-listen",
            "off",
            "--http-listen",
            "127.0.0.1:8088",
        ])
        .unwrap();
        let advertise = &s.postgres.as_ref().unwrap().advertise;
        assert_eq!(advertise.gearman, None);
        assert_eq!(advertise.http.as_deref(), Some("127.0.0.1:8088"));
        assert!(advertise.beanstalk.as_deref().unwrap().ends_with(":11311"));
        let s = serve(&[
            "--storage",
            "postgres://a@h/d",
            "--advertise-host",
            "n1.lan",
        ])
        .unwrap();
        let advertise = &s.postgres.as_ref().unwrap().advertise;
        assert_eq!(advertise.beanstalk.as_deref(), Some("n1.lan:11300"));
        assert_eq!(advertise.gearman.as_deref(), Some("n1.lan:4730"));
        let err = serve(&["--advertise-host", "n1.lan"]).unwrap_err();
        assert!(err.contains("--storage"), "{err}");
    }

    #[test]
    fn a_job_size_over_one_gib_is_refused() {
        let err = ServeArgs {
            max_job_size: Some(MAX_MAX_JOB_SIZE + 1),
            ..Default::default()
        }
        .resolve()
        .unwrap_err();
        assert!(err.contains("at most"));
    }
}
