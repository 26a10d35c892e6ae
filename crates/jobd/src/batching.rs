//! When a busy target's fetch waits for more free slots, so that one fetch takes several
//! rows instead of one.
//!
//! Why: MariaDB's CPU per job is mostly per statement and per commit, not per row
//! (docs/benchmarks.md#jobd: about 0.15 ms of its CPU per statement on the bench machine,
//! and at 1x8 a fetch — `BEGIN`, `SELECT`, `UPDATE`s, `COMMIT` — took under three rows).
//! Under load every job's end frees one slot and kicks a fetch, so fetches came back to
//! back, each for the one or two slots freed while the previous one ran. A target that
//! still has at least half its slots busy has jobs that will end soon, and each end kicks
//! again: its fetch waits until half its slots are free, or [`MAX_WAIT`] at most (its
//! running jobs may be long ones). A target with half its slots free or more, in
//! particular an idle one (a lone job: the latency path), is fetched at once as before.

use std::time::Duration;

/// The longest a fetch waits for more free slots: bounds what a row inserted while its
/// target is busy with long jobs can lose.
pub const MAX_WAIT: Duration = Duration::from_millis(2);

/// Whether a fetch for a target with `free` free slots (of `concurrency`; `fetch_limit`
/// rows at most per fetch, 0 = no cap) should wait for more: yes while fewer than half of
/// what one fetch may take are free. A full target (`free` = 0) is not fetched anyway.
pub fn wait_for_more(free: u64, concurrency: u64, fetch_limit: u64) -> bool {
    let most = if fetch_limit > 0 {
        concurrency.min(fetch_limit)
    } else {
        concurrency
    };
    free > 0 && free < most / 2
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_busy_target_waits_until_half_its_slots_are_free() {
        assert!(wait_for_more(1, 8, 100));
        assert!(wait_for_more(3, 8, 100));
        assert!(!wait_for_more(4, 8, 100));
        assert!(!wait_for_more(8, 8, 100));
        assert!(wait_for_more(1, 4, 0));
        assert!(!wait_for_more(2, 4, 0));
    }

    #[test]
    fn small_targets_and_small_fetch_limits_never_wait() {
        // One or two slots: a fetch cannot take fewer than half of them.
        assert!(!wait_for_more(1, 1, 100));
        assert!(!wait_for_more(1, 2, 100));
        assert!(!wait_for_more(1, 3, 100));
        // A fetch limit of 2 makes one row half of a fetch.
        assert!(!wait_for_more(1, 8, 2));
    }

    #[test]
    fn a_full_target_is_not_waited_for() {
        assert!(!wait_for_more(0, 8, 100));
    }
}
