//! Server settings: flags, `JOBYARD_*` environment variables, an optional TOML file.
//!
//! Precedence is flag, then environment, then file, then default. The same [`Settings`]
//! is produced by `jobyard serve` and by the beanstalkd-compatible command line.

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use jobyard_storage::FsyncMode;
use serde::Deserialize;

/// Everything the server needs to start.
#[derive(Clone, Debug, PartialEq)]
pub struct Settings {
    /// `None`: jobs live in memory only (beanstalkd without `-b`).
    pub data_dir: Option<PathBuf>,
    /// `None`: the beanstalkd listener is off.
    pub beanstalk_listen: Option<String>,
    pub fsync: FsyncMode,
    pub max_job_size: u32,
    pub max_connections: usize,
    pub segment_bytes: u64,
    pub compact_min_bytes: u64,
    pub salvage: bool,
    /// Bytes of unfinished request bodies all connections together may buffer.
    pub max_inflight_bytes: u64,
    /// Switch to this user after binding (beanstalkd `-u`).
    pub user: Option<String>,
    pub verbosity: u8,
    /// `None`: the Gearman listener is off.
    pub gearman_listen: Option<String>,
    /// Runtime threads serving connections; `None`: `JOBYARD_THREADS`, else one per core.
    pub threads: Option<usize>,
    /// Gearman protocol options (gearmand's flags and jobyard's limits).
    /// Boxed: it is large and rarely touched, and `Settings` travels inside enums.
    pub gearman: Box<jobyard_gearman::Config>,
}

pub use jobyard_broker::budget::DEFAULT_MAX_INFLIGHT_BYTES;

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
    /// Bytes of request bodies still being received that all connections together may
    /// buffer; past it a put gets OUT_OF_MEMORY (Gearman: ERROR) [default: 268435456].
    #[arg(long, env = "JOBYARD_MAX_INFLIGHT_BYTES")]
    pub max_inflight_bytes: Option<u64>,
    /// Threads serving connections. One costs less CPU per job at moderate load; one per
    /// core gives the most throughput when saturated (docs/performance.md) [default: one per core].
    #[arg(long, env = "JOBYARD_THREADS")]
    pub threads: Option<usize>,
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
    /// More log output (repeatable).
    #[arg(short = 'V', long = "verbose", action = clap::ArgAction::Count)]
    pub verbose: u8,
}

/// The TOML file: the same settings as the flags.
#[derive(Deserialize, Debug, Default)]
#[serde(deny_unknown_fields)]
struct FileSettings {
    data_dir: Option<PathBuf>,
    beanstalk_listen: Option<String>,
    fsync: Option<String>,
    max_job_size: Option<u32>,
    max_connections: Option<usize>,
    segment_bytes: Option<u64>,
    compact_min_bytes: Option<u64>,
    salvage: Option<bool>,
    max_inflight_bytes: Option<u64>,
    threads: Option<usize>,
    gearman_listen: Option<String>,
    gearman_max_packet: Option<u32>,
    gearman_job_retries: Option<u32>,
    gearman_allow_shutdown: Option<bool>,
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

impl ServeArgs {
    /// Combines flags/environment with the file and the defaults.
    pub fn resolve(self) -> Result<Settings, String> {
        let file = match &self.config {
            Some(path) => {
                let text = std::fs::read_to_string(path)
                    .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
                toml::from_str::<FileSettings>(&text)
                    .map_err(|e| format!("bad config {}: {e}", path.display()))?
            }
            None => FileSettings::default(),
        };
        let fsync = self.fsync.or(file.fsync).unwrap_or_else(|| "always".into());
        let max_job_size = self
            .max_job_size
            .or(file.max_job_size)
            .unwrap_or(DEFAULT_MAX_JOB_SIZE);
        if max_job_size > MAX_MAX_JOB_SIZE {
            return Err(format!("--max-job-size is at most {MAX_MAX_JOB_SIZE}"));
        }
        Ok(Settings {
            data_dir: Some(
                self.data_dir
                    .or(file.data_dir)
                    .unwrap_or_else(|| PathBuf::from("jobyard-data")),
            ),
            beanstalk_listen: listen(
                self.beanstalk_listen
                    .or(file.beanstalk_listen)
                    .unwrap_or_else(|| "127.0.0.1:11300".into()),
            ),
            fsync: parse_fsync(&fsync)?,
            max_job_size,
            max_connections: self
                .max_connections
                .or(file.max_connections)
                .unwrap_or(10_000),
            segment_bytes: self
                .segment_bytes
                .or(file.segment_bytes)
                .unwrap_or(64 << 20),
            compact_min_bytes: self
                .compact_min_bytes
                .or(file.compact_min_bytes)
                .unwrap_or(64 << 20),
            salvage: self.salvage || file.salvage.unwrap_or(false),
            max_inflight_bytes: self
                .max_inflight_bytes
                .or(file.max_inflight_bytes)
                .unwrap_or(DEFAULT_MAX_INFLIGHT_BYTES),
            user: None,
            verbosity: self.verbose,
            threads: self.threads.or(file.threads).filter(|&n| n > 0),
            gearman_listen: listen(
                self.gearman_listen
                    .or(file.gearman_listen)
                    .unwrap_or_else(|| "127.0.0.1:4730".into()),
            ),
            gearman: Box::new(jobyard_gearman::Config {
                max_packet: self
                    .gearman_max_packet
                    .or(file.gearman_max_packet)
                    .unwrap_or(jobyard_gearman::DEFAULT_MAX_PACKET),
                job_retries: self
                    .gearman_job_retries
                    .or(file.gearman_job_retries)
                    .unwrap_or(0),
                allow_shutdown: self.gearman_allow_shutdown
                    || file.gearman_allow_shutdown.unwrap_or(false),
                verbose_level: if self.verbose > 0 { "DEBUG" } else { "INFO" }.into(),
                ..jobyard_gearman::Config::default()
            }),
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
    fn defaults_file_and_flags_combine_in_order() {
        let s = ServeArgs::default().resolve().unwrap();
        assert_eq!(s.data_dir, Some(PathBuf::from("jobyard-data")));
        assert_eq!(s.beanstalk_listen.as_deref(), Some("127.0.0.1:11300"));
        assert_eq!(s.gearman_listen.as_deref(), Some("127.0.0.1:4730"));
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
        std::fs::write(
            &path,
            "fsync = \"never\"\nmax_job_size = 10\nbeanstalk_listen = \"off\"\nthreads = 1\n",
        )
        .unwrap();
        let s = ServeArgs {
            config: Some(path.clone()),
            max_job_size: Some(20),
            ..Default::default()
        }
        .resolve()
        .unwrap();
        assert_eq!(s.fsync, FsyncMode::Never);
        assert_eq!(s.max_job_size, 20, "a flag beats the file");
        assert_eq!(s.beanstalk_listen, None, "off disables the listener");
        assert_eq!(s.threads, Some(1));

        std::fs::write(&path, "no_such_key = 1\n").unwrap();
        let err = ServeArgs {
            config: Some(path),
            ..Default::default()
        }
        .resolve()
        .unwrap_err();
        assert!(err.contains("no_such_key"), "{err}");
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
