//! The lease keeper: a thread of the leader that renews its lease every [`RENEW_EVERY`]
//! on a connection of its own, pushing on the hand-out deadline after each renewal and
//! refreshing the cluster's live nodes. When it finds the lease taken by another node, the
//! process steps down ([`step_down`]).

use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::conn::Conn;
use super::leadership::Leadership;
use super::lease::{heartbeat, renew, Renewal};
use super::target::PgTarget;

/// How often the leader renews its lease: three times a [`super::leadership::LEASE`], so
/// one lost or slow renewal never lets it run out.
pub(crate) const RENEW_EVERY: Duration = Duration::from_secs(1);

/// The exit code of a node that lost its leadership (EX_TEMPFAIL): a supervisor restarts
/// it, and it comes back as a standby.
pub const STEP_DOWN_EXIT: i32 = 75;

/// The longest one renewal may take before its connection is dropped for a new one.
const RENEW_PATIENCE: Duration = Duration::from_secs(1);

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
    /// Starts renewing `leadership`'s lease in `target`'s schema.
    pub fn start(target: PgTarget, leadership: Arc<Leadership>) -> std::io::Result<Keeper> {
        let stop = Arc::new((Mutex::new(false), Condvar::new()));
        let stopped = stop.clone();
        let thread = std::thread::Builder::new()
            .name("jobyard-lease".into())
            .spawn(move || keep(&target, &leadership, &stopped))?;
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

/// The keeper's loop: renew, then wait for the next renewal or the stop.
fn keep(target: &PgTarget, leadership: &Leadership, stop: &(Mutex<bool>, Condvar)) {
    let mut conn: Option<Conn> = None;
    let mut failing = false;
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
        match renew_once(target, leadership, &mut conn) {
            Ok(()) if failing => {
                failing = false;
                tracing::info!("the lease is renewed again (epoch {})", leadership.epoch());
            }
            Ok(()) => {}
            Err(e) => {
                conn = None;
                if !failing {
                    failing = true;
                    tracing::warn!(
                        "cannot renew the leader's lease: {e}; jobs are not handed out \
                         once it may have run out"
                    );
                }
            }
        }
    }
}

/// One renewal and heartbeat, connecting first when needed.
fn renew_once(
    target: &PgTarget,
    leadership: &Leadership,
    conn: &mut Option<Conn>,
) -> Result<(), super::PgError> {
    if conn.is_none() {
        *conn = Some(Conn::open(target)?);
    }
    let link = conn.as_mut().expect("connected");
    let sent = Instant::now();
    match renew(link, target.schema(), leadership.epoch(), RENEW_PATIENCE)? {
        Renewal::Renewed => leadership.renewed(sent),
        Renewal::Lost => step_down(&format!(
            "another node took the lease of epoch {} (this node's lease ran out)",
            leadership.epoch()
        )),
    }
    let nodes = heartbeat(link, target.schema(), leadership.node(), RENEW_PATIENCE)?;
    leadership.set_nodes(nodes);
    Ok(())
}
