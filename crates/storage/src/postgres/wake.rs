//! A standby's wake-ups: `LISTEN` on the log's channel, which the leader's every batch
//! insert notifies (schema version 3's statement trigger), so a standby reads new rows as
//! soon as they commit rather than polling. The listening task runs on the runtime of the
//! follower's connection, so it reads notifications whenever that connection is used or
//! the follower waits; a lost notification (a reconnect) is covered by the follower's
//! fallback poll.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sqlx::postgres::{PgListener, PgPoolOptions};

use super::conn::Conn;
use super::error::PgError;
use super::schema::log_channel;
use super::target::PgTarget;

/// How long the listening task pauses after its connection failed before trying again.
const RELISTEN_PAUSE: Duration = Duration::from_secs(1);

/// The listening task and what it found.
pub(crate) struct Wake {
    shared: Arc<Shared>,
    task: tokio::task::JoinHandle<()>,
}

struct Shared {
    /// When the first notification not yet taken arrived.
    first: Mutex<Option<Instant>>,
    notify: tokio::sync::Notify,
}

impl Shared {
    fn wake(&self, at: Instant) {
        self.first.lock().expect("wake lock").get_or_insert(at);
        self.notify.notify_one();
    }
}

impl Wake {
    /// Listens on `target`'s log channel, on a connection of its own driven by `conn`'s
    /// runtime. Returns once `LISTEN` has run: every batch committed from then on wakes.
    pub fn listen(conn: &Conn, target: &PgTarget) -> Result<Wake, PgError> {
        let channel = log_channel(target.schema());
        let runtime = conn.runtime();
        let listener = runtime.block_on(async {
            // A pool of one, which PgListener reconnects through (and re-LISTENs).
            let pool = PgPoolOptions::new()
                .max_connections(1)
                .max_lifetime(None)
                .idle_timeout(None)
                .connect_with(target.options().clone())
                .await?;
            let mut listener = PgListener::connect_with(&pool).await?;
            listener.ignore_pool_close_event(true);
            listener.listen(&channel).await?;
            Ok::<_, sqlx::Error>(listener)
        });
        let mut listener = listener.map_err(|e| PgError::from_sqlx(target.shown(), e))?;
        let shared = Arc::new(Shared {
            first: Mutex::new(None),
            notify: tokio::sync::Notify::new(),
        });
        let woken = shared.clone();
        let task = runtime.spawn(async move {
            loop {
                match listener.try_recv().await {
                    Ok(Some(_)) => woken.wake(Instant::now()),
                    // The connection was lost (and made again): what it missed is unknown.
                    Ok(None) => woken.wake(Instant::now()),
                    Err(_) => {
                        woken.wake(Instant::now());
                        tokio::time::sleep(RELISTEN_PAUSE).await;
                    }
                }
            }
        });
        Ok(Wake { shared, task })
    }

    /// When the first notification since the last take arrived, if one did.
    pub fn take(&self) -> Option<Instant> {
        self.shared.first.lock().expect("wake lock").take()
    }

    /// Waits on `conn`'s runtime until a notification arrives (at once if one is
    /// waiting to be taken) or `until`.
    pub fn wait(&self, conn: &Conn, until: Instant) {
        if self.shared.first.lock().expect("wake lock").is_some() {
            return;
        }
        let wait = until.saturating_duration_since(Instant::now());
        if !wait.is_zero() {
            let notified = self.shared.notify.notified();
            let _ = conn
                .runtime()
                .block_on(async { tokio::time::timeout(wait, notified).await });
        }
    }
}

impl Drop for Wake {
    fn drop(&mut self) {
        self.task.abort();
    }
}
