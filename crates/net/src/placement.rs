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
    /// `None` without /proc: the narrow runtime's busy time stands in.
    narrow_clock: Option<ThreadClock>,
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
        let narrow = tokio::runtime::Builder::new_current_thread()
            .enable_all()
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

/// The CPU time one thread has used, from `/proc/self/task/TID/schedstat` (nanoseconds,
/// user and kernel together), readable from any thread of the process.
struct ThreadClock {
    path: std::path::PathBuf,
}

impl ThreadClock {
    /// The clock of the calling thread, if /proc is there.
    fn of_this_thread() -> Option<ThreadClock> {
        let me = std::fs::read_link("/proc/thread-self").ok()?;
        let tid = me.file_name()?.to_str()?.to_owned();
        let clock = ThreadClock {
            path: format!("/proc/self/task/{tid}/schedstat").into(),
        };
        clock.used().map(|_| clock)
    }

    fn used(&self) -> Option<Duration> {
        let text = std::fs::read_to_string(&self.path).ok()?;
        let ns = text.split_whitespace().next()?.parse().ok()?;
        Some(Duration::from_nanos(ns))
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

fn monitor(placement: Weak<Placement>, policy: Policy) {
    let mut calm = 0;
    let mut last = None;
    loop {
        std::thread::sleep(policy.window);
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
        p.watch_load(quick()).unwrap();
        assert_eq!(p.current(), Where::Narrow, "connections start narrow");
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(p.current(), Where::Narrow, "an idle thread stays narrow");
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let spinning = stop.clone();
        // Never yields: the narrow thread uses all the CPU it gets while it runs.
        p.handle(Where::Narrow).spawn(async move {
            while !spinning.load(Ordering::Relaxed) {
                std::hint::spin_loop();
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
