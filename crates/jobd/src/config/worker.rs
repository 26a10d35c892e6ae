//! The jobd worker daemon's ini config: the same keys, defaults and error messages as
//! jobd 1.12 (docs/jobd.md, "Configuration"), with its config bugs fixed: `mysql_port` is used, `0` is a
//! value rather than "unset", and `mysql_fetch_limit = 0` means "no cap".

use std::path::PathBuf;

use super::ini::Ini;
use super::values::{boolean, err, int, level, nonneg, optional, port, port_opt, required};

/// Where the MySQL jobs table is.
#[derive(Debug, Clone)]
pub struct MysqlConfig {
    /// Host name, IP address, or an absolute path to a UNIX socket.
    pub host: String,
    /// TCP port (honoured, unlike jobd).
    pub port: u16,
    /// User name.
    pub user: String,
    /// Password (may be empty).
    pub password: String,
    /// Database name.
    pub database: String,
    /// Table name.
    pub table: String,
}

/// Everything the jobd worker daemon is configured with.
#[derive(Debug, Clone)]
pub struct JobdConfig {
    /// Listen host.
    pub host: String,
    /// Listen port.
    pub port: u16,
    /// Password clients must send on their first request; also sent to the master.
    pub password: Option<String>,
    /// Let loopback clients (127.0.0.1, ::1, ::ffff:127.0.0.1) in without a password.
    pub always_allow_localhost: bool,
    /// Worker name shown by the master (default: the host name).
    pub name: String,
    /// The master to register with, if both host and port are set.
    pub master: Option<(String, u16)>,
    /// Seconds between attempts to reach the master.
    pub master_reconnect_timeout: u64,
    /// Optional log file (logs also go to stderr).
    pub log_file: Option<PathBuf>,
    /// Level for the log file.
    pub log_level_file: String,
    /// Level for the console.
    pub log_level_console: String,
    /// The jobs table.
    pub mysql: MysqlConfig,
    /// Most rows taken by one fetch (0 = no cap besides free slots).
    pub mysql_fetch_limit: u64,
    /// Command template; `{id}` is replaced, then it is split on spaces (no shell).
    pub launcher: String,
    /// Working directory of launched jobs (default: the daemon's).
    pub launcher_cwd: Option<PathBuf>,
    /// Extra environment of launched jobs (`launcher.env.NAME = value`).
    pub launcher_env: Vec<(String, String)>,
    /// Bytes of stdout and of stderr kept per job.
    pub max_output_buffer: usize,
    /// Targets and their concurrency, in file order.
    pub targets: Vec<(String, u32)>,
    /// New: seconds running jobs get to finish on shutdown before their process groups are
    /// sent SIGTERM (then SIGKILL 5 s later).
    pub shutdown_timeout: u64,
    /// New: on start, put `accepted` rows of this worker's targets back to `waiting` and
    /// mark `running` ones failed (turn off when other live workers share a target).
    pub reclaim_on_start: bool,
}

/// This machine's host name (jobd's default worker name).
pub fn hostname() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: the buffer is valid for its length; gethostname NUL-terminates or truncates.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    if rc != 0 {
        return "localhost".into();
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..end]).into_owned()
}

/// Checks a target name and concurrency from `[targets]`, with jobd's messages.
fn target_entry(name: &str, value: &str) -> Result<(String, u32), String> {
    if name == "null" {
        return Err(err(
            "word 'null' is reserved, please don't use it as a target name".into(),
        ));
    }
    let n: f64 = value
        .trim()
        .parse()
        .map_err(|_| err(format!("value of target '{name}' must be a number")))?;
    if n < 1.0 || n.fract() != 0.0 || n > u32::MAX as f64 {
        return Err(err(format!("target '{name}' has invalid value")));
    }
    Ok((name.to_string(), n as u32))
}

impl JobdConfig {
    /// Reads a jobd config from ini text.
    pub fn parse(text: &str) -> Result<JobdConfig, String> {
        let ini = Ini::parse(text);
        let host = required(&ini, "host")?.to_string();
        let port = port(&ini, "port", None)?;
        let master_port = port_opt(&ini, "master_port")?;
        let master = match (optional(&ini, "master_host"), master_port) {
            (Some(h), Some(p)) if p != 0 => Some((h, p)),
            _ => None,
        };
        let mysql = MysqlConfig {
            host: required(&ini, "mysql_host")?.to_string(),
            port: self::port(&ini, "mysql_port", None)?,
            user: required(&ini, "mysql_user")?.to_string(),
            password: ini
                .get("mysql_password")
                .ok_or_else(|| err("'mysql_password' is not defined".into()))?
                .to_string(),
            database: required(&ini, "mysql_database")?.to_string(),
            table: required(&ini, "mysql_table")?.to_string(),
        };
        let fetch = int(&ini, "mysql_fetch_limit", Some(100))?;
        let launcher = required(&ini, "launcher")?.to_string();
        let max_output = int(&ini, "max_output_buffer", Some(1024 * 1024))?;
        if !ini.has_section("targets") {
            return Err(err("'targets' is not defined".into()));
        }
        let mut targets = Vec::new();
        for (name, value) in ini.section("targets") {
            targets.push(target_entry(name, value)?);
        }
        let launcher_env = ini
            .section("")
            .filter_map(|(k, v)| {
                k.strip_prefix("launcher.env.")
                    .map(|n| (n.to_string(), v.to_string()))
            })
            .collect();
        Ok(JobdConfig {
            host,
            port,
            password: optional(&ini, "password"),
            always_allow_localhost: boolean(&ini, "always_allow_localhost"),
            name: optional(&ini, "name").unwrap_or_else(hostname),
            master,
            master_reconnect_timeout: nonneg(&ini, "master_reconnect_timeout", 10)?,
            log_file: optional(&ini, "log_file").map(PathBuf::from),
            log_level_file: level(&ini, "log_level_file")?,
            log_level_console: level(&ini, "log_level_console")?,
            mysql,
            mysql_fetch_limit: u64::try_from(fetch)
                .map_err(|_| err("'mysql_fetch_limit' must not be negative".into()))?,
            launcher,
            launcher_cwd: optional(&ini, "launcher.cwd").map(PathBuf::from),
            launcher_env,
            max_output_buffer: usize::try_from(max_output)
                .map_err(|_| err("'max_output_buffer' must not be negative".into()))?,
            targets,
            shutdown_timeout: nonneg(&ini, "shutdown_timeout", 30)?,
            reclaim_on_start: ini
                .get("reclaim_on_start")
                .map(|v| v == "1" || v == "true")
                .unwrap_or(true),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BASE: &str = "host = 0.0.0.0\nport = 7080\nmysql_host = 127.0.0.1\nmysql_port = 3307\n\
        mysql_user = u\nmysql_password = p\nmysql_database = d\nmysql_table = jobs\n\
        launcher = php /x/launcher.php {id}\nlauncher.env.FOO = bar\n";

    #[test]
    fn defaults_and_values() {
        let c = JobdConfig::parse(&format!("{BASE}[targets]\nlow = 5\n1/high = 2\n")).unwrap();
        assert_eq!(c.mysql.port, 3307);
        assert_eq!(c.mysql_fetch_limit, 100);
        assert_eq!(c.max_output_buffer, 1048576);
        assert_eq!(c.master_reconnect_timeout, 10);
        assert_eq!(c.launcher_env, vec![("FOO".to_string(), "bar".to_string())]);
        assert_eq!(c.targets, vec![("low".into(), 5), ("1/high".into(), 2)]);
        assert!(c.master.is_none());
        assert!(!c.always_allow_localhost);
    }

    #[test]
    fn jobd_error_messages() {
        let e = |t: &str| JobdConfig::parse(t).unwrap_err();
        assert_eq!(
            e("port = 1\n"),
            "config parsing error: 'host' is not defined"
        );
        assert_eq!(
            e("host = h\nport = x\n"),
            "config parsing error: 'port' must be an integer"
        );
        assert_eq!(
            e(&format!("{BASE}[targets]\nnull = 1\n")),
            "config parsing error: word 'null' is reserved, please don't use it as a target name"
        );
        assert_eq!(
            e(&format!("{BASE}[targets]\na = x\n")),
            "config parsing error: value of target 'a' must be a number"
        );
        assert_eq!(
            e(&format!("{BASE}[targets]\na = 0\n")),
            "config parsing error: target 'a' has invalid value"
        );
        assert_eq!(e(BASE), "config parsing error: 'targets' is not defined");
    }

    #[test]
    fn zero_is_a_value() {
        let c =
            JobdConfig::parse(&format!("{BASE}mysql_fetch_limit = 0\n[targets]\na=1\n")).unwrap();
        assert_eq!(c.mysql_fetch_limit, 0);
    }
}
