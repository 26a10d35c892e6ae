//! The user's MySQL jobs table, the source of truth (docs/jobd.md, "The jobs table").
//!
//! Rules kept from jobd: rows are never inserted or deleted; columns are written in jobd's
//! order (`accepted`, except for a polled row, whose `accepted` would share the `running`
//! write's transaction and is left out; then `running, result='ok', time_started` before
//! the launcher starts; then `done, result, time_finished, return_code, sig, stdout,
//! stderr`). Fixed: a pool
//! instead of one shared connection, fetches take only as many rows as there are free
//! slots with `FOR UPDATE SKIP LOCKED` (no hoarding, no blocking between workers), rows
//! deleted meanwhile are skipped, and the final write is retried and sanitised so a row is
//! never left `running` because its output did not fit.

mod columns;
pub mod dedicated;
mod fetch;
mod finish;
mod manual;
pub mod sqltext;
mod transitions;
pub mod writer;

use std::sync::Arc;
use std::time::Duration;

use sqlx::mysql::{MySqlConnectOptions, MySqlPool, MySqlPoolOptions};

pub use columns::{bmp_only, is_data_error, truncate};
use dedicated::Dedicated;
pub use fetch::OpenFetch;
pub use manual::ManualClaim;
pub use writer::DoneWriter;

use crate::config::MysqlConfig;
use crate::worker::metrics::JobdMetrics;

/// Largest `mediumtext` value, in bytes (the README schema's column type).
pub const MEDIUMTEXT_MAX: usize = 16 * 1024 * 1024 - 1;

/// A handle on the jobs table.
#[derive(Clone)]
pub struct Store {
    pool: MySqlPool,
    /// The final writes' connection (one writer task).
    writer: Arc<Dedicated>,
    /// The fetches' connection (the worker runs one fetch at a time).
    fetcher: Arc<Dedicated>,
    table: String,
    metrics: Option<JobdMetrics>,
}

/// A row a worker took for one of its targets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claimed {
    /// Row id.
    pub id: u64,
    /// Its target.
    pub target: String,
}

fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}

fn id_list(ids: &[u64]) -> String {
    ids.iter().map(u64::to_string).collect::<Vec<_>>().join(",")
}

impl Store {
    /// A pool for `cfg`, connecting lazily so the daemon serves even while MySQL is down.
    pub fn connect(cfg: &MysqlConfig, max_connections: u32) -> Store {
        let mut opts = MySqlConnectOptions::new()
            .username(&cfg.user)
            .password(&cfg.password)
            .database(&cfg.database)
            .charset("utf8mb4");
        opts = if cfg.host.starts_with('/') {
            opts.socket(&cfg.host)
        } else {
            opts.host(&cfg.host).port(cfg.port)
        };
        let pool = MySqlPoolOptions::new()
            .max_connections(max_connections.max(2))
            .acquire_timeout(Duration::from_secs(10))
            .connect_lazy_with(opts.clone());
        Store {
            pool,
            writer: Arc::new(Dedicated::new(opts.clone())),
            fetcher: Arc::new(Dedicated::new(opts)),
            table: format!("`{}`", cfg.table.replace('`', "``")),
            metrics: None,
        }
    }

    /// The same store, counting its retried errors in `metrics`.
    pub fn with_metrics(mut self, metrics: JobdMetrics) -> Store {
        self.metrics = Some(metrics);
        self
    }

    /// Counts a failed batch write (its rows are then written one by one: a retry).
    pub fn count_batch_error(&self) {
        self.count_error(true);
    }

    fn count_error(&self, retried: bool) {
        if let Some(m) = &self.metrics {
            m.db_error(retried);
        }
    }

    /// Closes the pool, the write connection and the fetch connection.
    pub async fn close(&self) {
        self.writer.close().await;
        self.fetcher.close().await;
        self.pool.close().await;
    }
}
