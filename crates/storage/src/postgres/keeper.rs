//! The lease keeper: a thread of the leader that renews its lease every [`RENEW_EVERY`]
//! on a connection of its own, pushing on the hand-out deadline after each renewal and
//! refreshing the cluster view's live nodes (its heartbeat also forgets nodes gone for an
//! hour). When it finds the lease taken by another node, or has renewed nothing for
//! [`HOLD_LIMIT`] (PostgreSQL lost), the process steps down ([`step_down`]).

use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::conn::Conn;
use super::leadership::{Leadership, LEASE};
use super::lease::{renew, Renewal};
use super::nodes::{heartbeat, Me};
use super::target::PgTarget;
use super::view::{Addrs, ClusterView, Role};

/// How often the leader renews its lease: three times a [`super::leadership::LEASE`], so
/// one lost or slow renewal never lets it run out.
pub(crate) const RENEW_EVERY: Duration = Duration::from_secs(1);

/// The exit code of a node that lost its leadership (EX_TEMPFAIL): a supervisor restarts
/// it, and it comes back as a standby.
pub const STEP_DOWN_EXIT: i32 = 75;

/// The longest one renewal (or connecting for one) may take before its connection is
/// dropped for a new one.
const RENEW_PATIENCE: Duration = Duration::from_secs(1);

/// How long a leader that cannot renew its lease (PostgreSQL lost) holds its clients
/// before it steps down: the lease, then 7 s more in which PostgreSQL may come back (a
/// restart, a failover of its own). Meanwhile nothing is acknowledged (no batch commits)
/// and, past the lease minus its margin, no job is handed out. A standby may take over
/// as soon as the lease runs out; without one, the supervisor restarts this node, which
/// waits for PostgreSQL as any starting node does and leads again once it answers.
pub const HOLD_LIMIT: Duration = Duration::from_secs(LEASE.as_secs() + 7);

/// Stops the process: another node leads now, and this one must acknowledge nothing
/// more. Exiting closes every client connection at once; clients reconnect to the leader.
pub(crate) fn step_down(why: &str) -> ! {
    tracing::error!("stepping down: {why}; nothing more is acknowledged by this node");
    eprintln!("jobyard: stepping down: {why}");
    std::process::exit(STEP_DOWN_EXIT);
}

/// The running keeper; [`Keeper::stop`] ends it.
pub(crate) struct Keeper {
    stop: Arc<(Mutex<bool>, Condvar)>,
    thread: Option<JoinHandle<()>>,
}

impl Keeper {
    /// Starts renewing `leadership`'s lease in `target`'s schema, keeping `view`'s live
    /// nodes current and advertising `advertise` in this node's heartbeat.
    pub fn start(
        target: PgTarget,
        leadership: Arc<Leadership>,
        view: Arc<ClusterView>,
        advertise: Addrs,
    ) -> std::io::Result<Keeper> {
        let stop = Arc::new((Mutex::new(false), Condvar::new()));
        let stopped = stop.clone();
        let kept = Kept {
            target,
            leadership,
            view,
            advertise,
        };
        let thread = std::thread::Builder::new()
            .name("jobyard-lease".into())
            .spawn(move || keep(&kept, &stopped))?;
        Ok(Keeper {
            stop,
            thread: Some(thread),
        })
    }

    /// Stops renewing (before the lease is released at a clean stop).
    pub fn stop(&mut self) {
        *self.stop.0.lock().expect("keeper lock") = true;
        self.stop.1.notify_all();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl Drop for Keeper {
    fn drop(&mut self) {
        self.stop();
    }
}

/// What the keeper keeps.
struct Kept {
    target: PgTarget,
    leadership: Arc<Leadership>,
    view: Arc<ClusterView>,
    advertise: Addrs,
}

/// The keeper's loop: renew, then wait for the next renewal or the stop; step down once
/// nothing was renewed for [`HOLD_LIMIT`].
fn keep(kept: &Kept, stop: &(Mutex<bool>, Condvar)) {
    let mut conn: Option<Conn> = None;
    let mut failing = false;
    let mut renewed_at = Instant::now();
    let mut next = Instant::now() + RENEW_EVERY;
    loop {
        {
            let mut stopped = stop.0.lock().expect("keeper lock");
            while !*stopped && Instant::now() < next {
                let wait = next.saturating_duration_since(Instant::now());
                stopped = stop.1.wait_timeout(stopped, wait).expect("keeper lock").0;
            }
            if *stopped {
                return;
            }
        }
        next = Instant::now() + RENEW_EVERY;
        match renew_once(kept, &mut conn) {
            Ok(sent) => {
                renewed_at = sent;
                if failing {
                    failing = false;
                    tracing::info!(
                        "the lease is renewed again (epoch {})",
                        kept.leadership.epoch()
                    );
                }
            }
            Err(e) => {
                conn = None;
                if held_too_long(renewed_at.elapsed()) {
                    step_down(&format!(
                        "the lease could not be renewed for {:?} ({e}); PostgreSQL is lost",
                        renewed_at.elapsed()
                    ));
                }
                if !failing {
                    failing = true;
                    tracing::warn!(
                        "cannot renew the leader's lease: {e}; jobs are not handed out \
                         once it may have run out, and this node steps down if it cannot \
                         renew it for {HOLD_LIMIT:?}"
                    );
                }
            }
        }
    }
}

/// Whether a leader whose last successful renewal was sent `since` ago must step down.
fn held_too_long(since: Duration) -> bool {
    since >= HOLD_LIMIT
}

/// One renewal and heartbeat, connecting first when needed; returns when the renewal
/// was sent.
fn renew_once(kept: &Kept, conn: &mut Option<Conn>) -> Result<Instant, super::PgError> {
    if conn.is_none() {
        *conn = Some(Conn::open_within(&kept.target, RENEW_PATIENCE)?);
    }
    let link = conn.as_mut().expect("connected");
    let schema = kept.target.schema();
    let leadership = &kept.leadership;
    let sent = Instant::now();
    match renew(link, schema, leadership.epoch(), RENEW_PATIENCE)? {
        Renewal::Renewed => leadership.renewed(sent),
        Renewal::Lost => step_down(&format!(
            "another node took the lease of epoch {} (this node's lease ran out)",
            leadership.epoch()
        )),
    }
    let me = Me {
        node: leadership.node(),
        role: Role::Leader,
        addrs: &kept.advertise,
    };
    match heartbeat(link, schema, &me, true, RENEW_PATIENCE) {
        Ok(beat) => kept.view.update(|s| s.nodes = beat.nodes),
        // The lease is renewed; the list of nodes waits for the next beat.
        Err(e) => {
            tracing::debug!("the leader's heartbeat failed: {e}");
            *conn = None;
        }
    }
    Ok(sent)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hold_outlasts_the_lease_and_is_bounded() {
        assert!(HOLD_LIMIT > LEASE);
        assert!(!held_too_long(LEASE));
        assert!(!held_too_long(HOLD_LIMIT - Duration::from_millis(1)));
        assert!(held_too_long(HOLD_LIMIT));
    }
}
