//! `jobyard-bench pg-insert`: the floor under a durable put on PostgreSQL storage.
//!
//! One client sends single-row `INSERT`s, each its own transaction (autocommit: the
//! statement's implicit `COMMIT` waits for PostgreSQL's WAL flush, as jobyard's batch insert
//! does), open loop at a fixed rate, and records each one's latency. Issue 27 sets
//! jobyard-on-PostgreSQL's durable put p99 against this figure, measured on the same
//! PostgreSQL in the same run (bench/pg/run.sh). It uses sqlx, the client jobyard itself
//! writes with, so both sides pay the same client library.

use std::time::{Duration, Instant};

use clap::Args;
use sqlx::{Connection, Executor, PgConnection};

use crate::hist::Histogram;

/// Options of `jobyard-bench pg-insert`.
#[derive(Args, Clone, Debug)]
pub struct PgInsertArgs {
    /// postgres://USER@HOST:PORT/DB (the password in PGPASSWORD); loopback only.
    #[arg(long)]
    pub url: String,
    /// INSERTs per second (open loop: a late one does not push the schedule back).
    #[arg(long, default_value_t = 1000.0)]
    pub rate: f64,
    /// Seconds of measured load.
    #[arg(long, default_value_t = 10.0)]
    pub duration: f64,
    /// Seconds of unmeasured load first (connection and plan caches warm).
    #[arg(long, default_value_t = 1.0)]
    pub warmup: f64,
    /// Bytes of the row's body column (the jobs' body size).
    #[arg(long, default_value_t = 100)]
    pub size: usize,
    /// KEY=VALUE copied into the JSON line (repeatable).
    #[arg(long = "tag", value_parser = crate::parse_tag)]
    pub tag: Vec<(String, String)>,
}

/// Runs the probe and prints one JSON line; exits non-zero on any failure.
pub async fn run(args: PgInsertArgs) {
    let valid = args.rate > 0.0 && args.rate <= 100_000.0 && args.duration > 0.0;
    if !valid {
        crate::fail("--rate must be in (0, 100000] and --duration positive");
    }
    if !loopback_url(&args.url) {
        crate::fail("pg-insert talks to a loopback PostgreSQL only (127.0.0.1, ::1 or localhost)");
    }
    let mut conn = PgConnection::connect(&args.url)
        .await
        .unwrap_or_else(|e| crate::fail(&format!("cannot connect: {e}")));
    conn.execute(
        "CREATE TABLE IF NOT EXISTS bench_insert_probe \
         (id bigserial PRIMARY KEY, body bytea NOT NULL)",
    )
    .await
    .unwrap_or_else(|e| crate::fail(&format!("create table: {e}")));
    let body = vec![b'x'; args.size];
    let interval = Duration::from_secs_f64(1.0 / args.rate);
    let hist = Histogram::new();
    let start = Instant::now();
    let measure_from = start + Duration::from_secs_f64(args.warmup);
    let end = measure_from + Duration::from_secs_f64(args.duration);
    let mut next_at = start;
    let mut lag_max = Duration::ZERO;
    let mut measured = 0u64;
    while next_at < end {
        let now = Instant::now();
        if next_at > now {
            tokio::time::sleep_until(next_at.into()).await;
        } else if next_at >= measure_from {
            lag_max = lag_max.max(now - next_at);
        }
        let sent = Instant::now();
        sqlx::query("INSERT INTO bench_insert_probe (body) VALUES ($1)")
            .bind(&body)
            .execute(&mut conn)
            .await
            .unwrap_or_else(|e| crate::fail(&format!("insert: {e}")));
        if next_at >= measure_from {
            hist.record(sent.elapsed().as_nanos() as u64);
            measured += 1;
        }
        next_at += interval;
    }
    let window = end - measure_from;
    let s = hist.summary();
    let tags: String = args
        .tag
        .iter()
        .map(|(k, v)| format!(",{}:{}", crate::run::json_str(k), crate::run::json_str(v)))
        .collect();
    println!(
        "{{\"proto\":\"postgres\",\"workload\":\"pg-insert\",\"rate\":{},\"jobs\":{measured},\"jobs_per_s\":{},\"lat_p50_us\":{},\"lat_p99_us\":{},\"lat_p999_us\":{},\"lat_max_us\":{},\"rate_lag_max_ms\":{}{tags}}}",
        crate::run::json_num(args.rate),
        crate::run::json_num(measured as f64 / window.as_secs_f64()),
        crate::run::json_num(s.p50 as f64 / 1e3),
        crate::run::json_num(s.p99 as f64 / 1e3),
        crate::run::json_num(s.p999 as f64 / 1e3),
        crate::run::json_num(s.max as f64 / 1e3),
        crate::run::json_num((lag_max.as_secs_f64() * 1e4).round() / 10.0),
    );
    if measured == 0 {
        std::process::exit(1);
    }
}

/// Whether the URL's host is the loopback (the load generator's rule for every workload).
fn loopback_url(url: &str) -> bool {
    let rest = url.split_once("://").map(|(_, r)| r).unwrap_or(url);
    let host_port = rest.split(['/', '?']).next().unwrap_or("");
    let host = host_port
        .rsplit_once('@')
        .map(|(_, h)| h)
        .unwrap_or(host_port);
    let host = host
        .strip_prefix('[')
        .and_then(|h| h.split_once(']').map(|(h, _)| h))
        .unwrap_or_else(|| host.rsplit_once(':').map(|(h, _)| h).unwrap_or(host));
    matches!(host, "127.0.0.1" | "::1" | "localhost")
}

#[cfg(test)]
mod tests {
    use super::loopback_url;

    #[test]
    fn only_loopback_urls_pass() {
        assert!(loopback_url("postgres://postgres@127.0.0.1:5432/db"));
        assert!(loopback_url(
            "postgres://u:pw@localhost:1/db?sslmode=disable"
        ));
        assert!(loopback_url("postgresql://u@[::1]:5432/db"));
        assert!(!loopback_url("postgres://u@db.example:5432/db"));
        assert!(!loopback_url("postgres://u@10.0.0.1/db"));
    }
}
