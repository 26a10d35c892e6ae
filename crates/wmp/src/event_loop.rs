//! The manager's own thread: it owns the ZMTP ROUTER ([`Router`], one `mio` poll) and sleeps
//! in it; each wake-up reads every connection that has bytes, hands every whole message to
//! the manager, then sends everything the batch produced (one write per peer), and only
//! then sleeps again.
//!
//! Why a thread and not a tokio task: each WMP job is five messages (READY, WAKE, GIVE,
//! TAKE, DONE; three with a worker's hot GIVE: DONE+GIVE, TAKE). Driven from tokio, a readable socket woke tokio's I/O driver, which woke the
//! worker thread that ran the manager: two task switches per wake-up
//! (docs/benchmarks.md, "14/WMP"). Here the poll sleeps on the sockets themselves, so a
//! wake-up is one switch, and under load one wake-up serves every message that arrived
//! meanwhile. Why our own ZMTP and not libzmq's ROUTER: libzmq moved every message between
//! its I/O thread and this one through a mailbox (docs/wmp.md, "Transport").
//!
//! The broker tells the manager about jobs that became ready and leases that ran out
//! through its session's mailbox, a tokio channel. [`forward_notices`] (a small tokio task)
//! moves notices to the thread through a std channel and wakes the poll with a
//! [`mio::Waker`] (an eventfd in the same poll set).

use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use jobyard_broker::Mailbox;
use jobyard_engine::NoticeKind;
use jobyard_wmp_wire::Sent;
use mio::Waker;
use tokio::runtime::Handle;
use tokio::sync::watch;

use crate::counters::{self, Counter};
use crate::manager::{Manager, OutKind};
use crate::router::Router;

/// The longest single sleep when nothing is due (the loop just polls again).
const IDLE_POLL: Duration = Duration::from_secs(3600);

/// What the tokio side hands to the manager's thread.
pub(crate) enum Signal {
    /// An engine notice for the manager's session.
    Notice(NoticeKind),
    /// The server is shutting down (or the broker forgot the session): stop.
    Stop,
}

/// The tokio half: waits for notices (or shutdown), passes them on, wakes the thread once
/// per batch of notices. Ends after passing on [`Signal::Stop`], or when the thread is gone.
pub(crate) async fn forward_notices(
    mut mailbox: Mailbox,
    signals: mpsc::Sender<Signal>,
    waker: Arc<Waker>,
    mut shutdown: watch::Receiver<bool>,
) {
    loop {
        let signal = tokio::select! {
            notice = mailbox.recv() => notice.map_or(Signal::Stop, Signal::Notice),
            _ = shutdown.changed() => Signal::Stop,
        };
        let stop = matches!(signal, Signal::Stop);
        if signals.send(signal).is_err() {
            return;
        }
        if !stop {
            while let Some(notice) = mailbox.try_recv() {
                if signals.send(Signal::Notice(notice)).is_err() {
                    return;
                }
            }
        }
        if let Err(e) = waker.wake() {
            tracing::warn!(error = %e, "wmp manager: cannot wake the manager's thread");
        }
        if stop {
            return;
        }
    }
}

/// The thread half: the manager's loop until [`Signal::Stop`]; gives back the session's
/// wait, pinned queues and leases when it ends. `runtime` is used only to wait for the log
/// with `--fsync always`.
pub(crate) fn run(
    mut manager: Manager,
    mut router: Router,
    signals: mpsc::Receiver<Signal>,
    runtime: Handle,
) {
    'serve: loop {
        router.drain_messages(|frames| manager.on_frames(frames));
        loop {
            match signals.try_recv() {
                Ok(Signal::Notice(notice)) => manager.on_notice(notice),
                Ok(Signal::Stop) | Err(mpsc::TryRecvError::Disconnected) => break 'serve,
                Err(mpsc::TryRecvError::Empty) => break,
            }
        }
        let now = Instant::now();
        if manager.deadline().is_some_and(|at| at <= now) {
            manager.pass();
        }
        send_all(&mut manager, &mut router, &runtime);
        router.flush();
        router.heartbeat(now);
        let due = manager
            .deadline()
            .map_or(router.next_tick(), |at| at.min(router.next_tick()));
        router.wait(poll_timeout(Some(due), Instant::now()));
    }
    manager.stop();
}

/// Time until `deadline` in whole milliseconds, rounded up so a due timer is never polled
/// for in a busy loop of zero-length sleeps.
fn poll_timeout(deadline: Option<Instant>, now: Instant) -> Duration {
    let wait = deadline.map_or(IDLE_POLL, |at| at.saturating_duration_since(now));
    let ms = wait.as_micros().div_ceil(1000).min(IDLE_POLL.as_millis());
    Duration::from_millis(ms as u64)
}

/// Waits until the queued TAKEs' fences are durable, then queues everything on the router
/// without ever waiting on a peer.
fn send_all(manager: &mut Manager, router: &mut Router, runtime: &Handle) {
    if manager.out.is_empty() {
        return;
    }
    if manager.lsn > 0 {
        runtime.block_on(manager.broker.wait_durable(manager.lsn));
        manager.lsn = 0;
    }
    for out in std::mem::take(&mut manager.out) {
        match router.send(&out.frames) {
            Sent::Queued => {}
            Sent::Unreachable => {
                counters::count(&manager.metrics, Counter::SendUnreachable);
                match out.kind {
                    OutKind::Wake(path) => manager.registry.forget(&path),
                    OutKind::Take { path, job, attempt } => {
                        manager.registry.forget(&path);
                        manager.undo_take(job, attempt);
                    }
                    OutKind::No => {}
                }
            }
            // A full peer queue: WAKEs and NOs are retried by design; a TAKE's job comes
            // back when its lease runs out.
            Sent::Full | Sent::Failed => counters::count(&manager.metrics, Counter::SendDropped),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn poll_timeouts_round_up_and_are_bounded() {
        let now = Instant::now();
        let ms = Duration::from_millis;
        assert_eq!(poll_timeout(Some(now), now), ms(0));
        assert_eq!(poll_timeout(Some(now - Duration::from_secs(1)), now), ms(0));
        assert_eq!(
            poll_timeout(Some(now + Duration::from_micros(1)), now),
            ms(1)
        );
        assert_eq!(poll_timeout(Some(now + ms(50)), now), ms(50));
        assert_eq!(poll_timeout(None, now), ms(3_600_000));
        assert_eq!(
            poll_timeout(Some(now + Duration::from_secs(86_400)), now),
            ms(3_600_000)
        );
    }
}
