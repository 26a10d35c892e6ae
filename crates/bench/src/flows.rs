//! The flow workload of issue 12 through the Rust client: a 3-stage linear flow and a
//! 3-stage flow whose middle stage fans out to 3 children, N workers per stage, trivial
//! handlers. Saturated (flows done per second with `inflight` open at once) and at a fixed
//! creation rate (create→done p50/p99), with the server's CPU per flow.
//!
//! "Done" is when the last stage's handler returns: the complete that follows (one local
//! round trip) is not in the latency.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use clap::Args;
use jobyard_client::{Client, FlowJobOptions, StageJob, Workers};
use serde_json::{json, Value};
use tokio::sync::oneshot;

use crate::flow_hops::{self, Stamps};
use crate::hist::Histogram;
use crate::procfs;

/// Options of `jobyard-bench flows`.
#[derive(Args, Clone)]
pub struct FlowArgs {
    /// Base URL of the server's HTTP listener.
    #[arg(long, default_value = "http://127.0.0.1:8080")]
    pub url: String,
    /// The server's pid, for its CPU time.
    #[arg(long)]
    pub pid: Option<u32>,
    /// Seconds per measurement.
    #[arg(long, default_value_t = 5.0)]
    pub seconds: f64,
    /// Creations per second in the fixed-rate measurement.
    #[arg(long, default_value_t = 10.0)]
    pub rate: f64,
    /// Seconds of the fixed-rate measurement (its p99 needs a few hundred flows); the
    /// `--seconds` value when absent.
    #[arg(long)]
    pub fixed_seconds: Option<f64>,
    /// Flows open at once in the saturated measurement.
    #[arg(long, default_value_t = 64)]
    pub inflight: usize,
    /// Workers per stage (and per child stage).
    #[arg(long, default_value_t = 4)]
    pub workers: usize,
    /// Only the fixed-rate measurements (for A/B runs of the latency).
    #[arg(long)]
    pub only_fixed: bool,
}

/// Per flow id: the creator waiting for its end, or the end seen before the creator
/// registered (the stages can run before the create's reply is read).
enum Waiter {
    Waiting(oneshot::Sender<Instant>),
    Ended(Instant),
}

type Waiters = Arc<Mutex<HashMap<String, Waiter>>>;

/// Stage names and the flow definition of a shape.
fn definition(shape: &str, name: &str) -> Value {
    let (a, b, c) = (
        format!("{name}-a"),
        format!("{name}-b"),
        format!("{name}-c"),
    );
    match shape {
        "linear" => json!({"name": name, "stages": [
            {"name": a, "next": b}, {"name": b, "next": c}, {"name": c}]}),
        _ => json!({"name": name, "stages": [
            {"name": a, "next": b}, {"name": b, "next": c, "children": [{"name": "child"}]},
            {"name": c}]}),
    }
}

/// Starts the workers of every stage of a shape; the last stage reports to `waiters`, and
/// every stage stamps when it first sees each flow.
fn start_workers(
    client: &Client,
    shape: &str,
    name: &str,
    n: usize,
    waiters: Waiters,
    stamps: Arc<Stamps>,
) -> Vec<Workers> {
    let (a, b, c) = (
        format!("{name}-a"),
        format!("{name}-b"),
        format!("{name}-c"),
    );
    let fan_key = format!("children:{b}:params");
    let mut pools = Vec::new();
    let pool = |stage: &str| {
        client
            .stage_worker(stage)
            .concurrency(n)
            .poll_wait(Duration::from_secs(1))
    };
    let seen = |stage: usize| {
        let stamps = stamps.clone();
        move |id: &str| stamps.stage(id, stage)
    };
    let (seen_a, seen_b, seen_c) = (seen(0), seen(1), seen(2));
    if shape == "linear" {
        pools.push(pool(&a).start(move |j: StageJob| {
            seen_a(&j.id);
            async { Ok::<_, String>(json!({"a": 1})) }
        }));
        pools.push(pool(&b).start(move |j: StageJob| {
            seen_b(&j.id);
            async { Ok::<_, String>(json!({"b": 1})) }
        }));
    } else {
        pools.push(pool(&a).start(move |j: StageJob| {
            seen_a(&j.id);
            let key = fan_key.clone();
            async move {
                let child = json!({"childName": "child"});
                Ok::<_, String>(json!({ key: [child, child, child] }))
            }
        }));
        // A child's id is its own, not its flow's: the middle stage is not stamped.
        drop(seen_b);
        pools.push(
            pool(&format!("{b}:child"))
                .start(|_j: StageJob| async { Ok::<_, String>(json!({"done": true})) }),
        );
    }
    pools.push(pool(&c).start(move |j: StageJob| {
        seen_c(&j.id);
        let waiters = waiters.clone();
        async move {
            let now = Instant::now();
            let mut w = waiters.lock().unwrap();
            match w.remove(&j.id) {
                Some(Waiter::Waiting(tx)) => drop(tx.send(now)),
                _ => drop(w.insert(j.id, Waiter::Ended(now))),
            }
            Ok::<_, String>(json!({"c": 1}))
        }
    }));
    pools
}

/// The server's `/metrics` text, read over a connection of its own; `None` if it cannot
/// be read.
async fn metrics_text(url: &str) -> Option<String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let addr = url.strip_prefix("http://")?.trim_end_matches('/');
    let mut stream = tokio::net::TcpStream::connect(addr).await.ok()?;
    let request = format!("GET /metrics HTTP/1.0\r\nHost: {addr}\r\n\r\n");
    stream.write_all(request.as_bytes()).await.ok()?;
    let mut text = String::new();
    stream.read_to_string(&mut text).await.ok()?;
    Some(text)
}

/// HTTP requests the server has counted so far (the sum of its `http` command counters).
fn requests_served(text: &str) -> f64 {
    text.lines()
        .filter(|l| l.starts_with("jobyard_commands_total{") && l.contains("protocol=\"http\""))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// Creates one flow and waits for its end; returns create→done.
async fn one_flow(
    client: &Client,
    name: &str,
    waiters: &Waiters,
    stamps: &Stamps,
) -> Option<Duration> {
    let (tx, rx) = oneshot::channel();
    let start = Instant::now();
    let id = client
        .create_flow_job(name, json!({}), &FlowJobOptions::default())
        .await
        .ok()?;
    stamps.created(&id, start, Instant::now());
    {
        let mut w = waiters.lock().unwrap();
        if let Some(Waiter::Ended(at)) = w.remove(&id) {
            return Some(at - start);
        }
        w.insert(id, Waiter::Waiting(tx));
    }
    let done = tokio::time::timeout(Duration::from_secs(60), rx)
        .await
        .ok()?
        .ok()?;
    Some(done - start)
}

async fn measure(args: &FlowArgs, shape: &str, mode: &str) -> Value {
    let client = Client::new(&args.url).unwrap_or_else(|e| panic!("{e}"));
    let name = format!("rbench-{shape}-{mode}-{}", std::process::id());
    client
        .declare_flow(&definition(shape, &name))
        .await
        .unwrap_or_else(|e| panic!("declare: {e}"));
    let waiters: Waiters = Arc::default();
    let stamps: Arc<Stamps> = Arc::default();
    let pools = start_workers(
        &client,
        shape,
        &name,
        args.workers,
        waiters.clone(),
        stamps.clone(),
    );
    let hist = Arc::new(Histogram::new());
    let metrics0 = metrics_text(&args.url).await;
    let cpu0 = args.pid.and_then(procfs::sample);
    let t0 = Instant::now();
    let deadline = t0 + Duration::from_secs_f64(args.seconds);
    let mut tasks = Vec::new();
    if mode == "saturated" {
        for _ in 0..args.inflight {
            let (client, name, waiters, hist, stamps) = (
                client.clone(),
                name.clone(),
                waiters.clone(),
                hist.clone(),
                stamps.clone(),
            );
            tasks.push(tokio::spawn(async move {
                while Instant::now() < deadline {
                    if let Some(d) = one_flow(&client, &name, &waiters, &stamps).await {
                        hist.record(d.as_nanos() as u64);
                    }
                }
            }));
        }
    } else {
        let seconds = args.fixed_seconds.unwrap_or(args.seconds);
        let total = (args.rate * seconds).round().max(1.0) as u64;
        for i in 0..total {
            let due = t0 + Duration::from_secs_f64(i as f64 / args.rate);
            tokio::time::sleep_until(due.into()).await;
            let (client, name, waiters, hist, stamps) = (
                client.clone(),
                name.clone(),
                waiters.clone(),
                hist.clone(),
                stamps.clone(),
            );
            tasks.push(tokio::spawn(async move {
                if let Some(d) = one_flow(&client, &name, &waiters, &stamps).await {
                    hist.record(d.as_nanos() as u64);
                }
            }));
        }
    }
    for t in tasks {
        let _ = t.await;
    }
    let elapsed = t0.elapsed().as_secs_f64();
    let cpu1 = args.pid.and_then(procfs::sample);
    let metrics1 = metrics_text(&args.url).await;
    for p in pools {
        p.stop().await;
    }
    let s = hist.summary();
    let ms = |ns: u64| (ns as f64 / 1e6 * 100.0).round() / 100.0;
    let cpu_ms = match (cpu0, cpu1) {
        (Some(a), Some(b)) if s.count > 0 => {
            Some(((b.cpu_s - a.cpu_s) * 1000.0 / s.count as f64 * 1000.0).round() / 1000.0)
        }
        _ => None,
    };
    // The metrics read in between is one of the requests counted.
    let requests_per_flow = match (&metrics0, &metrics1) {
        (Some(a), Some(b)) if s.count > 0 => {
            let served = requests_served(b) - requests_served(a) - 1.0;
            Some((served / s.count as f64 * 100.0).round() / 100.0)
        }
        _ => None,
    };
    let (metrics0, metrics1) = (metrics0.unwrap_or_default(), metrics1.unwrap_or_default());
    let fsync = fsync_figures(&metrics0, &metrics1, s.count);
    json!({
        "shape": shape, "mode": mode, "client": "rust", "workers_per_stage": args.workers,
        "flows": s.count, "seconds": (elapsed * 100.0).round() / 100.0,
        "flows_per_s": ((s.count as f64 / elapsed) * 10.0).round() / 10.0,
        "p50_ms": ms(s.p50), "p99_ms": ms(s.p99), "server_cpu_ms_per_flow": cpu_ms,
        "requests_per_flow": requests_per_flow,
        "rss_kb": cpu1.map(|c| c.rss_kb),
        "fsyncs_per_flow": fsync.0, "fsync_mean_ms": fsync.1,
        "fsync_share_at_most_ms": flow_hops::fsync_shares(&metrics0, &metrics1),
        "hops_p50_ms": stamps.medians(),
    })
}

/// Fsyncs per flow and their mean length in ms, between two `/metrics` reads (`None`
/// where the server's histogram is missing, e.g. before its first scrape).
fn fsync_figures(before: &str, after: &str, flows: u64) -> (Option<f64>, Option<f64>) {
    let (Some((n0, s0)), Some((n1, s1))) = (flow_hops::fsyncs(before), flow_hops::fsyncs(after))
    else {
        return (None, None);
    };
    let n = n1 - n0;
    let per_flow = (flows > 0).then(|| (n / flows as f64 * 100.0).round() / 100.0);
    let mean = (n > 0.0).then(|| ((s1 - s0) / n * 1e6).round() / 1000.0);
    (per_flow, mean)
}

/// Runs every shape and mode; prints one JSON line each.
pub async fn run(args: FlowArgs) {
    // The server starts recording its fsync histogram at its first scrape: this one, so
    // that every measurement's fsyncs are counted.
    let _ = metrics_text(&args.url).await;
    let modes: &[&str] = if args.only_fixed {
        &["fixed"]
    } else {
        &["saturated", "fixed"]
    };
    for shape in ["linear", "fanout"] {
        for &mode in modes {
            println!("{}", measure(&args, shape, mode).await);
        }
    }
}
