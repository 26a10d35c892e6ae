//! A MySQL connection kept for one user that needs one at a time (the done writer's task,
//! the fetches, which the worker runs one at a time), outside the pool.
//!
//! Why not the pool: sqlx's pool pings a connection (`COM_PING`, a round trip) when it
//! hands it out and again when it is given back, so every final write cost two extra round
//! trips, and two wake-ups of a MariaDB thread, on top of its own statement (for a fetch,
//! the first of them on the path from a poke to the launch). Kept here, the connection is
//! checked by use: any error that may have left it unusable drops it, and the next use
//! opens a new one.
//!
//! Fetches were once moved back to the pool because a fetch passed over a `waiting` row;
//! the cause turned out to be run-manual's claim locking every row of a small table (see
//! [`crate::store::Store::claim_manual`]), not the connection.

use std::sync::Arc;
use std::time::{Duration, Instant};

use sqlx::mysql::{MySqlConnectOptions, MySqlConnection};
use sqlx::{ConnectOptions, Connection};
use tokio::sync::{Mutex, OwnedMutexGuard};

/// How long opening a connection may take (the pool's acquire timeout, as before).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// A connection unused for longer than this is pinged before its next use (the pool's
/// check, kept only where it is cheap): the server may have closed it meanwhile
/// (`wait_timeout`, a restart), and a fetch failing on it would wait for the retry pause.
const IDLE_CHECK: Duration = Duration::from_secs(30);

/// One connection, opened on first use and again after an error dropped it.
pub struct Dedicated {
    opts: MySqlConnectOptions,
    slot: Arc<Mutex<Slot>>,
    idle_check: Duration,
}

struct Slot {
    conn: Option<MySqlConnection>,
    used: Instant,
}

/// The connection, held until dropped (or discarded after an error). Owned, so that a
/// fetch can keep it between its two round trips.
pub struct Held {
    guard: OwnedMutexGuard<Slot>,
}

impl Dedicated {
    /// A connection to be opened with `opts` when first needed.
    pub fn new(opts: MySqlConnectOptions) -> Dedicated {
        Dedicated {
            opts,
            slot: Arc::new(Mutex::new(Slot {
                conn: None,
                used: Instant::now(),
            })),
            idle_check: IDLE_CHECK,
        }
    }

    /// The same, checking the connection before a use that follows `idle` without one
    /// (tests check with no wait at all).
    pub fn with_idle_check(mut self, idle: Duration) -> Dedicated {
        self.idle_check = idle;
        self
    }

    /// Waits for the connection, opening it if there is none (or if it was idle long
    /// enough to be checked, and the check failed).
    pub async fn lock(&self) -> Result<Held, sqlx::Error> {
        let mut guard = self.slot.clone().lock_owned().await;
        if guard.used.elapsed() >= self.idle_check {
            if let Some(conn) = guard.conn.as_mut() {
                if conn.ping().await.is_err() {
                    guard.conn = None;
                }
            }
        }
        if guard.conn.is_none() {
            let connect = tokio::time::timeout(CONNECT_TIMEOUT, self.opts.connect());
            guard.conn = Some(connect.await.map_err(|_| sqlx::Error::PoolTimedOut)??);
        }
        guard.used = Instant::now();
        Ok(Held { guard })
    }

    /// Closes the connection, if open (on shutdown).
    pub async fn close(&self) {
        if let Some(conn) = self.slot.lock().await.conn.take() {
            let _ = conn.close().await;
        }
    }
}

impl Held {
    /// The open connection.
    pub fn conn(&mut self) -> &mut MySqlConnection {
        self.guard
            .conn
            .as_mut()
            .expect("Dedicated::lock always leaves a connection")
    }

    /// Drops the connection after an error: the next [`Dedicated::lock`] opens a new one.
    pub fn discard(mut self) {
        self.guard.conn.take();
    }
}
