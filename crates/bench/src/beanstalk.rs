//! beanstalkd workloads: put, drain (reserve → delete), e2e; and waiting for a restarted
//! server to have all its jobs ready.

use std::collections::VecDeque;
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::conn::Conn;
use crate::ready::JobCount;
use crate::run::{body_stamp, stamped_body, Meter, Report, Shared};
use crate::Opts;

/// Where a producer counts its acknowledged puts.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Tally {
    /// The put is the job: `hist` and `done`.
    Main,
    /// The put is half the job (e2e): `hist2` and `acked`.
    Ack,
    /// Not measured (prefill): `done` only.
    Quiet,
}

#[derive(Clone)]
pub struct ProducerCfg {
    pub tube: String,
    pub size: usize,
    pub pipeline: usize,
    /// Time between two puts of this producer (fixed-rate mode).
    pub interval: Option<Duration>,
    /// Write a timestamp into each body (e2e).
    pub stamped: bool,
    /// e2e: put nothing more while this many acknowledged puts are not yet consumed.
    pub max_backlog: u64,
    pub tally: Tally,
}

fn text(c: &Conn, span: crate::conn::Span) -> String {
    String::from_utf8_lossy(c.get(span)).into_owned()
}

/// Sends one command and checks that the reply starts with `expect`.
async fn command(c: &mut Conn, cmd: &str, expect: &str) -> io::Result<()> {
    c.out.extend_from_slice(cmd.as_bytes());
    c.flush().await?;
    let line = c.line().await?;
    if !c.get(line).starts_with(expect.as_bytes()) {
        return Err(io::Error::other(format!(
            "{}: expected {expect}, got {:?}",
            cmd.trim_end(),
            text(c, line)
        )));
    }
    Ok(())
}

/// Puts jobs until the count or time runs out, keeping up to `pipeline` puts in flight.
pub async fn producer(addr: SocketAddr, sh: Arc<Shared>, cfg: ProducerCfg) -> io::Result<()> {
    let mut c = Conn::connect(addr).await?;
    if cfg.tube != "default" {
        command(&mut c, &format!("use {}\r\n", cfg.tube), "USING").await?;
    }
    let header = format!("put 0 0 120 {}\r\n", cfg.size);
    let body = vec![b'x'; cfg.size];
    let mut sent: VecDeque<Instant> = VecDeque::with_capacity(cfg.pipeline);
    let mut next_at = Instant::now();
    let mut issuing = true;
    loop {
        let now = Instant::now();
        let refill = cfg.interval.is_some() || sent.len() <= cfg.pipeline / 2;
        let backlogged = cfg.tally == Tally::Ack
            && sh.acked.load(Ordering::Relaxed).saturating_sub(sh.done()) >= cfg.max_backlog;
        if issuing && refill && !backlogged {
            while sent.len() < cfg.pipeline {
                if let Some(iv) = cfg.interval {
                    if next_at > now {
                        break;
                    }
                    // Open loop: how far behind its schedule the producer runs shows up as lag.
                    let lag = now.duration_since(next_at).as_nanos() as u64;
                    sh.lag_max.fetch_max(lag, Ordering::Relaxed);
                    next_at += iv;
                }
                if !sh.claim() {
                    issuing = false;
                    break;
                }
                c.out.extend_from_slice(header.as_bytes());
                if cfg.stamped {
                    stamped_body(&mut c.out, sh.stamp(now), cfg.size);
                } else {
                    c.out.extend_from_slice(&body);
                }
                c.out.extend_from_slice(b"\r\n");
                sent.push_back(now);
            }
            c.flush().await?;
        }
        if sent.is_empty() {
            if !issuing {
                return Ok(());
            }
            if cfg.interval.is_some() && !backlogged {
                tokio::time::sleep_until(next_at.into()).await;
            } else if backlogged {
                tokio::time::sleep(Duration::from_micros(200)).await;
            }
            continue;
        }
        if cfg.interval.is_some() && issuing && sent.len() < cfg.pipeline {
            tokio::select! {
                r = c.fill() => r?,
                _ = tokio::time::sleep_until(next_at.into()) => continue,
            }
        } else {
            c.fill().await?;
        }
        let now = Instant::now();
        while let Some(line) = c.try_line() {
            let Some(at) = sent.pop_front() else {
                return Err(io::Error::other(format!(
                    "reply to nothing: {:?}",
                    text(&c, line)
                )));
            };
            if !c.get(line).starts_with(b"INSERTED ") {
                sh.error(format!("put: {:?}", text(&c, line)));
                continue;
            }
            let nanos = now.saturating_duration_since(at).as_nanos() as u64;
            match cfg.tally {
                Tally::Main => {
                    sh.hist.record(nanos);
                    sh.finish(now);
                }
                Tally::Ack => {
                    sh.hist2.record(nanos);
                    sh.acked.fetch_add(1, Ordering::Relaxed);
                }
                Tally::Quiet => sh.finish(now),
            }
        }
    }
}

/// Parses `RESERVED <id> <bytes>`.
fn reserved(line: &[u8]) -> Option<(u64, usize)> {
    let rest = std::str::from_utf8(line.strip_prefix(b"RESERVED ")?).ok()?;
    let mut it = rest.split(' ');
    Some((it.next()?.parse().ok()?, it.next()?.parse().ok()?))
}

/// Reserves and deletes jobs. `drain`: stop at the first empty reserve (the queue was
/// filled beforehand); otherwise wait (1 s at a time) until told to stop. Latency: the
/// reserve → delete round trip (drain), or the body's timestamp → reserved (e2e).
pub async fn consumer(
    addr: SocketAddr,
    sh: Arc<Shared>,
    tube: String,
    drain: bool,
) -> io::Result<()> {
    let mut c = Conn::connect(addr).await?;
    if tube != "default" {
        command(&mut c, &format!("watch {tube}\r\n"), "WATCHING").await?;
        command(&mut c, "ignore default\r\n", "WATCHING").await?;
    }
    let reserve: &[u8] = if drain {
        b"reserve-with-timeout 0\r\n"
    } else {
        b"reserve-with-timeout 1\r\n"
    };
    loop {
        if sh.stop.load(Ordering::Relaxed) || (drain && sh.stopped()) {
            return Ok(());
        }
        let t0 = Instant::now();
        c.out.extend_from_slice(reserve);
        c.flush().await?;
        let line = c.line().await?;
        let Some((id, bytes)) = reserved(c.get(line)) else {
            match c.get(line) {
                b"TIMED_OUT" if drain => return Ok(()),
                b"TIMED_OUT" | b"DEADLINE_SOON" => continue,
                _ => {
                    sh.error(format!("reserve: {:?}", text(&c, line)));
                    return Ok(());
                }
            }
        };
        let body = c.take(bytes + 2).await?;
        let got = Instant::now();
        let stamp = if drain { None } else { body_stamp(c.get(body)) };
        c.out
            .extend_from_slice(format!("delete {id}\r\n").as_bytes());
        c.flush().await?;
        let line = c.line().await?;
        let now = Instant::now();
        if c.get(line) != b"DELETED" {
            sh.error(format!("delete: {:?}", text(&c, line)));
            continue;
        }
        if drain {
            sh.hist.record(now.duration_since(t0).as_nanos() as u64);
        } else {
            match stamp {
                Some(s) => sh
                    .hist
                    .record(got.saturating_duration_since(sh.unstamp(s)).as_nanos() as u64),
                None => sh.error("e2e: a body without a timestamp".into()),
            }
        }
        sh.finish(now);
    }
}

/// Waits for the tasks, at most until `limit`; returns whether any had to be cut off.
pub async fn join_all(
    tasks: Vec<tokio::task::JoinHandle<io::Result<()>>>,
    sh: &Shared,
    limit: Instant,
) -> bool {
    let mut cut = false;
    for t in tasks {
        let abort = t.abort_handle();
        match tokio::time::timeout_at(limit.into(), t).await {
            Ok(Ok(Ok(()))) => {}
            Ok(Ok(Err(e))) => sh.conn_error(e.to_string()),
            Ok(Err(e)) => sh.conn_error(format!("task failed: {e}")),
            Err(_) => {
                abort.abort();
                cut = true;
            }
        }
    }
    cut
}

fn producers(
    addr: SocketAddr,
    sh: &Arc<Shared>,
    cfg: &ProducerCfg,
    n: usize,
) -> Vec<tokio::task::JoinHandle<io::Result<()>>> {
    (0..n)
        .map(|_| tokio::spawn(producer(addr, sh.clone(), cfg.clone())))
        .collect()
}

pub async fn run(opts: &Opts, workload: &'static str, addr: SocketAddr) -> Report {
    let grace = Duration::from_secs(opts.grace);
    let duration = Duration::from_secs_f64(opts.duration);
    let tube = opts.queue.clone();
    let mut extra = Vec::new();
    let mut latency2 = None;
    let mut params = vec![("size", opts.size as f64)];
    let (sh, costs, jobs, cost_jobs, window_s, timed_out) = match workload {
        "put" => {
            let pipeline = opts.pipeline.unwrap_or(32).max(1);
            params.push(("conns", opts.conns as f64));
            params.push(("pipeline", pipeline as f64));
            let sh = Arc::new(Shared::new(opts.count, duration));
            let cfg = ProducerCfg {
                tube,
                size: opts.size,
                pipeline,
                interval: None,
                stamped: false,
                max_backlog: u64::MAX,
                tally: Tally::Main,
            };
            let meter = Meter::start(opts.server_pid);
            let tasks = producers(addr, &sh, &cfg, opts.conns);
            let cut = join_all(tasks, &sh, sh.deadline + grace).await;
            let costs = meter.stop();
            let jobs = sh.done();
            let w = costs.elapsed_s;
            (sh, costs, jobs, jobs, w, cut)
        }
        "drain" => {
            params.push(("workers", opts.workers as f64));
            let filled = prefill(opts, addr, &tube).await;
            extra.push(("prefilled", filled as f64));
            let sh = Arc::new(Shared::new(u64::MAX, duration));
            let meter = Meter::start(opts.server_pid);
            let tasks = (0..opts.workers)
                .map(|_| tokio::spawn(consumer(addr, sh.clone(), tube.clone(), true)))
                .collect();
            let cut = join_all(tasks, &sh, sh.deadline + grace).await;
            let costs = meter.stop();
            let jobs = sh.done();
            let w = costs.elapsed_s;
            (sh, costs, jobs, jobs, w, cut)
        }
        "e2e" => {
            let pipeline = opts.pipeline.unwrap_or(1).max(1);
            params.push(("conns", opts.conns as f64));
            params.push(("workers", opts.workers as f64));
            params.push(("pipeline", pipeline as f64));
            params.push(("rate", opts.rate.unwrap_or(0.0)));
            if opts.size < 16 {
                eprintln!("jobyard-bench: e2e needs --size of at least 16 (the timestamp)");
                std::process::exit(2);
            }
            let interval = opts
                .rate
                .filter(|r| *r > 0.0)
                .map(|r| Duration::from_secs_f64(opts.conns as f64 / r));
            let sh = Arc::new(Shared::new(opts.count, duration));
            let consumers: Vec<_> = (0..opts.workers)
                .map(|_| tokio::spawn(consumer(addr, sh.clone(), tube.clone(), false)))
                .collect();
            let cfg = ProducerCfg {
                tube,
                size: opts.size,
                pipeline,
                interval,
                stamped: true,
                max_backlog: opts.max_backlog,
                tally: Tally::Ack,
            };
            let meter = Meter::start(opts.server_pid);
            let window_start = Instant::now();
            let tasks = producers(addr, &sh, &cfg, opts.conns);
            let mut cut = join_all(tasks, &sh, sh.deadline + grace).await;
            let window = sh.deadline.min(Instant::now()) - window_start;
            // Let the consumers finish what was put, within the grace time.
            let limit = Instant::now() + grace;
            while sh.done() < sh.acked.load(Ordering::Relaxed)
                && consumers.iter().any(|t| !t.is_finished())
            {
                if Instant::now() >= limit {
                    cut = true;
                    break;
                }
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            sh.stop.store(true, Ordering::Relaxed);
            let costs = meter.stop();
            for t in &consumers {
                t.abort();
            }
            for t in consumers {
                if let Ok(Err(e)) = t.await {
                    sh.conn_error(e.to_string());
                }
            }
            let acked = sh.acked.load(Ordering::Relaxed);
            extra.push(("puts_acked", acked as f64));
            extra.push(("max_backlog", opts.max_backlog as f64));
            if interval.is_some() {
                let lag = sh.lag_max.load(Ordering::Relaxed) as f64 / 1e6;
                extra.push(("rate_lag_max_ms", (lag * 10.0).round() / 10.0));
            }
            extra.push(("consumed_total", sh.done() as f64));
            latency2 = Some(("put", sh.hist2.summary()));
            let jobs = sh.done_in_window.load(Ordering::Relaxed);
            let all = sh.done();
            (sh, costs, jobs, all, window.as_secs_f64(), cut)
        }
        _ => unreachable!("workload {workload}"),
    };
    let first_error = sh.first_error.lock().unwrap().clone();
    Report {
        proto: "beanstalk",
        workload,
        addr: addr.to_string(),
        params,
        jobs,
        cost_jobs,
        window_s,
        errors: sh.errors.load(Ordering::Relaxed),
        conn_errors: sh.conn_errors.load(Ordering::Relaxed),
        first_error,
        latency: sh.hist.summary(),
        latency2,
        costs,
        server_pid: opts.server_pid,
        extra,
        tags: opts.tags(),
        timed_out,
    }
}

/// Fills `tube` with `--count` jobs (not measured); returns how many went in.
async fn prefill(opts: &Opts, addr: SocketAddr, tube: &str) -> u64 {
    let sh = Arc::new(Shared::new(
        opts.count,
        Duration::from_secs(opts.prefill_timeout),
    ));
    let cfg = ProducerCfg {
        tube: tube.to_string(),
        size: opts.size,
        pipeline: 32,
        interval: None,
        stamped: false,
        max_backlog: u64::MAX,
        tally: Tally::Quiet,
    };
    let tasks = producers(addr, &sh, &cfg, opts.conns.max(1));
    join_all(tasks, &sh, sh.deadline + Duration::from_secs(5)).await;
    let filled = sh.done();
    if filled < opts.count {
        eprintln!(
            "jobyard-bench: prefill put only {filled} of {} jobs within {} s",
            opts.count, opts.prefill_timeout
        );
    }
    filled
}

/// `current-jobs-ready` from a `stats` reply, or `None` if not there.
pub fn stats_value(yaml: &str, key: &str) -> Option<u64> {
    yaml.lines().find_map(|l| {
        let v = l.strip_prefix(key)?.strip_prefix(':')?;
        v.trim().parse().ok()
    })
}

/// Counts `current-jobs-ready` in `stats`: every job back after a restart.
pub struct ReadyJobs;

impl JobCount for ReadyJobs {
    const STATE: &'static str = "ready";

    async fn count(&self, c: &mut Conn) -> io::Result<u64> {
        c.out.extend_from_slice(b"stats\r\n");
        c.flush().await?;
        let line = c.line().await?;
        let n: usize = std::str::from_utf8(c.get(line))
            .ok()
            .and_then(|l| l.strip_prefix("OK "))
            .and_then(|n| n.parse().ok())
            .ok_or_else(|| io::Error::other(format!("stats: {:?}", text(c, line))))?;
        let body = c.take(n + 2).await?;
        let yaml = String::from_utf8_lossy(c.get(body)).into_owned();
        Ok(stats_value(&yaml, "current-jobs-ready").unwrap_or(0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replies_parse() {
        assert_eq!(reserved(b"RESERVED 17 100"), Some((17, 100)));
        assert_eq!(reserved(b"TIMED_OUT"), None);
        let yaml = "---\ncurrent-jobs-urgent: 0\ncurrent-jobs-ready: 1000000\n";
        assert_eq!(stats_value(yaml, "current-jobs-ready"), Some(1_000_000));
        assert_eq!(stats_value(yaml, "current-jobs-buried"), None);
    }
}
