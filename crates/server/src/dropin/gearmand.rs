//! `jobyard gearmand [flags]`: gearmand 1.1's command line, so existing service files and
//! init scripts keep working when the binary is swapped (also when invoked as `gearmand`).
//!
//! Flags with a meaning in jobyard keep gearmand's meaning; the others are accepted and
//! ignored with a warning on stderr. Persistent queue types (`-q libsqlite3`, `mysql`,
//! ...) all map to jobyard's own durable log; `-q builtin` (the default) keeps jobs in
//! memory, exactly like gearmand, unless `--data-dir` (a jobyard extension) is given.

use std::path::{Path, PathBuf};

use jobyard_gearman::{Config, Keepalive};
use jobyard_storage::FsyncMode;

use crate::settings::{parse_fsync, Settings};

/// What the command line asks for.
#[derive(Debug, PartialEq)]
pub enum Gearmand {
    Run(Box<Launch>),
    /// Print this to stdout and exit 0 (`-V`, `-h`).
    Print(String),
    /// Print this to stderr and exit 1.
    Fail(String),
}

/// Settings plus the process-level duties gearmand performs before serving.
#[derive(Debug, PartialEq)]
pub struct Launch {
    pub settings: Settings,
    pub daemon: bool,
    pub pid_file: Option<PathBuf>,
    /// `-l`: `None` = stderr; `Some("none")` discards logs.
    pub log_file: Option<PathBuf>,
    /// Warnings about flags that do not apply, printed at start.
    pub warnings: Vec<String>,
}

pub const USAGE: &str = "\
Usage: gearmand [OPTIONS]   (served by jobyard)

  -p, --port PORT             port to listen on (default 4730, or $GEARMAND_PORT)
  -L, --listen ADDR           address to listen on (default: all IPv4 addresses)
  -j, --job-retries N         fail a job after it was handed out N times (0 = never)
  -R, --round-robin           rotate a worker's functions after each assignment
      --exceptions            enable the exceptions option for every connection
      --job-handle-prefix P   job handles are P:ID (default H:<hostname>)
      --keepalive, --keepalive-idle N, --keepalive-interval N, --keepalive-count N
  -q, --queue-type TYPE       builtin (memory only) or any persistent type (jobyard log)
      --libsqlite3-db PATH    with a persistent queue type: log kept in PATH's directory/jobyard
  -l, --log-file FILE         log to FILE (`stderr`, `none`)
  -v, --verbose LEVEL         FATAL ALERT CRITICAL ERROR WARNING NOTICE INFO DEBUG
  -d, --daemon                detach into the background
  -P, --pid-file FILE         write the process id to FILE
  -u, --user USER             switch to USER after binding
      --config-file FILE      read more options from FILE (whitespace separated)
  -V, --version               print the version
  -h, --help                  print this help
jobyard extensions:
      --data-dir DIR          keep background jobs durable in DIR (any queue type)
      --fsync MODE            always | never | interval=<ms> (default always)
      --max-packet BYTES      largest packet body (default 67108864)
      --allow-shutdown        let the admin command `shutdown` stop the server
-t/--threads N sets jobyard's runtime threads (0: one per core).
Accepted and ignored: -b/--backlog, -w/--worker-wakeup, -f/--file-descriptors,
  --hashtable-buckets, --syslog, --coredump, --store-queue-on-shutdown and the options of the
  libsqlite3, libpq, mysql, redis and libmemcached queues.
";

/// Options that take a value, by long name, with their short letter.
const WITH_VALUE: &[(&str, Option<char>)] = &[
    ("port", Some('p')),
    ("listen", Some('L')),
    ("backlog", Some('b')),
    ("threads", Some('t')),
    ("job-retries", Some('j')),
    ("worker-wakeup", Some('w')),
    ("job-handle-prefix", None),
    ("hashtable-buckets", None),
    ("keepalive-idle", None),
    ("keepalive-interval", None),
    ("keepalive-count", None),
    ("queue-type", Some('q')),
    ("log-file", Some('l')),
    ("verbose", Some('v')),
    ("pid-file", Some('P')),
    ("user", Some('u')),
    ("file-descriptors", Some('f')),
    ("config-file", None),
    ("protocol", Some('r')),
    ("http-port", None),
    ("data-dir", None),
    ("fsync", None),
    ("max-packet", None),
];

/// Queue-plugin options: accepted (they take a value) and ignored.
const PLUGIN_PREFIXES: &[&str] = &["libsqlite3-", "libpq-", "mysql-", "redis-", "libmemcached-"];

/// Splits the arguments into (name, value) pairs, long names for everything.
fn options(args: &[String]) -> Result<Vec<(String, Option<String>)>, String> {
    let mut out = Vec::new();
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        let (name, glued) = if let Some(long) = arg.strip_prefix("--") {
            match long.split_once('=') {
                Some((n, v)) => (n.to_string(), Some(v.to_string())),
                None => (long.to_string(), None),
            }
        } else if let Some(short) = arg.strip_prefix('-').filter(|s| !s.is_empty()) {
            let c = short.chars().next().expect("non-empty");
            let rest = &short[c.len_utf8()..];
            let long = WITH_VALUE
                .iter()
                .find(|(_, s)| *s == Some(c))
                .map(|(l, _)| l.to_string())
                .or_else(|| {
                    let long = match c {
                        'R' => "round-robin",
                        'd' => "daemon",
                        'V' => "version",
                        'h' => "help",
                        _ => return None,
                    };
                    Some(long.to_string())
                })
                .ok_or_else(|| format!("unknown option -{c}"))?;
            (long, (!rest.is_empty()).then(|| rest.to_string()))
        } else {
            return Err(format!("unexpected argument {arg:?}"));
        };
        let takes_value = WITH_VALUE.iter().any(|(l, _)| *l == name)
            || PLUGIN_PREFIXES.iter().any(|p| name.starts_with(p))
            || name.starts_with("ssl-");
        let value = match (takes_value, glued) {
            (_, Some(v)) => Some(v),
            // gearmand's -v/--verbose may also be given bare (older releases counted them).
            (true, None) if name == "verbose" => match it.as_slice().first() {
                Some(v) if !v.starts_with('-') => it.next().cloned(),
                _ => None,
            },
            (true, None) => Some(
                it.next()
                    .cloned()
                    .ok_or(format!("--{name} needs a value"))?,
            ),
            (false, None) => None,
        };
        out.push((name, value));
    }
    Ok(out)
}

fn number<T: std::str::FromStr>(name: &str, v: &Option<String>) -> Result<T, String> {
    v.as_deref()
        .unwrap_or("")
        .trim()
        .parse()
        .map_err(|_| format!("bad value for --{name}: {:?}", v.as_deref().unwrap_or("")))
}

/// Parses gearmand's flags (without the program name). `env_port` is `$GEARMAND_PORT`.
pub fn parse(args: &[String], env_port: Option<String>) -> Gearmand {
    match parse_inner(args, env_port) {
        Ok(g) => g,
        Err(e) => Gearmand::Fail(format!("gearmand: {e}\n{USAGE}")),
    }
}

fn parse_inner(args: &[String], env_port: Option<String>) -> Result<Gearmand, String> {
    let mut opts = options(args)?;
    if let Some((_, Some(file))) = opts.iter().find(|(n, _)| n == "config-file").cloned() {
        let text =
            std::fs::read_to_string(&file).map_err(|e| format!("cannot read {file}: {e}"))?;
        let extra: Vec<String> = text.split_whitespace().map(str::to_string).collect();
        let mut from_file = options(&extra)?;
        from_file.append(&mut opts);
        opts = from_file;
    }
    let mut port = env_port.unwrap_or_else(|| "4730".into());
    let mut addr = "0.0.0.0".to_string();
    let mut gearman = Config::default();
    let mut keepalive: Option<Keepalive> = None;
    let mut queue_type = "builtin".to_string();
    let mut sqlite_db: Option<PathBuf> = None;
    let mut data_dir: Option<PathBuf> = None;
    let mut fsync = FsyncMode::Always;
    let mut verbosity = 0u8;
    let mut launch_daemon = false;
    let mut pid_file = None;
    let mut log_file = None;
    let mut user = None;
    let mut threads = None;
    let mut warnings = Vec::new();
    for (name, value) in &opts {
        let v = || value.clone().unwrap_or_default();
        match name.as_str() {
            "help" => return Ok(Gearmand::Print(USAGE.into())),
            "version" => {
                return Ok(Gearmand::Print(format!(
                    "gearmand 1.1.20 (jobyard {})\n",
                    env!("CARGO_PKG_VERSION")
                )))
            }
            "port" => port = v(),
            "listen" => addr = v(),
            "job-retries" => gearman.job_retries = number(name, value)?,
            "round-robin" => gearman.round_robin = true,
            "exceptions" => gearman.exceptions = true,
            "job-handle-prefix" => gearman.handle_prefix = v(),
            "keepalive" => {
                keepalive.get_or_insert_with(Keepalive::default);
            }
            "keepalive-idle" | "keepalive-interval" | "keepalive-count" => {
                let n: i64 = number(name, value)?;
                // gearmand's default of -1 means "system default".
                let n = (n >= 0).then_some(n.min(u32::MAX as i64) as u32);
                let k = keepalive.get_or_insert_with(Keepalive::default);
                match name.as_str() {
                    "keepalive-idle" => k.idle_secs = n,
                    "keepalive-interval" => k.interval_secs = n,
                    _ => k.count = n,
                }
            }
            "queue-type" => queue_type = v().to_ascii_lowercase(),
            "libsqlite3-db" => sqlite_db = Some(PathBuf::from(v())),
            "log-file" => log_file = Some(PathBuf::from(v())),
            "verbose" => match value.as_deref().map(str::to_ascii_uppercase) {
                None => verbosity = verbosity.saturating_add(1),
                Some(level) => {
                    let known = [
                        "FATAL", "ALERT", "CRITICAL", "ERROR", "WARNING", "NOTICE", "INFO", "DEBUG",
                    ];
                    if !known.contains(&level.as_str()) {
                        return Err(format!("unknown verbose level {level:?}"));
                    }
                    verbosity = (level == "DEBUG") as u8;
                    gearman.verbose_level = level;
                }
            },
            "daemon" => launch_daemon = true,
            "pid-file" => pid_file = Some(PathBuf::from(v())),
            "user" => user = Some(v()),
            "data-dir" => data_dir = Some(PathBuf::from(v())),
            "fsync" => fsync = parse_fsync(&v())?,
            "max-packet" => gearman.max_packet = number(name, value)?,
            "allow-shutdown" => gearman.allow_shutdown = true,
            "protocol" | "http-port" => warnings.push(format!(
                "--{name}: the HTTP front end is not supported; only the Gear protocol is served"
            )),
            n if n == "ssl" || n.starts_with("ssl-") => {
                return Err(
                    "TLS (--ssl) is not supported; refusing to serve plaintext instead".into(),
                )
            }
            "threads" => threads = Some(number::<usize>(name, value)?).filter(|&n| n > 0),
            "backlog"
            | "worker-wakeup"
            | "file-descriptors"
            | "hashtable-buckets"
            | "syslog"
            | "coredump"
            | "store-queue-on-shutdown" => {
                warnings.push(format!("--{name} does not apply to jobyard and is ignored"))
            }
            n if PLUGIN_PREFIXES.iter().any(|p| n.starts_with(p)) => warnings.push(format!(
                "--{name}: queue plugins are replaced by jobyard's own log; ignored"
            )),
            other => return Err(format!("unknown option --{other}")),
        }
    }
    if queue_type != "builtin" && data_dir.is_none() {
        let dir = match &sqlite_db {
            Some(db) => db.parent().unwrap_or(Path::new(".")).join("jobyard"),
            None => PathBuf::from("jobyard-data"),
        };
        warnings.push(format!(
            "queue type {queue_type}: background jobs are kept in jobyard's log in {}",
            dir.display()
        ));
        data_dir = Some(dir);
    }
    let listen = if addr.contains(':') && !addr.starts_with('[') {
        format!("[{addr}]:{port}")
    } else {
        format!("{addr}:{port}")
    };
    if gearman.verbose_level == "INFO" && verbosity > 0 {
        gearman.verbose_level = "DEBUG".into();
    }
    gearman.keepalive = keepalive;
    Ok(Gearmand::Run(Box::new(Launch {
        settings: Settings {
            data_dir,
            fsync,
            user,
            verbosity,
            threads,
            gearman_listen: Some(listen),
            gearman: Box::new(gearman),
            ..Settings::default()
        },
        daemon: launch_daemon,
        pid_file,
        log_file,
        warnings,
    })))
}

/// Performs what gearmand does before serving: log redirection, daemonizing, pid file.
/// Must run before any thread is started (fork).
pub fn prepare(launch: &Launch) -> Result<(), String> {
    for w in &launch.warnings {
        eprintln!("gearmand (jobyard): warning: {w}");
    }
    if let Some(path) = &launch.log_file {
        if path != Path::new("stderr") {
            let target = if path == Path::new("none") {
                PathBuf::from("/dev/null")
            } else {
                path.clone()
            };
            let file = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&target)
                .map_err(|e| format!("cannot open log file {}: {e}", target.display()))?;
            // SAFETY: dup2 onto fd 2 with a file descriptor we own; no threads exist yet.
            if unsafe { libc::dup2(std::os::fd::AsRawFd::as_raw_fd(&file), 2) } < 0 {
                return Err(format!(
                    "cannot redirect logs: {}",
                    std::io::Error::last_os_error()
                ));
            }
        }
    }
    if launch.daemon {
        // SAFETY: called from main before any other thread exists, so fork is sound.
        unsafe {
            match libc::fork() {
                -1 => return Err(format!("fork: {}", std::io::Error::last_os_error())),
                0 => {
                    libc::setsid();
                }
                _ => libc::_exit(0),
            }
        }
    }
    if let Some(path) = &launch.pid_file {
        std::fs::write(path, format!("{}\n", std::process::id()))
            .map_err(|e| format!("cannot write pid file {}: {e}", path.display()))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn launch(args: &[&str]) -> Launch {
        let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        match parse(&args, None) {
            Gearmand::Run(l) => *l,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn defaults_are_gearmands() {
        let l = launch(&[]);
        assert_eq!(l.settings.gearman_listen.as_deref(), Some("0.0.0.0:4730"));
        assert_eq!(l.settings.beanstalk_listen, None);
        assert_eq!(
            l.settings.data_dir, None,
            "builtin queue: memory only, as gearmand"
        );
        assert_eq!(l.settings.gearman.job_retries, 0);
        assert!(!l.daemon);
        let args = vec![];
        match parse(&args, Some("5000".into())) {
            Gearmand::Run(l) => {
                assert_eq!(l.settings.gearman_listen.as_deref(), Some("0.0.0.0:5000"))
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn common_flags_keep_their_meaning() {
        let l = launch(&[
            "-p4731",
            "-L",
            "127.0.0.1",
            "-j",
            "3",
            "--round-robin",
            "--exceptions",
            "--job-handle-prefix=X",
            "--keepalive",
            "--keepalive-idle",
            "30",
            "-v",
            "DEBUG",
            "-t",
            "8",
            "-d",
            "--pid-file=/tmp/p",
            "-l",
            "stderr",
            "-u",
            "nobody",
        ]);
        let s = &l.settings;
        assert_eq!(s.gearman_listen.as_deref(), Some("127.0.0.1:4731"));
        assert_eq!(s.gearman.job_retries, 3);
        assert!(s.gearman.round_robin && s.gearman.exceptions);
        assert_eq!(s.gearman.handle_prefix, "X");
        assert_eq!(s.gearman.keepalive.as_ref().unwrap().idle_secs, Some(30));
        assert_eq!(s.gearman.verbose_level, "DEBUG");
        assert_eq!(s.verbosity, 1);
        assert_eq!(s.user.as_deref(), Some("nobody"));
        assert!(l.daemon);
        assert_eq!(l.pid_file, Some(PathBuf::from("/tmp/p")));
        assert_eq!(s.threads, Some(8), "-t sets the runtime threads");
        assert_eq!(
            launch(&["-t", "0"]).settings.threads,
            None,
            "-t 0: one per core"
        );
        assert_eq!(
            launch(&["-L", "::1"]).settings.gearman_listen.as_deref(),
            Some("[::1]:4730")
        );
    }

    #[test]
    fn persistent_queue_types_map_to_the_log() {
        let l = launch(&[
            "-q",
            "libsqlite3",
            "--libsqlite3-db",
            "/var/lib/gearman/q.db",
        ]);
        assert_eq!(
            l.settings.data_dir,
            Some(PathBuf::from("/var/lib/gearman/jobyard"))
        );
        let l = launch(&["-q", "MySQL", "--mysql-host", "db"]);
        assert_eq!(l.settings.data_dir, Some(PathBuf::from("jobyard-data")));
        assert!(l.warnings.iter().any(|w| w.contains("--mysql-host")));
        let l = launch(&["--data-dir", "/d", "--fsync", "never"]);
        assert_eq!(l.settings.data_dir, Some(PathBuf::from("/d")));
        assert_eq!(l.settings.fsync, FsyncMode::Never);
    }

    #[test]
    fn bad_input_is_explained() {
        for bad in [
            &["--nope"][..],
            &["-x"],
            &["-p"],
            &["-j", "many"],
            &["--ssl"],
            &["stray"],
        ] {
            let args: Vec<String> = bad.iter().map(|s| s.to_string()).collect();
            assert!(matches!(parse(&args, None), Gearmand::Fail(_)), "{bad:?}");
        }
        let args = vec!["-V".to_string()];
        assert!(
            matches!(parse(&args, None), Gearmand::Print(v) if v.starts_with("gearmand 1.1.20"))
        );
    }
}
