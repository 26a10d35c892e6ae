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

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
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

/// When to move: the narrow thread's CPU time over one window above `widen_at` of the
/// window moves every connection to the wide runtime; that plus the wide runtime's busy
/// time (tokio's: running tasks) below `narrow_at` for `calm_windows` windows in a row
/// moves them back.
#[derive(Clone, Copy, Debug)]
pub struct Policy {
    /// How often the monitor samples: the time a saturated thread runs before moving.
    pub window: Duration,
    /// The narrow thread's CPU time, as a share of a window, that moves connections wide.
    pub widen_at: f64,
    /// Both runtimes' busy time, as a share of one thread, under which they move back.
    pub narrow_at: f64,
    /// Windows in a row under `narrow_at` before moving back, so a lull does not bounce.
    pub calm_windows: u32,
}

impl Default for Policy {
    /// Measured in docs/performance.md ("Moderate load"): e2e at 20,000 jobs/s costs the
    /// narrow thread about 14 µs of CPU per job (0.28 of a core), and saturated e2e keeps
    /// it only 0.6 busy, because its 16 clients share the two cores with it; yet there the
    /// wide runtime has the higher throughput, so "saturated" starts well below 1.
    fn default() -> Policy {
        Policy {
            window: Duration::from_millis(100),
            widen_at: 0.45,
            narrow_at: 0.3,
            calm_windows: 10,
        }
    }
}

/// The two runtimes and which one connections belong on now. Shared by every accept loop
/// (through the [`crate::Gate`]) and every connection.
pub struct Placement {
    narrow: Handle,
    /// `None` without per-thread CPU clocks: the narrow runtime's busy time stands in.
    narrow_clock: Option<ThreadClock>,
    wide: Handle,
    now: AtomicU8,
    moves: AtomicU64,
    /// Lets the dozing monitor know the narrow thread woke up.
    doze: Arc<Doze>,
    /// Dropping it ends the narrow runtime's thread.
    _stop: oneshot::Sender<()>,
}

impl Placement {
    /// Starts the narrow runtime on a thread of its own; `wide` is the multi-threaded
    /// runtime the server already runs on. Connections start narrow.
    pub fn start(wide: Handle) -> std::io::Result<Arc<Placement>> {
        let doze = Arc::new(Doze::default());
        let (parks, woke) = (doze.clone(), doze.clone());
        // I/O and timers only: byte-stream connections neither spawn processes nor wait for
        // signals, and without those drivers each park of the thread does less.
        let narrow = tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .enable_time()
            .on_thread_park(move || parks.parking())
            .on_thread_unpark(move || woke.woke())
            .build()?;
        let handle = narrow.handle().clone();
        let (stop, stopped) = oneshot::channel::<()>();
        let (tell_clock, clock) = std::sync::mpsc::channel();
        std::thread::Builder::new()
            .name("jobyard-narrow".into())
            .spawn(move || {
                let _ = tell_clock.send(ThreadClock::of_this_thread());
                let _ = narrow.block_on(stopped);
            })?;
        Ok(Arc::new(Placement {
            narrow: handle,
            narrow_clock: clock.recv().ok().flatten(),
            wide,
            now: AtomicU8::new(Where::Narrow as u8),
            moves: AtomicU64::new(0),
            doze,
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

    /// Starts the task that samples both runtimes' busy time every `policy.window` and
    /// moves connections by `policy`; it ends when the placement is dropped. It runs on the
    /// narrow thread, which is awake anyway while there is traffic, so a sample rarely
    /// costs a wake-up of its own (a thread of its own cost ~70 µs of CPU per wake here).
    pub fn watch_load(self: &Arc<Self>, policy: Policy) {
        self.narrow.spawn(monitor(Arc::downgrade(self), policy));
    }
}

/// Share of a window under which both runtimes count as idle.
const IDLE_SHARE: f64 = 0.005;

/// How the monitor sleeps while the server is idle: until the narrow thread next wakes
/// from a real sleep (its runtime's park and unpark hooks), so an idle server does not wake
/// ten times a second.
#[derive(Default)]
struct Doze {
    dozing: AtomicBool,
    /// Set when the thread parks while the monitor dozes; the runtime also calls the unpark
    /// hook after polling its driver without sleeping, which must not end the doze.
    armed: AtomicBool,
    wake: tokio::sync::Notify,
}

impl Doze {
    /// Called by the narrow runtime before its thread sleeps: one load while busy.
    fn parking(&self) {
        if self.dozing.load(Ordering::Relaxed) {
            self.armed.store(true, Ordering::Relaxed);
        }
    }

    /// Called by the narrow runtime each time its thread wakes: one load while busy.
    fn woke(&self) {
        if self.armed.load(Ordering::Relaxed) {
            self.armed.store(false, Ordering::Relaxed);
            self.dozing.store(false, Ordering::Relaxed);
            self.wake.notify_one();
        }
    }

    /// No timer backs this up: arming one unparks the driver at once, which would end the
    /// doze. A burst that begins without the thread sleeping in between is caught at its
    /// first pause (a saturated narrow thread still sleeps now and then, waiting for its
    /// clients).
    async fn until_woken(&self) {
        let woken = self.wake.notified();
        tokio::pin!(woken);
        woken.as_mut().enable();
        self.dozing.store(true, Ordering::Relaxed);
        woken.await;
    }
}

/// The CPU time one thread has used (user and kernel together), readable from any thread
/// of the process. Read through the thread's CPU-time clock: one `clock_gettime`, where
/// reading `/proc/self/task/TID/schedstat` cost an open, a read and a close per sample.
struct ThreadClock {
    id: libc::clockid_t,
}

impl ThreadClock {
    /// The clock of the calling thread, if the system has per-thread CPU clocks.
    fn of_this_thread() -> Option<ThreadClock> {
        let mut id: libc::clockid_t = 0;
        // SAFETY: pthread_self() is the calling thread, alive; `id` is a valid out-pointer.
        if unsafe { libc::pthread_getcpuclockid(libc::pthread_self(), &mut id) } != 0 {
            return None;
        }
        let clock = ThreadClock { id };
        clock.used().map(|_| clock)
    }

    /// None once the thread has ended (the clock is then invalid).
    fn used(&self) -> Option<Duration> {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: `ts` is a valid out-pointer; an invalid clock id only yields an error.
        if unsafe { libc::clock_gettime(self.id, &mut ts) } != 0 {
            return None;
        }
        Some(Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32))
    }
}

impl Placement {
    /// The narrow thread's CPU time so far (or, without /proc, its runtime's busy time).
    fn narrow_used(&self) -> Duration {
        self.narrow_clock
            .as_ref()
            .and_then(ThreadClock::used)
            .unwrap_or_else(|| busy(&self.narrow))
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

async fn monitor(placement: Weak<Placement>, policy: Policy) {
    let mut calm = 0;
    let mut idle = 0;
    let mut last = None;
    loop {
        tokio::time::sleep(policy.window).await;
        let Some(p) = placement.upgrade() else { return };
        let sample = (Instant::now(), p.narrow_used(), busy(&p.wide));
        let Some((at, narrow, wide)) = last.replace(sample) else {
            continue;
        };
        let window = sample.0.duration_since(at).as_secs_f64();
        let narrow_share = (sample.1.saturating_sub(narrow)).as_secs_f64() / window;
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
        let doze = p.doze.clone();
        let narrow_idle = p.current() == Where::Narrow && all_share < IDLE_SHARE;
        drop(p);
        idle = if narrow_idle { idle + 1 } else { 0 };
        if idle >= policy.calm_windows {
            doze.until_woken().await;
            last = None;
            idle = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn quick() -> Policy {
        Policy {
            window: Duration::from_millis(10),
            // Low, so a spinning thread crosses it even on a machine shared with others.
            widen_at: 0.1,
            narrow_at: 0.05,
            calm_windows: 3,
        }
    }

    /// Polls for up to 20 s (the machine may be busy) until connections belong at `place`.
    fn settles_at(p: &Placement, place: Where) -> bool {
        let until = Instant::now() + Duration::from_secs(20);
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
        p.watch_load(quick());
        assert_eq!(p.current(), Where::Narrow, "connections start narrow");
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(p.current(), Where::Narrow, "an idle thread stays narrow");
        let until = Instant::now() + Duration::from_secs(20);
        while !p.doze.dozing.load(Ordering::Relaxed) && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(5));
        }
        assert!(
            p.doze.dozing.load(Ordering::Relaxed),
            "an idle monitor sleeps until the narrow thread wakes"
        );
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let spinning = stop.clone();
        // Uses all the CPU the narrow thread gets, yielding now and then as a busy
        // connection does (the monitor runs on the same thread).
        p.handle(Where::Narrow).spawn(async move {
            while !spinning.load(Ordering::Relaxed) {
                let started = Instant::now();
                while started.elapsed() < Duration::from_millis(1) {
                    std::hint::spin_loop();
                }
                tokio::task::yield_now().await;
            }
        });
        assert!(
            settles_at(&p, Where::Wide),
            "a busy narrow thread goes wide"
        );
        stop.store(true, Ordering::Relaxed);
        assert!(settles_at(&p, Where::Narrow), "back once nothing runs");
    }
}
