//! Server-wide counters and the YAML that `stats`, `stats-tube` and `stats-job` return.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use jobyard_broker::ProtocolMetrics;
use jobyard_engine::{Engine, Job, Millis, Queue, QueueId};

/// The commands beanstalkd counts, in `stats` order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Counted {
    Put,
    Peek,
    PeekReady,
    PeekDelayed,
    PeekBuried,
    Reserve,
    ReserveWithTimeout,
    Delete,
    Release,
    Use,
    Watch,
    Ignore,
    Bury,
    Kick,
    Touch,
    Stats,
    StatsJob,
    StatsTube,
    ListTubes,
    ListTubeUsed,
    ListTubesWatched,
    PauseTube,
}

/// The names of the [`Counted`] commands, as `stats` shows them and in its order.
pub const COUNTED_NAMES: [&str; 22] = [
    "cmd-put",
    "cmd-peek",
    "cmd-peek-ready",
    "cmd-peek-delayed",
    "cmd-peek-buried",
    "cmd-reserve",
    "cmd-reserve-with-timeout",
    "cmd-delete",
    "cmd-release",
    "cmd-use",
    "cmd-watch",
    "cmd-ignore",
    "cmd-bury",
    "cmd-kick",
    "cmd-touch",
    "cmd-stats",
    "cmd-stats-job",
    "cmd-stats-tube",
    "cmd-list-tubes",
    "cmd-list-tube-used",
    "cmd-list-tubes-watched",
    "cmd-pause-tube",
];

/// What beanstalkd's `stats` shows that the broker's registry does not keep: gauges of
/// producers and workers (beanstalkd's own notions) and the server's identity. Command and
/// connection counters live in the registry ([`jobyard_broker::ProtocolMetrics`]).
#[derive(Debug)]
pub struct Stats {
    pub current_producers: AtomicU64,
    pub current_workers: AtomicU64,
    started: Instant,
    id: String,
    hostname: String,
    os: String,
    platform: String,
}

/// What the log reports about itself in `stats`.
#[derive(Clone, Copy, Debug, Default)]
pub struct LogStats {
    pub oldest_index: u64,
    pub current_index: u64,
    pub records_written: u64,
    pub max_size: u64,
}

impl Default for Stats {
    fn default() -> Self {
        Self::new()
    }
}

impl Stats {
    pub fn new() -> Self {
        let (hostname, os, platform) = uname();
        Stats {
            current_producers: AtomicU64::new(0),
            current_workers: AtomicU64::new(0),
            started: Instant::now(),
            id: random_id(),
            hostname,
            os,
            platform,
        }
    }

    /// The `stats` YAML (51 keys in beanstalkd 1.12's order, then jobyard's own version).
    pub fn server_yaml(
        &self,
        engine: &Engine,
        metrics: &ProtocolMetrics,
        max_job_size: u32,
        log: LogStats,
        draining: bool,
    ) -> String {
        let c = engine.counts();
        let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let mut y = String::with_capacity(1400);
        y.push_str("---\n");
        let mut kv = |k: &str, v: &dyn std::fmt::Display| {
            let _ = writeln!(y, "{k}: {v}");
        };
        kv("current-jobs-urgent", &c.urgent);
        kv("current-jobs-ready", &c.ready);
        kv("current-jobs-reserved", &c.reserved);
        kv("current-jobs-delayed", &c.delayed);
        kv("current-jobs-buried", &c.buried);
        for (name, n) in metrics.commands() {
            kv(name, &n);
        }
        let (utime, stime) = rusage();
        kv("job-timeouts", &engine.job_timeouts());
        kv("total-jobs", &engine.total_jobs());
        kv("max-job-size", &max_job_size);
        kv("current-tubes", &engine.queue_count());
        kv("current-connections", &load(&metrics.connections));
        kv("current-producers", &load(&self.current_producers));
        kv("current-workers", &load(&self.current_workers));
        kv("current-waiting", &engine.waiting_count());
        kv("total-connections", &load(&metrics.connections_total));
        kv("pid", &std::process::id());
        // The protocol version, which clients compare; jobyard's own is the last key.
        kv("version", &format!("\"{}\"", crate::PROTOCOL_VERSION));
        kv("rusage-utime", &utime);
        kv("rusage-stime", &stime);
        kv("uptime", &self.started.elapsed().as_secs());
        kv("binlog-oldest-index", &log.oldest_index);
        kv("binlog-current-index", &log.current_index);
        kv("binlog-records-migrated", &0);
        kv("binlog-records-written", &log.records_written);
        kv("binlog-max-size", &log.max_size);
        kv("draining", &draining);
        kv("id", &self.id);
        kv("hostname", &self.hostname);
        kv("os", &self.os);
        kv("platform", &self.platform);
        kv(
            "jobyard-version",
            &format!("\"{}\"", env!("CARGO_PKG_VERSION")),
        );
        y
    }
}

/// The `stats-tube` YAML: beanstalkd's 14 keys, then, only for a tube whose policy sets
/// them, `lease-limit`, `rate-limit` and `rate-limit-tokens` (after beanstalkd's keys, so
/// clients that read the dict by name or position keep working).
pub fn tube_yaml(engine: &Engine, q: QueueId, now: Millis) -> String {
    let t = engine.queue(q);
    let mut y = format!(
        "---\nname: {}\ncurrent-jobs-urgent: {}\ncurrent-jobs-ready: {}\n\
         current-jobs-reserved: {}\ncurrent-jobs-delayed: {}\ncurrent-jobs-buried: {}\n\
         total-jobs: {}\ncurrent-using: {}\ncurrent-watching: {}\ncurrent-waiting: {}\n\
         cmd-delete: {}\ncmd-pause-tube: {}\npause: {}\npause-time-left: {}\n",
        String::from_utf8_lossy(&t.name),
        t.urgent,
        t.ready_len(),
        t.reserved,
        t.delayed_len(),
        t.buried_len(),
        t.total_jobs,
        t.producers,
        t.consumers,
        t.waiting(),
        t.cmd_delete,
        t.cmd_pause,
        if t.is_paused(now) { t.pause_secs } else { 0 },
        engine.pause_left_secs(q, now),
    );
    policy_keys(&mut y, t, now);
    y
}

/// The keys of a tube's policy, each only when set: a tube nobody configured keeps
/// exactly beanstalkd's keys.
fn policy_keys(y: &mut String, t: &Queue, now: Millis) {
    if t.lease_limit > 0 {
        let _ = writeln!(y, "lease-limit: {}", t.lease_limit);
    }
    if let (Some(limit), Some(tokens)) = (t.rate_limit(), t.rate_tokens(now)) {
        let _ = writeln!(y, "rate-limit: {limit}\nrate-limit-tokens: {tokens}");
    }
}

/// The `stats-job` YAML (14 keys).
pub fn job_yaml(engine: &Engine, job: &Job, now: Millis) -> String {
    format!(
        "---\nid: {}\ntube: {}\nstate: {}\npri: {}\nage: {}\ndelay: {}\nttr: {}\n\
         time-left: {}\nfile: 0\nreserves: {}\ntimeouts: {}\nreleases: {}\nburies: {}\n\
         kicks: {}\n",
        job.id,
        String::from_utf8_lossy(&engine.queue(job.queue).name),
        job.state.as_str(),
        job.pri,
        now.saturating_sub(job.created) / 1000,
        job.delay,
        job.ttr,
        engine.time_left_secs(job, now),
        job.reserves,
        job.timeouts,
        job.releases,
        job.buries,
        job.kicks,
    )
}

/// A YAML list (`list-tubes`, `list-tubes-watched`).
pub fn list_yaml<'a>(names: impl Iterator<Item = &'a [u8]>) -> String {
    let mut y = String::from("---\n");
    for name in names {
        y.push_str("- ");
        y.push_str(&String::from_utf8_lossy(name));
        y.push('\n');
    }
    y
}

fn rusage() -> (String, String) {
    // SAFETY: getrusage writes into the zeroed struct we pass; no other memory is touched.
    let ru = unsafe {
        let mut ru: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut ru);
        ru
    };
    let tv = |t: libc::timeval| format!("{}.{:06}", t.tv_sec, t.tv_usec);
    (tv(ru.ru_utime), tv(ru.ru_stime))
}

fn uname() -> (String, String, String) {
    // SAFETY: uname fills the zeroed struct; its fields are NUL-terminated C strings.
    unsafe {
        let mut u: libc::utsname = std::mem::zeroed();
        if libc::uname(&mut u) != 0 {
            return Default::default();
        }
        let s = |f: &[libc::c_char]| {
            std::ffi::CStr::from_ptr(f.as_ptr())
                .to_string_lossy()
                .into_owned()
        };
        (s(&u.nodename), s(&u.version), s(&u.machine))
    }
}

/// 16 hex digits that differ from one start to the next.
fn random_id() -> String {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0),
    );
    h.write_u32(std::process::id());
    format!("{:016x}", h.finish())
}

#[cfg(test)]
mod tests {
    use super::*;
    use jobyard_engine::EngineCore;

    const T0: Millis = 1_700_000_000_000;

    fn keys(yaml: &str) -> Vec<&str> {
        yaml.lines()
            .skip(1)
            .map(|l| l.split(':').next().unwrap())
            .collect()
    }

    #[test]
    fn a_tube_shows_its_policy_after_beanstalkds_keys_and_only_when_set() {
        let mut e = EngineCore::new();
        let q = e.queue_id_or_create(b"t");
        e.pin(q);
        let plain = tube_yaml(&e, q, T0);
        assert_eq!(keys(&plain).len(), 14);
        e.set_lease_limit(q, 4, T0);
        e.set_rate_limit(q, Some("10/s".parse().unwrap()), T0);
        let limited = tube_yaml(&e, q, T0);
        assert!(limited.starts_with(&plain));
        assert_eq!(
            &keys(&limited)[14..],
            ["lease-limit", "rate-limit", "rate-limit-tokens"]
        );
        assert!(limited.ends_with("lease-limit: 4\nrate-limit: 10/s\nrate-limit-tokens: 10\n"));
    }
}
