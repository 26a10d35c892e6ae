//! The server's own short history of its queues, for the dashboard's charts without an
//! external Prometheus: per queue and overall, jobs put, completed and failed per second,
//! depth by state, and lease-to-complete percentiles.
//!
//! One task ([`sampler`]) reads the counters the engine and the metrics registry keep anyway,
//! once a second; nothing is done per job. Each series is two fixed rings of 40-byte
//! [`Point`]s: one point a second for the last [`FINE_POINTS`] seconds (10 minutes) and one
//! per [`COARSE_STEP_S`] seconds for the last [`COARSE_POINTS`] of those (2 hours), about
//! 53 KB per queue whatever the load. At most [`MAX_QUEUES`] queues get series of their own
//! (later ones count in the overall series only); a queue the engine no longer has is
//! forgotten once it has been gone for [`FORGET_AFTER_S`] seconds. Kept in memory only: a
//! restart starts the history afresh.

mod percentile;
mod point;
mod ring;
pub mod sampler;

use std::collections::HashMap;
use std::sync::Mutex;

use bytes::Bytes;

pub use percentile::{quantile_us, BucketCounts, BUCKETS};
use point::Interval;
pub use point::{Point, QueueReading, NO_LATENCY};
use ring::Ring;

/// Seconds of one-second points kept.
pub const FINE_POINTS: usize = 600;
/// Seconds a coarse point covers.
pub const COARSE_STEP_S: u64 = 10;
/// Coarse points kept: two hours.
pub const COARSE_POINTS: usize = 720;
/// Queues with series of their own.
pub const MAX_QUEUES: usize = 256;
/// A queue gone from the engine this long loses its series.
pub const FORGET_AFTER_S: u64 = 600;

/// One series: its rings and what its next points are computed from.
#[derive(Debug)]
struct Series {
    fine: Ring<Point>,
    coarse: Ring<Point>,
    /// The coarse point being gathered.
    gathering: Option<Interval>,
    /// The last reading (per-queue series only).
    last: Option<QueueReading>,
    /// Sample time (s) the queue was last seen in the engine.
    seen_s: u64,
}

impl Series {
    fn new(now_s: u64) -> Series {
        Series {
            fine: Ring::new(FINE_POINTS),
            coarse: Ring::new(COARSE_POINTS),
            gathering: None,
            last: None,
            seen_s: now_s,
        }
    }

    /// Adds one interval: a fine point, and a coarse one when the interval ends a
    /// [`COARSE_STEP_S`] stretch of the clock (`closes_coarse`).
    fn push(&mut self, interval: &Interval, closes_coarse: bool) {
        self.fine.push(interval.point());
        let gathering = match &mut self.gathering {
            Some(g) => {
                g.extend(interval);
                g
            }
            none => none.insert(*interval),
        };
        if closes_coarse {
            self.coarse.push(gathering.point());
            self.gathering = None;
        }
    }

    /// Bytes this series keeps, whatever the load.
    fn bytes(&self) -> usize {
        self.fine.bytes() + self.coarse.bytes() + std::mem::size_of::<Series>()
    }
}

/// A stretch of one series, oldest point first.
#[derive(Clone, Debug, PartialEq)]
pub struct SeriesView {
    /// Seconds between points.
    pub step_s: u64,
    /// Unix time (s) of the newest point; the one before it is `step_s` earlier, and so on.
    pub end_s: u64,
    pub points: Vec<Point>,
}

#[derive(Debug, Default)]
struct State {
    overall: Option<Series>,
    queues: HashMap<Bytes, Series>,
    /// Unix time (s) of the newest sample and of the newest coarse point.
    last_s: u64,
    last_coarse_s: u64,
}

/// Every series. Written by the sampler once a second, read by the admin API.
#[derive(Debug, Default)]
pub struct History {
    state: Mutex<State>,
}

impl History {
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Records one sample taken at unix time `now_s`, `ms` after the previous one: the
    /// reading of every queue the engine has now.
    pub fn record(&self, readings: Vec<QueueReading>, now_s: u64, ms: u64) {
        let mut state = self.state();
        let state = &mut *state;
        // A late sample may skip a multiple of the step: what counts is crossing one.
        let closes_coarse =
            state.last_s != 0 && now_s / COARSE_STEP_S != state.last_s / COARSE_STEP_S;
        let mut overall = Interval {
            ms,
            ..Interval::default()
        };
        for reading in readings {
            let known = state.queues.len();
            let series = match state.queues.get_mut(&reading.name) {
                Some(s) => Some(s),
                None if known < MAX_QUEUES => Some(
                    state
                        .queues
                        .entry(reading.name.clone())
                        .or_insert_with(|| Series::new(now_s)),
                ),
                None => None,
            };
            let Some(series) = series else {
                // Past the cap: the queue counts in the overall series, from zero each time
                // (it has no last reading), so only its depth is right; documented.
                overall.add_queue(&Interval {
                    put: 0,
                    completed: 0,
                    failed: 0,
                    latency: [0; BUCKETS],
                    ..Interval::between(&reading, None, ms)
                });
                continue;
            };
            let interval = Interval::between(&reading, series.last.as_ref(), ms);
            overall.add_queue(&interval);
            series.push(&interval, closes_coarse);
            series.seen_s = now_s;
            series.last = Some(reading);
        }
        // Queues the engine no longer has: a zero point (nothing queued, nothing done),
        // and gone for good after a while.
        for series in state.queues.values_mut() {
            if series.seen_s != now_s {
                // A queue made again counts from zero; its histogram lives on (the
                // registry keeps it a while), so the latency part of the reading stays.
                if let Some(last) = &mut series.last {
                    (last.put, last.completed, last.failed) = (0, 0, 0);
                }
                series.push(
                    &Interval {
                        ms,
                        ..Interval::default()
                    },
                    closes_coarse,
                );
            }
        }
        state
            .queues
            .retain(|_, s| now_s.saturating_sub(s.seen_s) < FORGET_AFTER_S);
        state
            .overall
            .get_or_insert_with(|| Series::new(now_s))
            .push(&overall, closes_coarse);
        state.last_s = now_s;
        if closes_coarse {
            state.last_coarse_s = now_s;
        }
    }

    /// The last `window_s` seconds of a queue's series (`None`: the overall one), one point
    /// a second when the fine ring covers the window, else one per [`COARSE_STEP_S`].
    /// `None` when there is no such series.
    pub fn view(&self, queue: Option<&[u8]>, window_s: u64) -> Option<SeriesView> {
        let state = self.state();
        let series = match queue {
            Some(name) => state.queues.get(name)?,
            None => state.overall.as_ref()?,
        };
        let fine = window_s <= FINE_POINTS as u64;
        let (ring, step_s, end_s) = if fine {
            (&series.fine, 1, state.last_s)
        } else {
            (&series.coarse, COARSE_STEP_S, state.last_coarse_s)
        };
        Some(SeriesView {
            step_s,
            end_s,
            points: ring.newest(window_s.div_ceil(step_s) as usize),
        })
    }

    /// The queues with series, sorted by name.
    pub fn queues(&self) -> Vec<Bytes> {
        let mut names: Vec<Bytes> = self.state().queues.keys().cloned().collect();
        names.sort();
        names
    }

    /// Bytes the series take now (the overall one included).
    pub fn bytes(&self) -> usize {
        let state = self.state();
        state.queues.values().map(Series::bytes).sum::<usize>()
            + state.overall.as_ref().map_or(0, Series::bytes)
    }
}

#[cfg(test)]
mod tests;
