//! Where the time of one job goes, from the fetch that took its row to its stored `done`,
//! logged at debug level (`log_level_console = debug`) as one `jobd: job timing` event per
//! job. It exists to explain the poke → `done` latency (docs/benchmarks.md#jobd): the bench
//! reads these events with `--breakdown`. Taking the instants costs a few vDSO clock reads
//! per job; the event itself is skipped unless debug logging is on.

use std::time::Instant;

/// The fetch that took a row: when it began and how long it took (`BEGIN` … `COMMIT`).
#[derive(Debug, Clone, Copy)]
pub struct Fetched {
    /// When the fetch began.
    pub began: Instant,
    /// When its transaction was committed (the row `running`).
    pub committed: Instant,
}

/// The instants of one job, filled in as it goes.
#[derive(Debug)]
pub struct JobClock {
    fetched: Option<Fetched>,
    picked: Instant,
    launched: Option<Instant>,
    ended: Option<Instant>,
}

fn micros(from: Instant, to: Instant) -> u64 {
    to.saturating_duration_since(from).as_micros() as u64
}

impl JobClock {
    /// Starts the clock when the job's task picks the row up (`fetched` is `None` for a
    /// run-manual row, which no fetch took).
    pub fn new(fetched: Option<Fetched>) -> JobClock {
        JobClock {
            fetched,
            picked: Instant::now(),
            launched: None,
            ended: None,
        }
    }

    /// The launcher has been started.
    pub fn launched(&mut self) {
        self.launched = Some(Instant::now());
    }

    /// The launcher has exited and its pipes are closed (or the start failed).
    pub fn ended(&mut self) {
        self.ended = Some(Instant::now());
    }

    /// The row is `done` in the table: logs the breakdown.
    pub fn stored(&self, id: u64) {
        if !tracing::enabled!(tracing::Level::DEBUG) {
            return;
        }
        let now = Instant::now();
        let launched = self.launched.unwrap_or(self.picked);
        let ended = self.ended.unwrap_or(launched);
        let (fetch_us, queued_us, total_us) = match self.fetched {
            Some(f) => (
                micros(f.began, f.committed),
                micros(f.committed, self.picked),
                micros(f.began, now),
            ),
            None => (0, 0, micros(self.picked, now)),
        };
        tracing::debug!(
            id,
            fetch_us,
            queued_us,
            spawn_us = micros(self.picked, launched),
            run_us = micros(launched, ended),
            write_us = micros(ended, now),
            total_us,
            "jobd: job timing"
        );
    }
}
