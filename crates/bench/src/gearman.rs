//! Gearman workloads: background submits, drain by workers, foreground round trips; and
//! waiting for a restarted server to have all its jobs queued.

use std::collections::{HashMap, VecDeque};
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::beanstalk::join_all;
use crate::conn::Conn;
use crate::ready::JobCount;
use crate::run::{Meter, Report, Shared};
use crate::Opts;

pub const CAN_DO: u32 = 1;
pub const PRE_SLEEP: u32 = 4;
pub const NOOP: u32 = 6;
pub const SUBMIT_JOB: u32 = 7;
pub const JOB_CREATED: u32 = 8;
pub const GRAB_JOB: u32 = 9;
pub const NO_JOB: u32 = 10;
pub const JOB_ASSIGN: u32 = 11;
pub const WORK_STATUS: u32 = 12;
pub const WORK_COMPLETE: u32 = 13;
pub const WORK_FAIL: u32 = 14;
pub const SUBMIT_JOB_BG: u32 = 18;
pub const ERROR: u32 = 19;
pub const WORK_EXCEPTION: u32 = 25;
pub const WORK_DATA: u32 = 28;
pub const WORK_WARNING: u32 = 29;

fn lossy(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[derive(Clone)]
pub struct ClientCfg {
    pub function: String,
    pub size: usize,
    pub pipeline: usize,
    /// Give every job its own unique id (otherwise the unique id is empty).
    pub unique: bool,
    /// Foreground (SUBMIT_JOB, wait for WORK_COMPLETE) or background (SUBMIT_JOB_BG).
    pub foreground: bool,
    /// Measured (`hist`) or not (prefill).
    pub measured: bool,
}

/// Submits jobs until the count or time runs out, keeping up to `pipeline` in flight
/// (background: until JOB_CREATED; foreground: until WORK_COMPLETE).
pub async fn client(
    addr: SocketAddr,
    sh: Arc<Shared>,
    cfg: ClientCfg,
    id: usize,
) -> io::Result<()> {
    let mut c = Conn::connect(addr).await?;
    let body = vec![b'x'; cfg.size];
    let kind = if cfg.foreground {
        SUBMIT_JOB
    } else {
        SUBMIT_JOB_BG
    };
    let mut created: VecDeque<Instant> = VecDeque::with_capacity(cfg.pipeline);
    let mut running: HashMap<Vec<u8>, Instant> = HashMap::with_capacity(cfg.pipeline);
    let mut issuing = true;
    let mut seq = 0u64;
    loop {
        let inflight = created.len() + running.len();
        if issuing && inflight <= cfg.pipeline / 2 {
            let now = Instant::now();
            for _ in inflight..cfg.pipeline {
                if !sh.claim() {
                    issuing = false;
                    break;
                }
                seq += 1;
                let unique = if cfg.unique {
                    format!("{id}-{seq}")
                } else {
                    String::new()
                };
                c.gearman_request(kind, &[cfg.function.as_bytes(), unique.as_bytes(), &body]);
                created.push_back(now);
            }
            c.flush().await?;
        }
        if created.is_empty() && running.is_empty() {
            if !issuing {
                return Ok(());
            }
            continue;
        }
        c.fill().await?;
        let now = Instant::now();
        while let Some((kind, span)) = c.try_gearman_frame()? {
            let data = c.get(span);
            match kind {
                JOB_CREATED => {
                    let Some(at) = created.pop_front() else {
                        return Err(io::Error::other("JOB_CREATED for nothing submitted"));
                    };
                    if cfg.foreground {
                        running.insert(data.to_vec(), at);
                    } else {
                        if cfg.measured {
                            sh.hist
                                .record(now.saturating_duration_since(at).as_nanos() as u64);
                        }
                        sh.finish(now);
                    }
                }
                WORK_COMPLETE | WORK_FAIL | WORK_EXCEPTION => {
                    let handle = data.split(|&b| b == 0).next().unwrap_or(data);
                    let Some(at) = running.remove(handle) else {
                        return Err(io::Error::other(format!(
                            "result for an unknown handle {:?}",
                            lossy(handle)
                        )));
                    };
                    if kind == WORK_COMPLETE {
                        sh.hist
                            .record(now.saturating_duration_since(at).as_nanos() as u64);
                        sh.finish(now);
                    } else {
                        sh.error(format!("job {} failed ({kind})", lossy(handle)));
                    }
                }
                ERROR => {
                    created.pop_front();
                    sh.error(format!("submit: ERROR {:?}", lossy(data)));
                }
                WORK_DATA | WORK_WARNING | WORK_STATUS => {}
                other => sh.error(format!("client: unexpected packet {other}")),
            }
        }
    }
}

/// A worker: CAN_DO, then GRAB_JOB → JOB_ASSIGN → WORK_COMPLETE (echoing the data).
/// `drain`: finish at the first NO_JOB (the queue was filled beforehand; latency is
/// GRAB_JOB → JOB_ASSIGN); otherwise PRE_SLEEP until NOOP, until told to stop.
pub async fn worker(
    addr: SocketAddr,
    sh: Arc<Shared>,
    function: String,
    drain: bool,
    ready: Arc<AtomicUsize>,
) -> io::Result<()> {
    let mut c = Conn::connect(addr).await?;
    c.gearman_request(CAN_DO, &[function.as_bytes()]);
    c.gearman_request(GRAB_JOB, &[]);
    c.flush().await?;
    ready.fetch_add(1, Ordering::Relaxed);
    let mut grabbed_at = Instant::now();
    let mut reply = Vec::new();
    loop {
        if sh.stop.load(Ordering::Relaxed) || (drain && sh.stopped()) {
            return Ok(());
        }
        let (kind, span) = c.gearman_frame().await?;
        match kind {
            JOB_ASSIGN => {
                let now = Instant::now();
                let data = c.get(span);
                let mut parts = data.splitn(3, |&b| b == 0);
                let handle = parts.next().unwrap_or_default();
                let _function = parts.next();
                let payload = parts.next().unwrap_or_default();
                reply.clear();
                reply.extend_from_slice(handle);
                reply.push(0);
                reply.extend_from_slice(payload);
                if drain {
                    sh.hist
                        .record(now.duration_since(grabbed_at).as_nanos() as u64);
                    sh.finish(now);
                }
                let size = reply.len() as u32;
                c.out.extend_from_slice(b"\0REQ");
                c.out.extend_from_slice(&WORK_COMPLETE.to_be_bytes());
                c.out.extend_from_slice(&size.to_be_bytes());
                c.out.extend_from_slice(&reply);
                c.gearman_request(GRAB_JOB, &[]);
                c.flush().await?;
                grabbed_at = Instant::now();
            }
            NO_JOB if drain => return Ok(()),
            NO_JOB => {
                c.gearman_request(PRE_SLEEP, &[]);
                c.flush().await?;
            }
            NOOP => {
                c.gearman_request(GRAB_JOB, &[]);
                c.flush().await?;
                grabbed_at = Instant::now();
            }
            ERROR => {
                let msg = lossy(c.get(span));
                sh.error(format!("worker: ERROR {msg:?}"));
                return Ok(());
            }
            other => sh.error(format!("worker: unexpected packet {other}")),
        }
    }
}

fn clients(
    addr: SocketAddr,
    sh: &Arc<Shared>,
    cfg: &ClientCfg,
    n: usize,
) -> Vec<tokio::task::JoinHandle<io::Result<()>>> {
    (0..n)
        .map(|i| tokio::spawn(client(addr, sh.clone(), cfg.clone(), i)))
        .collect()
}

pub async fn run(opts: &Opts, workload: &'static str, addr: SocketAddr) -> Report {
    let grace = Duration::from_secs(opts.grace);
    let duration = Duration::from_secs_f64(opts.duration);
    let function = opts.queue.clone();
    let mut extra = Vec::new();
    let mut params = vec![("size", opts.size as f64)];
    let cfg = |pipeline: usize, foreground: bool, measured: bool| ClientCfg {
        function: function.clone(),
        size: opts.size,
        pipeline,
        unique: opts.unique,
        foreground,
        measured,
    };
    let (sh, costs, timed_out) = match workload {
        "submit-bg" => {
            let pipeline = opts.pipeline.unwrap_or(32).max(1);
            params.push(("conns", opts.conns as f64));
            params.push(("pipeline", pipeline as f64));
            let sh = Arc::new(Shared::new(opts.count, duration));
            let meter = Meter::start(opts.server_pid);
            let tasks = clients(addr, &sh, &cfg(pipeline, false, true), opts.conns);
            let cut = join_all(tasks, &sh, sh.deadline + grace).await;
            (sh, meter.stop(), cut)
        }
        "drain" => {
            params.push(("workers", opts.workers as f64));
            let pre = Arc::new(Shared::new(
                opts.count,
                Duration::from_secs(opts.prefill_timeout),
            ));
            let tasks = clients(addr, &pre, &cfg(32, false, false), opts.conns.max(1));
            join_all(tasks, &pre, pre.deadline + Duration::from_secs(5)).await;
            let filled = pre.done();
            if filled < opts.count {
                eprintln!(
                    "jobyard-bench: prefill submitted only {filled} of {} jobs within {} s",
                    opts.count, opts.prefill_timeout
                );
            }
            extra.push(("prefilled", filled as f64));
            let sh = Arc::new(Shared::new(u64::MAX, duration));
            let ready = Arc::new(AtomicUsize::new(0));
            let meter = Meter::start(opts.server_pid);
            let tasks = (0..opts.workers)
                .map(|_| {
                    tokio::spawn(worker(
                        addr,
                        sh.clone(),
                        function.clone(),
                        true,
                        ready.clone(),
                    ))
                })
                .collect();
            let cut = join_all(tasks, &sh, sh.deadline + grace).await;
            (sh, meter.stop(), cut)
        }
        "roundtrip" => {
            let pipeline = opts.pipeline.unwrap_or(1).max(1);
            params.push(("conns", opts.conns as f64));
            params.push(("workers", opts.workers as f64));
            params.push(("pipeline", pipeline as f64));
            // Workers have their own counters (errors, stop); the clients' time starts once
            // the workers registered.
            let wsh = Arc::new(Shared::new(0, duration + grace * 2));
            let ready = Arc::new(AtomicUsize::new(0));
            let workers: Vec<_> = (0..opts.workers)
                .map(|_| {
                    tokio::spawn(worker(
                        addr,
                        wsh.clone(),
                        function.clone(),
                        false,
                        ready.clone(),
                    ))
                })
                .collect();
            let wait = Instant::now() + Duration::from_secs(5);
            while ready.load(Ordering::Relaxed) < opts.workers && Instant::now() < wait {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            let sh = Arc::new(Shared::new(opts.count, duration));
            let meter = Meter::start(opts.server_pid);
            let tasks = clients(addr, &sh, &cfg(pipeline, true, true), opts.conns);
            let cut = join_all(tasks, &sh, sh.deadline + grace).await;
            let costs = meter.stop();
            wsh.stop.store(true, Ordering::Relaxed);
            for w in &workers {
                w.abort();
            }
            for w in workers {
                if let Ok(Err(e)) = w.await {
                    wsh.conn_error(e.to_string());
                }
            }
            sh.errors
                .fetch_add(wsh.errors.load(Ordering::Relaxed), Ordering::Relaxed);
            sh.conn_errors
                .fetch_add(wsh.conn_errors.load(Ordering::Relaxed), Ordering::Relaxed);
            if let Some(e) = wsh.first_error.lock().unwrap().take() {
                sh.first_error.lock().unwrap().get_or_insert(e);
            }
            (sh, costs, cut)
        }
        _ => unreachable!("workload {workload}"),
    };
    let first_error = sh.first_error.lock().unwrap().clone();
    let jobs = sh.done();
    Report {
        proto: "gearman",
        workload,
        addr: addr.to_string(),
        params,
        jobs,
        cost_jobs: jobs,
        window_s: costs.elapsed_s,
        errors: sh.errors.load(Ordering::Relaxed),
        conn_errors: sh.conn_errors.load(Ordering::Relaxed),
        first_error,
        latency: sh.hist.summary(),
        latency2: None,
        costs,
        server_pid: opts.server_pid,
        extra,
        tags: opts.tags(),
        timed_out,
    }
}

/// The queued total of `function` from an admin `status` reply (`name\ttotal\trunning\tworkers`).
pub fn status_total(reply: &str, function: &str) -> Option<u64> {
    reply.lines().find_map(|l| {
        let mut cols = l.split('\t');
        (cols.next()? == function).then(|| cols.next()?.trim().parse().ok())?
    })
}

/// Counts one function's total in the admin `status` command: its jobs back after a restart.
pub struct FunctionTotal<'a>(pub &'a str);

impl JobCount for FunctionTotal<'_> {
    const STATE: &'static str = "queued";

    async fn count(&self, c: &mut Conn) -> io::Result<u64> {
        c.out.extend_from_slice(b"status\n");
        c.flush().await?;
        let mut reply = String::new();
        loop {
            let line = c.line().await?;
            let l = lossy(c.get(line));
            if l == "." {
                break;
            }
            reply.push_str(&l);
            reply.push('\n');
        }
        Ok(status_total(&reply, self.0).unwrap_or(0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_lines_parse() {
        let reply = "other\t5\t0\t1\nbench\t1000000\t0\t0\n";
        assert_eq!(status_total(reply, "bench"), Some(1_000_000));
        assert_eq!(status_total(reply, "missing"), None);
    }
}
