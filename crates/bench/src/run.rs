//! What every workload shares: the limits of a run, its counters, and its report.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::hist::{Histogram, Summary};
use crate::procfs::{self, Sample};

/// Counters and limits shared by the tasks of one phase of a run.
pub struct Shared {
    /// Jobs handed out to senders (may pass `limit` by the number of senders; those are not sent).
    issued: AtomicU64,
    pub limit: u64,
    pub deadline: Instant,
    /// Jobs the server confirmed (INSERTED, JOB_CREATED, DELETED, WORK_COMPLETE, ...).
    pub done: AtomicU64,
    /// Puts acknowledged, where the put is only half the job (e2e).
    pub acked: AtomicU64,
    /// Fixed-rate mode: the furthest a sender fell behind its schedule, in ns.
    pub lag_max: AtomicU64,
    /// Jobs done before `deadline` (the e2e window).
    pub done_in_window: AtomicU64,
    /// Protocol-level failures (an unexpected reply).
    pub errors: AtomicU64,
    /// Connections that failed (I/O error, closed by the server).
    pub conn_errors: AtomicU64,
    pub stop: AtomicBool,
    /// The main latency of the workload.
    pub hist: Histogram,
    /// A second latency (e2e: put acknowledgement) where the workload has one.
    pub hist2: Histogram,
    /// Time zero of timestamps written into job bodies.
    pub base: Instant,
    pub first_error: std::sync::Mutex<Option<String>>,
}

impl Shared {
    pub fn new(limit: u64, duration: Duration) -> Shared {
        let now = Instant::now();
        Shared {
            issued: AtomicU64::new(0),
            limit,
            deadline: now + duration,
            done: AtomicU64::new(0),
            done_in_window: AtomicU64::new(0),
            acked: AtomicU64::new(0),
            lag_max: AtomicU64::new(0),
            errors: AtomicU64::new(0),
            conn_errors: AtomicU64::new(0),
            stop: AtomicBool::new(false),
            hist: Histogram::new(),
            hist2: Histogram::new(),
            base: now,
            first_error: std::sync::Mutex::new(None),
        }
    }

    /// Takes one job to send, unless the count or the time is used up.
    pub fn claim(&self) -> bool {
        !self.stop.load(Ordering::Relaxed)
            && Instant::now() < self.deadline
            && self.issued.fetch_add(1, Ordering::Relaxed) < self.limit
    }

    pub fn stopped(&self) -> bool {
        self.stop.load(Ordering::Relaxed) || Instant::now() >= self.deadline
    }

    pub fn done(&self) -> u64 {
        self.done.load(Ordering::Relaxed)
    }

    /// Counts one finished job.
    pub fn finish(&self, now: Instant) {
        self.done.fetch_add(1, Ordering::Relaxed);
        if now < self.deadline {
            self.done_in_window.fetch_add(1, Ordering::Relaxed);
        }
    }

    pub fn error(&self, what: String) {
        self.errors.fetch_add(1, Ordering::Relaxed);
        self.note(what);
    }

    pub fn conn_error(&self, what: String) {
        self.conn_errors.fetch_add(1, Ordering::Relaxed);
        self.note(what);
    }

    fn note(&self, what: String) {
        let mut first = self.first_error.lock().unwrap();
        if first.is_none() {
            *first = Some(what);
        }
    }

    /// Nanoseconds since `base`, for job bodies.
    pub fn stamp(&self, at: Instant) -> u64 {
        at.saturating_duration_since(self.base).as_nanos() as u64
    }

    /// The instant a body stamp stands for.
    pub fn unstamp(&self, nanos: u64) -> Instant {
        self.base + Duration::from_nanos(nanos)
    }
}

/// Writes a job body of `size` bytes: 16 hex digits of `stamp`, then `x` padding.
pub fn stamped_body(out: &mut Vec<u8>, stamp: u64, size: usize) {
    let hex = format!("{stamp:016x}");
    let n = size.min(16);
    out.extend_from_slice(&hex.as_bytes()[16 - n..]);
    out.resize(out.len() + size - n, b'x');
}

/// The stamp at the start of a body written by [`stamped_body`].
pub fn body_stamp(body: &[u8]) -> Option<u64> {
    let hex = std::str::from_utf8(body.get(..16)?).ok()?;
    u64::from_str_radix(hex, 16).ok()
}

/// Server and client CPU/RSS at the start of a measured phase.
pub struct Meter {
    pid: Option<u32>,
    start: Instant,
    server: Option<Sample>,
    client: Option<Sample>,
}

/// What a measured phase cost.
#[derive(Default)]
pub struct Costs {
    pub elapsed_s: f64,
    pub server_before: Option<Sample>,
    pub server_after: Option<Sample>,
    pub client_cpu_s: Option<f64>,
}

impl Meter {
    pub fn start(pid: Option<u32>) -> Meter {
        Meter {
            pid,
            server: pid.and_then(procfs::sample),
            client: procfs::sample_self(),
            start: Instant::now(),
        }
    }

    pub fn stop(&self) -> Costs {
        let elapsed_s = self.start.elapsed().as_secs_f64();
        let client = procfs::sample_self();
        Costs {
            elapsed_s,
            server_before: self.server,
            server_after: self.pid.and_then(procfs::sample),
            client_cpu_s: match (self.client, client) {
                (Some(a), Some(b)) => Some(b.cpu_s - a.cpu_s),
                _ => None,
            },
        }
    }
}

/// One run's result: printed for people, then as one JSON line.
pub struct Report {
    pub proto: &'static str,
    pub workload: &'static str,
    pub addr: String,
    /// Parameters of the run (numbers), in print order.
    pub params: Vec<(&'static str, f64)>,
    pub jobs: u64,
    /// The jobs the server's CPU time is divided by (e2e: all completed, not only in the window).
    pub cost_jobs: u64,
    /// The time the throughput is computed over (the run, or the e2e window).
    pub window_s: f64,
    pub errors: u64,
    pub conn_errors: u64,
    pub first_error: Option<String>,
    pub latency: Summary,
    /// Name and figures of a second latency, if any.
    pub latency2: Option<(&'static str, Summary)>,
    pub costs: Costs,
    pub server_pid: Option<u32>,
    /// Extra figures (name, value).
    pub extra: Vec<(&'static str, f64)>,
    pub tags: Vec<(String, String)>,
    pub timed_out: bool,
}

fn us(nanos: u64) -> f64 {
    (nanos as f64 / 1000.0 * 10.0).round() / 10.0
}

/// A JSON string literal.
pub fn json_str(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// A JSON number (non-finite values become null).
pub fn json_num(v: f64) -> String {
    if !v.is_finite() {
        "null".into()
    } else if v.fract() == 0.0 && v.abs() < 1e15 {
        format!("{}", v as i64)
    } else {
        format!("{:.3}", v)
    }
}

impl Report {
    pub fn jobs_per_s(&self) -> f64 {
        if self.window_s > 0.0 {
            self.jobs as f64 / self.window_s
        } else {
            0.0
        }
    }

    fn server_cpu_s(&self) -> Option<f64> {
        match (self.costs.server_before, self.costs.server_after) {
            (Some(a), Some(b)) => Some(b.cpu_s - a.cpu_s),
            _ => None,
        }
    }

    /// Named figures in JSON order.
    fn fields(&self) -> Vec<(String, String)> {
        let mut f: Vec<(String, String)> = Vec::new();
        let mut s = |k: &str, v: String| f.push((k.to_string(), v));
        s("proto", json_str(self.proto));
        s("workload", json_str(self.workload));
        s("addr", json_str(&self.addr));
        for (k, v) in &self.params {
            s(k, json_num(*v));
        }
        s("jobs", self.jobs.to_string());
        s("cost_jobs", self.cost_jobs.to_string());
        s("errors", self.errors.to_string());
        s("conn_errors", self.conn_errors.to_string());
        s("timed_out", self.timed_out.to_string());
        s("elapsed_s", json_num(self.costs.elapsed_s));
        s("window_s", json_num(self.window_s));
        s("jobs_per_s", json_num(self.jobs_per_s().round()));
        s("lat_count", self.latency.count.to_string());
        s("lat_p50_us", json_num(us(self.latency.p50)));
        s("lat_p99_us", json_num(us(self.latency.p99)));
        s("lat_p999_us", json_num(us(self.latency.p999)));
        s("lat_max_us", json_num(us(self.latency.max)));
        if let Some((name, l)) = &self.latency2 {
            s(&format!("{name}_p50_us"), json_num(us(l.p50)));
            s(&format!("{name}_p99_us"), json_num(us(l.p99)));
            s(&format!("{name}_max_us"), json_num(us(l.max)));
        }
        let null = || "null".to_string();
        s(
            "server_pid",
            self.server_pid.map(|p| p.to_string()).unwrap_or_else(null),
        );
        let cpu = self.server_cpu_s();
        s("server_cpu_s", cpu.map(json_num).unwrap_or_else(null));
        let per_job = |cpu: Option<f64>| match cpu {
            Some(c) if self.cost_jobs > 0 => {
                json_num((c * 1e6 / self.cost_jobs as f64 * 100.0).round() / 100.0)
            }
            _ => null(),
        };
        s("server_cpu_us_per_job", per_job(cpu));
        let before = self.costs.server_before;
        let after = self.costs.server_after;
        s(
            "server_rss_before_kb",
            before.map(|x| x.rss_kb.to_string()).unwrap_or_else(null),
        );
        s(
            "server_rss_kb",
            after.map(|x| x.rss_kb.to_string()).unwrap_or_else(null),
        );
        s(
            "server_hwm_kb",
            after.map(|x| x.hwm_kb.to_string()).unwrap_or_else(null),
        );
        s(
            "client_cpu_s",
            self.costs.client_cpu_s.map(json_num).unwrap_or_else(null),
        );
        s("client_cpu_us_per_job", per_job(self.costs.client_cpu_s));
        for (k, v) in &self.extra {
            s(k, json_num(*v));
        }
        for (k, v) in &self.tags {
            s(k, json_str(v));
        }
        if let Some(e) = &self.first_error {
            s("first_error", json_str(e));
        }
        f
    }

    pub fn json(&self) -> String {
        let body: Vec<String> = self
            .fields()
            .into_iter()
            .map(|(k, v)| format!("{}:{}", json_str(&k), v))
            .collect();
        format!("{{{}}}", body.join(","))
    }

    pub fn human(&self) -> String {
        let mut o = String::new();
        let params: Vec<String> = self
            .params
            .iter()
            .map(|(k, v)| format!("{k}={}", json_num(*v)))
            .collect();
        let _ = writeln!(
            o,
            "{} {} @ {} ({})",
            self.proto,
            self.workload,
            self.addr,
            params.join(" ")
        );
        let _ = writeln!(
            o,
            "  jobs {} in {:.2} s: {:.0} jobs/s; errors {}, connection errors {}{}",
            self.jobs,
            self.window_s,
            self.jobs_per_s(),
            self.errors,
            self.conn_errors,
            if self.timed_out { " (TIMED OUT)" } else { "" }
        );
        let l = &self.latency;
        let _ = writeln!(
            o,
            "  latency µs: p50 {} p99 {} p99.9 {} max {} ({} samples)",
            us(l.p50),
            us(l.p99),
            us(l.p999),
            us(l.max),
            l.count
        );
        if let Some((name, l)) = &self.latency2 {
            let _ = writeln!(
                o,
                "  {name} µs: p50 {} p99 {} max {}",
                us(l.p50),
                us(l.p99),
                us(l.max)
            );
        }
        if let Some(cpu) = self.server_cpu_s() {
            let after = self.costs.server_after.unwrap_or_default();
            let _ = writeln!(
                o,
                "  server pid {}: CPU {:.3} s ({:.2} µs/job), RSS {} KiB (peak {} KiB)",
                self.server_pid.unwrap_or(0),
                cpu,
                cpu * 1e6 / self.cost_jobs.max(1) as f64,
                after.rss_kb,
                after.hwm_kb
            );
        }
        if let Some(c) = self.costs.client_cpu_s {
            let _ = writeln!(
                o,
                "  client CPU {:.3} s ({:.2} µs/job, {:.0}% of one core)",
                c,
                c * 1e6 / self.cost_jobs.max(1) as f64,
                100.0 * c / self.costs.elapsed_s.max(1e-9)
            );
        }
        if let Some(e) = &self.first_error {
            let _ = writeln!(o, "  first error: {e}");
        }
        o
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bodies_carry_their_stamp() {
        let mut b = Vec::new();
        stamped_body(&mut b, 0x1234_5678_9abc, 100);
        assert_eq!(b.len(), 100);
        assert_eq!(body_stamp(&b), Some(0x1234_5678_9abc));
        let mut small = Vec::new();
        stamped_body(&mut small, 7, 4);
        assert_eq!(small, b"0007");
    }

    #[test]
    fn json_escapes_and_numbers() {
        assert_eq!(json_str("a\"b\\c\n"), r#""a\"b\\c\n""#);
        assert_eq!(json_num(3.0), "3");
        assert_eq!(json_num(0.5), "0.500");
        assert_eq!(json_num(f64::NAN), "null");
    }
}
