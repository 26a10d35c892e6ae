//! The manager's own thread: it owns the ROUTER socket and polls it with `zmq_poll`, drains
//! every message that is waiting, then sends everything the batch produced, and only then
//! sleeps again.
//!
//! Why a thread and not a tokio task: each WMP job is five messages (READY, WAKE, GIVE, TAKE,
//! DONE), and libzmq already moves every one of them between its I/O thread and the socket's
//! user. Driven from tokio, a readable ROUTER woke tokio's I/O driver, which woke the worker
//! thread that ran the manager: two task switches per wake-up, and ~70 % of the manager's
//! CPU was spent in the kernel switching tasks (docs/benchmarks.md, "14/WMP"). Here
//! `zmq_poll` sleeps on the socket's own signal, so a wake-up is one switch, and under load
//! one wake-up serves every message that arrived meanwhile.
//!
//! The broker tells the manager about jobs that became ready and leases that ran out
//! through its session's mailbox, a tokio channel. [`forward_notices`] (a small tokio task)
//! moves notices to the thread through a std channel and rings a *bell*: an inproc PAIR
//! socket in the same poll set as the ROUTER.

use std::sync::mpsc;
use std::time::{Duration, Instant};

use jobyard_broker::Mailbox;
use jobyard_engine::NoticeKind;
use tokio::runtime::Handle;
use tokio::sync::watch;

use super::core::{Manager, OutKind};
use super::counters::{self, Counter};
use crate::transport::{recv_now, send_now, Sent};

/// Messages handled before the loop sends and looks at its timers again.
const BATCH: usize = 256;

/// The longest single sleep when nothing is due (the loop just polls again).
const IDLE_POLL: Duration = Duration::from_secs(3600);

/// The inproc endpoint of the bell (one per manager context).
const BELL_ENDPOINT: &str = "inproc://wmp-manager-bell";

/// What the tokio side hands to the manager's thread.
pub(crate) enum Signal {
    /// An engine notice for the manager's session.
    Notice(NoticeKind),
    /// The server is shutting down (or the broker forgot the session): stop.
    Stop,
}

/// The two ends of the bell: `ringer` for [`forward_notices`], `listener` for [`run`].
pub(crate) struct Bell {
    pub(crate) ringer: zmq::Socket,
    pub(crate) listener: zmq::Socket,
}

impl Bell {
    /// Creates the connected PAIR sockets in `ctx`.
    pub(crate) fn new(ctx: &zmq::Context) -> std::io::Result<Bell> {
        let io = std::io::Error::other;
        let listener = ctx.socket(zmq::PAIR).map_err(io)?;
        listener.set_linger(0).map_err(io)?;
        listener.bind(BELL_ENDPOINT).map_err(io)?;
        let ringer = ctx.socket(zmq::PAIR).map_err(io)?;
        ringer.set_linger(0).map_err(io)?;
        // One pending ring is enough: a full queue means the thread has not looked yet.
        ringer.set_sndhwm(1).map_err(io)?;
        ringer.connect(BELL_ENDPOINT).map_err(io)?;
        Ok(Bell { ringer, listener })
    }
}

/// The tokio half: waits for notices (or shutdown), passes them on, rings the bell once per
/// batch of notices. Ends after passing on [`Signal::Stop`], or when the thread is gone.
pub(crate) async fn forward_notices(
    mut mailbox: Mailbox,
    signals: mpsc::Sender<Signal>,
    ringer: zmq::Socket,
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
        // EAGAIN: a ring is already pending, which is all the thread needs.
        let _ = ringer.send(&b""[..], zmq::DONTWAIT);
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
    router: zmq::Socket,
    bell: zmq::Socket,
    signals: mpsc::Receiver<Signal>,
    runtime: Handle,
) {
    let mut ring = zmq::Message::new();
    'serve: loop {
        let mut handled = 0;
        while handled < BATCH {
            match recv_now(&router) {
                Ok(Some(frames)) => {
                    manager.on_frames(frames);
                    handled += 1;
                }
                Ok(None) => break,
                Err(e) => {
                    tracing::debug!(error = %e, "wmp manager: receive failed");
                    break;
                }
            }
        }
        while bell.recv(&mut ring, zmq::DONTWAIT).is_ok() {}
        loop {
            match signals.try_recv() {
                Ok(Signal::Notice(notice)) => manager.on_notice(notice),
                Ok(Signal::Stop) | Err(mpsc::TryRecvError::Disconnected) => break 'serve,
                Err(mpsc::TryRecvError::Empty) => break,
            }
        }
        if manager.deadline().is_some_and(|at| at <= Instant::now()) {
            manager.pass();
        }
        flush(&mut manager, &router, &runtime);
        if handled == BATCH {
            continue;
        }
        let timeout = poll_timeout(manager.deadline(), Instant::now());
        let mut items = [
            router.as_poll_item(zmq::POLLIN),
            bell.as_poll_item(zmq::POLLIN),
        ];
        if let Err(e) = zmq::poll(&mut items, timeout) {
            if e != zmq::Error::EINTR {
                // Cannot happen with valid sockets; do not spin if it does.
                tracing::warn!(error = %e, "wmp manager: poll failed");
                std::thread::sleep(Duration::from_millis(10));
            }
        }
    }
    manager.stop();
}

/// Milliseconds until `deadline`, rounded up so a due timer is never polled for in a
/// busy loop of zero-length sleeps.
fn poll_timeout(deadline: Option<Instant>, now: Instant) -> i64 {
    let wait = deadline.map_or(IDLE_POLL, |at| at.saturating_duration_since(now));
    let ms = wait.as_micros().div_ceil(1000);
    ms.min(IDLE_POLL.as_millis()) as i64
}

/// Waits until the queued TAKEs' fences are durable, then sends everything queued without
/// ever waiting on a peer.
fn flush(manager: &mut Manager, router: &zmq::Socket, runtime: &Handle) {
    if manager.out.is_empty() {
        return;
    }
    if manager.lsn > 0 {
        runtime.block_on(manager.broker.wait_durable(manager.lsn));
        manager.lsn = 0;
    }
    for out in std::mem::take(&mut manager.out) {
        match send_now(router, &out.frames) {
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
        assert_eq!(poll_timeout(Some(now), now), 0);
        assert_eq!(poll_timeout(Some(now - Duration::from_secs(1)), now), 0);
        assert_eq!(poll_timeout(Some(now + Duration::from_micros(1)), now), 1);
        assert_eq!(poll_timeout(Some(now + Duration::from_millis(50)), now), 50);
        assert_eq!(poll_timeout(None, now), 3_600_000);
        assert_eq!(
            poll_timeout(Some(now + Duration::from_secs(86_400)), now),
            3_600_000
        );
    }
}
