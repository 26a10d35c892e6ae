//! What a schedule does at a given time: fire a tick, pass over a missed one, or wait.

use crate::{Millis, When};

/// What to do about a tick that passed while the server was not running.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Missed {
    /// Nothing: the schedule goes on from its next tick.
    #[default]
    Skip,
    /// Enqueue one job for the latest missed tick, however many were missed.
    CatchUp,
}

/// The decision [`due`] takes for one schedule at one time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Due {
    /// The tick to enqueue a job for now, and record as the schedule's last.
    pub fire: Option<Millis>,
    /// When to ask again: the next tick after now (`None`: never again).
    pub next: Option<Millis>,
}

/// Decides what a schedule does at `now`, given its last tick (`last_tick`: every tick at
/// or before it is done, fired or passed over) and when the server started (`started_at`).
///
/// Only the latest tick at or before `now` counts: ticks the server did not get to while it
/// ran (a stalled process) are one late tick, not a burst. That tick fires if it came due
/// while the server ran; one that passed while the server was down fires only when the
/// schedule catches up ([`Missed::CatchUp`]) and is otherwise passed over. It fires once:
/// recording it as the last tick, in the same log record as its job, is the caller's part.
pub fn due(when: &When, last_tick: Millis, started_at: Millis, now: Millis, missed: Missed) -> Due {
    let next = when.next_after(now);
    let fire = when
        .latest_at_or_before(now)
        .filter(|&tick| tick > last_tick)
        .filter(|&tick| tick >= started_at || missed == Missed::CatchUp);
    Due { fire, next }
}
