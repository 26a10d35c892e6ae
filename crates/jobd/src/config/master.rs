//! jobd-master's ini config: jobd 1.12's keys and defaults, with a new `worker_timeout`.

use std::path::PathBuf;

use super::ini::Ini;
use super::values::{boolean, err, level, nonneg, optional, port, required};

/// Everything jobd-master is configured with.
#[derive(Debug, Clone)]
pub struct MasterConfig {
    /// Listen host.
    pub host: String,
    /// Listen port.
    pub port: u16,
    /// Password clients and workers must send on their first request.
    pub password: Option<String>,
    /// Let loopback clients in without a password.
    pub always_allow_localhost: bool,
    /// Seconds between pings to workers; a worker that has not answered the previous ping
    /// by the next one is dropped.
    pub ping_interval: u64,
    /// Seconds over which pokes are gathered into one flush.
    pub poke_throttle_interval: f64,
    /// New: seconds to wait for a worker's reply to status, pause, continue or send-signal.
    pub worker_timeout: u64,
    /// Optional log file.
    pub log_file: Option<PathBuf>,
    /// Level for the log file.
    pub log_level_file: String,
    /// Level for the console.
    pub log_level_console: String,
}

impl MasterConfig {
    /// Reads a jobd-master config from ini text.
    pub fn parse(text: &str) -> Result<MasterConfig, String> {
        let ini = Ini::parse(text);
        let throttle = match ini.get("poke_throttle_interval") {
            None | Some("") => 0.5,
            Some(v) => v
                .trim()
                .parse::<f64>()
                .ok()
                .filter(|f| f.is_finite() && *f >= 0.0)
                .ok_or_else(|| err("'poke_throttle_interval' must be a number".into()))?,
        };
        Ok(MasterConfig {
            host: required(&ini, "host")?.to_string(),
            port: port(&ini, "port", None)?,
            password: optional(&ini, "password"),
            always_allow_localhost: boolean(&ini, "always_allow_localhost"),
            ping_interval: nonneg(&ini, "ping_interval", 30)?.max(1),
            poke_throttle_interval: throttle,
            worker_timeout: nonneg(&ini, "worker_timeout", 10)?.max(1),
            log_file: optional(&ini, "log_file").map(PathBuf::from),
            log_level_file: level(&ini, "log_level_file")?,
            log_level_console: level(&ini, "log_level_console")?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn master_defaults() {
        let c = MasterConfig::parse("host = 127.0.0.1\nport = 7081\n").unwrap();
        assert_eq!(c.ping_interval, 30);
        assert_eq!(c.poke_throttle_interval, 0.5);
        let c = MasterConfig::parse("host = h\nport = 1\npoke_throttle_interval = 0.1\n").unwrap();
        assert_eq!(c.poke_throttle_interval, 0.1);
    }
}
