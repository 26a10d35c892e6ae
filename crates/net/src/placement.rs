//! The adaptive thread model: which runtime serves the byte-stream connections.
//!
//! One thread costs the least CPU per job while it has idle time (a job handed from a
//! producer to a blocked consumer never crosses threads), the work-stealing runtime gives
//! the most throughput once one thread is saturated (docs/performance.md, "Moderate load").
//! So connections start on a current-thread runtime of their own ("narrow"); a monitor
//! thread samples how busy it is and moves every connection to the multi-threaded runtime
//! ("wide") when it saturates, and back when the load has fallen for a while.
//!
//! A connection moves itself, between two turns of its loop (its replies written, nothing
//! half-read that it cannot carry): its socket is deregistered from one reactor and
//! registered with the other, and its session, buffers and mailbox go with it. A
//! connection that is idle moves when it next wakes.

use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use tokio::runtime::Handle;
use tokio::sync::oneshot;

/// Where connections are served.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Where {
    /// The one current-thread runtime: cheapest per job while it keeps up.
    Narrow,
    /// The work-stealing multi-threaded runtime: most throughput when saturated.
    Wide,
}

/// When to move: the share of one window the narrow thread was not parked above
/// `widen_at` moves every connection to the wide runtime; that share plus the wide
/// runtime's busy time (tokio's: running tasks) below `narrow_at` of one thread for
/// `calm_windows` windows in a row moves them back.
#[derive(Clone, Copy, Debug)]
pub struct Policy {
    pub window: Duration,
    pub widen_at: f64,
    pub narrow_at: f64,
    pub calm_windows: u32,
}

impl Default for Policy {
    /// Measured in docs/performance.md ("Moderate load"): e2e at 20,000 jobs/s keeps the
    /// narrow thread about 27 % unparked, saturated e2e about 60 %; neither the runtimes'
    /// busy time nor the thread's CPU ever nears 100 % there, because the clients share
    /// the cores, so "saturated" has to start well below it.
    fn default() -> Policy {
        Policy {
            window: Duration::from_millis(100),
            widen_at: 0.5,
            narrow_at: 0.3,
            calm_windows: 10,
        }
    }
}

/// The two runtimes and which one connections belong on now. Shared by every accept loop
/// (through the [`crate::Gate`]) and every connection.
pub struct Placement {
    narrow: Handle,
    narrow_clock: Arc<ParkClock>,
    wide: Handle,
    now: AtomicU8,
    moves: AtomicU64,
    /// Dropping it ends the narrow runtime's thread.
    _stop: oneshot::Sender<()>,
}

impl Placement {
    /// Starts the narrow runtime on a thread of its own; `wide` is the multi-threaded
    /// runtime the server already runs on. Connections start narrow.
    pub fn start(wide: Handle) -> std::io::Result<Arc<Placement>> {
        let clock = Arc::new(ParkClock::new());
        let (parks, unparks) = (clock.clone(), clock.clone());
        let narrow = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .on_thread_park(move || parks.park())
            .on_thread_unpark(move || unparks.unpark())
            .build()?;
        let handle = narrow.handle().clone();
        let (stop, stopped) = oneshot::channel::<()>();
        std::thread::Builder::new()
            .name("jobyard-narrow".into())
            .spawn(move || {
                let _ = narrow.block_on(stopped);
            })?;
        Ok(Arc::new(Placement {
            narrow: handle,
            narrow_clock: clock,
            wide,
            now: AtomicU8::new(Where::Narrow as u8),
            moves: AtomicU64::new(0),
            _stop: stop,
        }))
    }

    /// Where connections belong now.
    pub fn current(&self) -> Where {
        match self.now.load(Ordering::Relaxed) {
            0 => Where::Narrow,
            _ => Where::Wide,
        }
    }

    /// The runtime of `place`, to spawn a connection onto.
    pub fn handle(&self, place: Where) -> &Handle {
        match place {
            Where::Narrow => &self.narrow,
            Where::Wide => &self.wide,
        }
    }

    /// Sends every connection to `place`; each moves at its next turn. The load monitor
    /// decides this; tests call it to move connections at will.
    pub fn move_all(&self, place: Where) {
        self.now.store(place as u8, Ordering::Relaxed);
    }

    /// How many times a connection moved between runtimes, for tests and the log.
    pub fn moves(&self) -> u64 {
        self.moves.load(Ordering::Relaxed)
    }

    pub(crate) fn count_move(&self) {
        self.moves.fetch_add(1, Ordering::Relaxed);
    }

    /// Starts the thread that samples both runtimes' busy time every `policy.window` and
    /// moves connections by `policy`; it ends when the placement is dropped.
    pub fn watch_load(self: &Arc<Self>, policy: Policy) -> std::io::Result<()> {
        let placement = Arc::downgrade(self);
        std::thread::Builder::new()
            .name("jobyard-placer".into())
            .spawn(move || monitor(placement, policy))?;
        Ok(())
    }
}

/// How long the narrow thread has been parked (waiting for events with nothing to run):
/// what is left of a window is the time it was serving, or ready to and not scheduled.
struct ParkClock {
    base: Instant,
    parked_ns: AtomicU64,
    /// Nanoseconds since `base` when it parked; 0 while it runs.
    parked_at: AtomicU64,
}

impl ParkClock {
    fn new() -> ParkClock {
        ParkClock {
            base: Instant::now(),
            parked_ns: AtomicU64::new(0),
            parked_at: AtomicU64::new(0),
        }
    }

    fn now(&self) -> u64 {
        self.base.elapsed().as_nanos() as u64 + 1
    }

    fn park(&self) {
        self.parked_at.store(self.now(), Ordering::Relaxed);
    }

    fn unpark(&self) {
        let at = self.parked_at.swap(0, Ordering::Relaxed);
        if at != 0 {
            self.parked_ns
                .fetch_add(self.now().saturating_sub(at), Ordering::Relaxed);
        }
    }

    /// Time parked so far, counting a park still going on.
    fn parked(&self) -> Duration {
        let at = self.parked_at.load(Ordering::Relaxed);
        let current = if at == 0 { 0 } else { self.now().saturating_sub(at) };
        Duration::from_nanos(self.parked_ns.load(Ordering::Relaxed) + current)
    }
}

/// Total time the runtime's workers spent running tasks (syscalls they make included,
/// waiting for events not).
fn busy(handle: &Handle) -> Duration {
    let metrics = handle.metrics();
    (0..metrics.num_workers())
        .map(|w| metrics.worker_total_busy_duration(w))
        .sum()
}

fn monitor(placement: Weak<Placement>, policy: Policy) {
    let mut calm = 0;
    let mut last = None;
    loop {
        std::thread::sleep(policy.window);
        let Some(p) = placement.upgrade() else { return };
        let sample = (Instant::now(), p.narrow_clock.parked(), busy(&p.wide));
        let Some((at, parked, wide)) = last.replace(sample) else {
            continue;
        };
        let window = sample.0.duration_since(at).as_secs_f64();
        let parked_share = (sample.1.saturating_sub(parked)).as_secs_f64() / window;
        let narrow_share = (1.0 - parked_share).max(0.0);
        let all_share = narrow_share + (sample.2.saturating_sub(wide)).as_secs_f64() / window;
        tracing::trace!(narrow = narrow_share, all = all_share, "busy");
        match p.current() {
            Where::Narrow if narrow_share > policy.widen_at => {
                tracing::debug!(busy = narrow_share, "one thread saturated: going wide");
                p.move_all(Where::Wide);
                calm = 0;
            }
            Where::Wide if all_share < policy.narrow_at => {
                calm += 1;
                if calm >= policy.calm_windows {
                    tracing::debug!(busy = all_share, "load fell: back to one thread");
                    p.move_all(Where::Narrow);
                }
            }
            Where::Wide => calm = 0,
            Where::Narrow => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn quick() -> Policy {
        Policy {
            window: Duration::from_millis(10),
            widen_at: 0.5,
            narrow_at: 0.3,
            calm_windows: 3,
        }
    }

    /// Polls for up to 10 s (the machine may be busy) until connections belong at `place`.
    fn settles_at(p: &Placement, place: Where) -> bool {
        let until = Instant::now() + Duration::from_secs(10);
        while Instant::now() < until {
            if p.current() == place {
                return true;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        false
    }

    #[test]
    fn a_saturated_narrow_thread_goes_wide_and_comes_back_when_idle() {
        let wide = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .build()
            .unwrap();
        let p = Placement::start(wide.handle().clone()).unwrap();
        p.watch_load(quick()).unwrap();
        assert_eq!(p.current(), Where::Narrow, "connections start narrow");
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(p.current(), Where::Narrow, "an idle thread stays narrow");
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let spinning = stop.clone();
        // Never yields: the narrow thread is never parked while it runs.
        p.handle(Where::Narrow).spawn(async move {
            while !spinning.load(Ordering::Relaxed) {
                std::hint::spin_loop();
            }
        });
        assert!(settles_at(&p, Where::Wide), "a busy narrow thread goes wide");
        stop.store(true, Ordering::Relaxed);
        assert!(settles_at(&p, Where::Narrow), "back once nothing runs");
    }
}
