//! When a busy target's fetch waits for more free slots, so that one fetch takes several
//! rows instead of one or two.
//!
//! Why: MariaDB's CPU per job goes with statements and commits more than with rows
//! (docs/benchmarks.md#jobd: about 0.15 ms of its CPU per statement on the bench machine),
//! and under load every job's end frees one slot and kicks a fetch, so at 1x8 fetches
//! came back to back, each for the slots freed while the previous one ran (three rows
//! each). A target that still has more than a quarter of its slots busy has jobs that
//! will end soon, and each end kicks again: its fetch waits until three quarters of its
//! slots are free, or [`MAX_WAIT`] at most (its running jobs may be long ones). A target
//! with more free, in particular an idle one (a lone job: the latency path), is fetched
//! at once as before. Measured, A/B against the version before: 1x8 MariaDB CPU per job
//! -19 %, statements per job -32 %; 4x4 (one fetch already serves four targets) and 1x1
//! unchanged.

use std::time::Duration;

/// The longest a fetch waits for more free slots: bounds what a row inserted while its
/// target is busy with long jobs can lose. (4 ms instead took only 5 % fewer statements
/// per job at 1x8, for twice the wait.)
pub const MAX_WAIT: Duration = Duration::from_millis(2);

/// Whether a fetch for a target with `free` free slots (of `concurrency`; `fetch_limit`
/// rows at most per fetch, 0 = no cap) should wait for more: yes while fewer than three
/// quarters of what one fetch may take are free. A full target (`free` = 0) is not
/// fetched anyway.
pub fn wait_for_more(free: u64, concurrency: u64, fetch_limit: u64) -> bool {
    let most = if fetch_limit > 0 {
        concurrency.min(fetch_limit)
    } else {
        concurrency
    };
    free > 0 && free < most * 3 / 4
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_busy_target_waits_until_three_quarters_of_its_slots_are_free() {
        assert!(wait_for_more(1, 8, 100));
        assert!(wait_for_more(5, 8, 100));
        assert!(!wait_for_more(6, 8, 100));
        assert!(!wait_for_more(8, 8, 100));
        assert!(wait_for_more(2, 4, 0));
        assert!(!wait_for_more(3, 4, 0));
    }

    #[test]
    fn small_targets_and_small_fetch_limits_never_wait() {
        // One slot of one or two is already three quarters of them, rounded down.
        assert!(!wait_for_more(1, 1, 100));
        assert!(!wait_for_more(1, 2, 100));
        // A fetch limit of 2 makes one row as much as a fetch waits for.
        assert!(!wait_for_more(1, 8, 2));
        // ... and 0 is no limit.
        assert!(wait_for_more(1, 8, 0));
    }

    #[test]
    fn a_full_target_is_not_waited_for() {
        assert!(!wait_for_more(0, 8, 100));
    }
}
