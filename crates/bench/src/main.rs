//! `jobyard-bench`: a load generator for beanstalkd and Gearman servers.
//!
//! It speaks both protocols to any loopback host:port (jobyard, beanstalkd, gearmand), runs
//! one workload bounded in time and count, and reports jobs/s, latency percentiles, and —
//! given `--server-pid` — the server's CPU time per job and RSS from /proc. The last line
//! of output is one JSON object for scripts (bench/compare.sh).

mod beanstalk;
mod conn;
mod floor;
mod floor_tokio;
mod flow_hops;
mod flows;
mod gearman;
mod hist;
mod pg_insert;
mod procfs;
mod ready;
mod run;

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use clap::{Args, Parser, Subcommand, ValueEnum};

#[derive(Parser)]
#[command(
    name = "jobyard-bench",
    version,
    about = "Load generator for beanstalkd and Gearman servers (loopback only)"
)]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// beanstalkd protocol workloads.
    Beanstalk {
        workload: BeanstalkWorkload,
        #[command(flatten)]
        opts: Opts,
    },
    /// Gearman protocol workloads.
    Gearman {
        workload: GearmanWorkload,
        #[command(flatten)]
        opts: Opts,
    },
    /// Wait until a (re)starting server has COUNT jobs ready; print the time since --since-ns.
    WaitReady(WaitArgs),
    /// Flow workloads through the Rust client (the server's HTTP listener).
    Flows(flows::FlowArgs),
    /// Single-row INSERTs, each committed, from one client at a fixed rate into a
    /// PostgreSQL: the floor a durable put on PostgreSQL storage is measured against.
    PgInsert(pg_insert::PgInsertArgs),
    /// Run the floor: a one-thread epoll responder with just enough of the beanstalkd
    /// protocol for the workloads and no other work, to measure servers against.
    Floor {
        /// Where to listen (loopback); the bound address is printed first.
        #[arg(long, default_value = "127.0.0.1:0")]
        listen: String,
        /// Serve from a tokio current-thread runtime, a task per connection, instead of
        /// a hand-written epoll loop: tells the runtime's share of a server's cost.
        #[arg(long)]
        tokio: bool,
        /// With --tokio: busy-wait this many microseconds before each write of answers,
        /// standing in for a server's own work per request.
        #[arg(long, default_value_t = 0)]
        work_us: u64,
    },
}

#[derive(Clone, Copy, ValueEnum)]
enum BeanstalkWorkload {
    /// N connections put jobs, up to --pipeline in flight each.
    Put,
    /// Fill the tube with --count jobs, then M consumers reserve → delete until it is empty.
    Drain,
    /// N producers and M consumers at once for --duration; latency from a timestamp in the
    /// body to the reserve; --rate R for a fixed total put rate.
    E2e,
}

#[derive(Clone, Copy, ValueEnum)]
enum GearmanWorkload {
    /// N clients SUBMIT_JOB_BG, up to --pipeline in flight each.
    SubmitBg,
    /// Fill with --count background jobs, then M workers GRAB_JOB → WORK_COMPLETE until NO_JOB.
    Drain,
    /// N clients SUBMIT_JOB and wait for WORK_COMPLETE from M workers (GRAB_JOB / PRE_SLEEP /
    /// NOOP); latency is the client's submit → WORK_COMPLETE.
    Roundtrip,
}

/// Options shared by every workload.
#[derive(Args, Clone, Debug)]
pub struct Opts {
    /// Server address (loopback only) [default: 127.0.0.1:11300 beanstalk, 127.0.0.1:4730 gearman].
    #[arg(long)]
    pub addr: Option<String>,
    /// Producer / client connections (also used to prefill for drain).
    #[arg(long, default_value_t = 8)]
    pub conns: usize,
    /// Consumer / worker connections.
    #[arg(long, default_value_t = 8)]
    pub workers: usize,
    /// Requests in flight per connection [default: 32 for put/submit-bg, 1 for e2e/roundtrip].
    #[arg(long)]
    pub pipeline: Option<usize>,
    /// Job body size in bytes.
    #[arg(long, default_value_t = 100)]
    pub size: usize,
    /// At most this many jobs (drain: the number prefilled).
    #[arg(long, default_value_t = 1_000_000)]
    pub count: u64,
    /// At most this many seconds of load (e2e: the length of the run).
    #[arg(long, default_value_t = 10.0)]
    pub duration: f64,
    /// e2e: total put rate in jobs/s over all producers (default: as fast as they can).
    #[arg(long)]
    pub rate: Option<f64>,
    /// e2e: producers pause while this many put jobs are not yet consumed, so that the
    /// latency measures the server and not an ever longer queue.
    #[arg(long, default_value_t = 1000)]
    pub max_backlog: u64,
    /// Server process to read CPU time and RSS from (/proc/PID).
    #[arg(long)]
    pub server_pid: Option<u32>,
    /// Tube (beanstalk) or function (gearman) name.
    #[arg(long, default_value = "bench")]
    pub queue: String,
    /// gearman: give each job a unique id (default: empty unique ids).
    #[arg(long)]
    pub unique: bool,
    /// Threads of the load generator's runtime.
    #[arg(long, default_value_t = 2)]
    pub threads: usize,
    /// Seconds allowed after --duration for replies and the e2e drain before giving up.
    #[arg(long, default_value_t = 10)]
    pub grace: u64,
    /// drain: seconds allowed for the prefill.
    #[arg(long, default_value_t = 120)]
    pub prefill_timeout: u64,
    /// KEY=VALUE copied into the JSON line (repeatable).
    #[arg(long = "tag", value_parser = parse_tag)]
    pub tag: Vec<(String, String)>,
    /// Print only the JSON line.
    #[arg(long)]
    pub json: bool,
}

impl Opts {
    pub fn tags(&self) -> Vec<(String, String)> {
        self.tag.clone()
    }

    fn check(&self) -> Result<(), String> {
        if !(self.duration > 0.0 && self.duration <= 3600.0) {
            return Err("--duration must be in (0, 3600] seconds".into());
        }
        if self.count == 0 || self.count > 100_000_000 {
            return Err("--count must be in 1..=100000000".into());
        }
        if self.conns == 0 || self.conns > 1000 || self.workers > 1000 {
            return Err("--conns must be in 1..=1000 and --workers at most 1000".into());
        }
        if self.grace > 600 || self.prefill_timeout > 3600 {
            return Err("--grace is at most 600 s and --prefill-timeout at most 3600 s".into());
        }
        if self.size > 16 << 20 {
            return Err("--size is at most 16 MiB".into());
        }
        Ok(())
    }
}

fn parse_tag(s: &str) -> Result<(String, String), String> {
    let (k, v) = s.split_once('=').ok_or("use KEY=VALUE")?;
    Ok((k.to_string(), v.to_string()))
}

#[derive(Args)]
struct WaitArgs {
    #[arg(long, value_enum, default_value = "beanstalk")]
    proto: Proto,
    #[arg(long)]
    addr: Option<String>,
    /// Jobs that must be ready (beanstalk: current-jobs-ready; gearman: the function's total).
    #[arg(long)]
    count: u64,
    /// Start of the clock, in nanoseconds since the epoch (`date +%s%N` just before starting
    /// the server) [default: now].
    #[arg(long)]
    since_ns: Option<u128>,
    /// Give up after this many seconds.
    #[arg(long, default_value_t = 120.0)]
    timeout: f64,
    /// Gearman function whose total is counted.
    #[arg(long, default_value = "bench")]
    queue: String,
    #[arg(long = "tag", value_parser = parse_tag)]
    tag: Vec<(String, String)>,
}

#[derive(Clone, Copy, ValueEnum)]
enum Proto {
    Beanstalk,
    Gearman,
}

fn fail(msg: &str) -> ! {
    eprintln!("jobyard-bench: {msg}");
    std::process::exit(2)
}

fn runtime(threads: usize) -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads.clamp(1, 64))
        .enable_all()
        .build()
        .unwrap_or_else(|e| fail(&format!("cannot start the runtime: {e}")))
}

fn main() {
    let cli = Cli::parse();
    match cli.command {
        Cmd::Beanstalk { workload, opts } => {
            let name = match workload {
                BeanstalkWorkload::Put => "put",
                BeanstalkWorkload::Drain => "drain",
                BeanstalkWorkload::E2e => "e2e",
            };
            workload_main(opts, "127.0.0.1:11300", |o, a| {
                Box::pin(async move { beanstalk::run(&o, name, a).await })
            })
        }
        Cmd::Gearman { workload, opts } => {
            let name = match workload {
                GearmanWorkload::SubmitBg => "submit-bg",
                GearmanWorkload::Drain => "drain",
                GearmanWorkload::Roundtrip => "roundtrip",
            };
            workload_main(opts, "127.0.0.1:4730", |o, a| {
                Box::pin(async move { gearman::run(&o, name, a).await })
            })
        }
        Cmd::WaitReady(w) => wait_ready(w),
        Cmd::Flows(args) => runtime(2).block_on(flows::run(args)),
        Cmd::PgInsert(args) => runtime(1).block_on(pg_insert::run(args)),
        Cmd::Floor {
            listen,
            tokio,
            work_us,
        } => {
            let addr = conn::loopback(&listen).unwrap_or_else(|e| fail(&e));
            let listener =
                std::net::TcpListener::bind(addr).unwrap_or_else(|e| fail(&e.to_string()));
            let bound = listener
                .local_addr()
                .unwrap_or_else(|e| fail(&e.to_string()));
            println!("floor listening on {bound}");
            let served = if tokio {
                floor_tokio::run(listener, std::time::Duration::from_micros(work_us))
            } else {
                floor::run(listener)
            };
            if let Err(e) = served {
                fail(&format!("floor: {e}"));
            }
        }
    }
}

type BoxReport = std::pin::Pin<Box<dyn std::future::Future<Output = run::Report>>>;

fn workload_main(
    opts: Opts,
    default_addr: &str,
    go: impl FnOnce(Opts, std::net::SocketAddr) -> BoxReport,
) {
    if let Err(e) = opts.check() {
        fail(&e);
    }
    let addr =
        conn::loopback(opts.addr.as_deref().unwrap_or(default_addr)).unwrap_or_else(|e| fail(&e));
    let json_only = opts.json;
    let rt = runtime(opts.threads);
    let report = rt.block_on(go(opts, addr));
    // Tasks cut off at the time limit must not keep the process alive.
    rt.shutdown_timeout(Duration::from_millis(100));
    if !json_only {
        print!("{}", report.human());
    }
    println!("{}", report.json());
    if report.jobs == 0 {
        std::process::exit(1);
    }
}

fn wait_ready(w: WaitArgs) {
    let default_addr = match w.proto {
        Proto::Beanstalk => "127.0.0.1:11300",
        Proto::Gearman => "127.0.0.1:4730",
    };
    let addr =
        conn::loopback(w.addr.as_deref().unwrap_or(default_addr)).unwrap_or_else(|e| fail(&e));
    if !(w.timeout > 0.0 && w.timeout <= 3600.0) {
        fail("--timeout must be in (0, 3600] seconds");
    }
    // Map the epoch-based start onto the monotonic clock.
    let now_epoch = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_nanos();
    let now = Instant::now();
    let since = match w.since_ns {
        Some(ns) if ns <= now_epoch => now
            .checked_sub(Duration::from_nanos((now_epoch - ns) as u64))
            .unwrap_or(now),
        _ => now,
    };
    let limit = now + Duration::from_secs_f64(w.timeout);
    let rt = runtime(1);
    let result = rt.block_on(async {
        match w.proto {
            Proto::Beanstalk => {
                ready::wait_ready(addr, beanstalk::ReadyJobs, w.count, since, limit).await
            }
            Proto::Gearman => {
                let probe = gearman::FunctionTotal(&w.queue);
                ready::wait_ready(addr, probe, w.count, since, limit).await
            }
        }
    });
    let proto = match w.proto {
        Proto::Beanstalk => "beanstalk",
        Proto::Gearman => "gearman",
    };
    let tags: String = w
        .tag
        .iter()
        .map(|(k, v)| format!(",{}:{}", run::json_str(k), run::json_str(v)))
        .collect();
    match result {
        Ok(ready::Ready {
            connect_s,
            ready_s,
            jobs,
        }) => {
            println!(
                "{{\"proto\":\"{proto}\",\"workload\":\"wait-ready\",\"addr\":\"{addr}\",\"jobs_ready\":{jobs},\"connect_s\":{},\"ready_s\":{}{tags}}}",
                run::json_num(connect_s),
                run::json_num(ready_s)
            );
        }
        Err(e) => {
            println!(
                "{{\"proto\":\"{proto}\",\"workload\":\"wait-ready\",\"addr\":\"{addr}\",\"error\":{}{tags}}}",
                run::json_str(&e)
            );
            std::process::exit(1);
        }
    }
}
