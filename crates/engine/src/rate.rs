//! Rate limits: at most N jobs of a queue handed out per interval, as a token bucket.
//!
//! The bucket holds up to N tokens (a burst of N after a quiet spell) and refills at N per
//! interval; each hand-out takes one. It is pure arithmetic on the time the caller passes
//! in, so the engine's fake clock drives it in tests exactly as the broker's clock does live.
//!
//! The level is not logged, so an engine that was not handing out until now (a restart's
//! replay, a standby taking over, a leader that was unsure of its lease) cannot know how
//! many tokens were spent just before: such a bucket restarts **empty**, at the first time
//! the engine's clock gives it, and refills at the rate from there. A token bucket lets at
//! most N + N·t/P jobs out in any window of length t; what went out before the restart is
//! within that for the part of the window before it, and the empty bucket adds only
//! N·t'/P for the part t' after it, so the limit holds across the restart (a full bucket
//! added a whole burst of N on top).

use std::fmt;
use std::str::FromStr;

use crate::queue::QueueId;
use crate::timers::Timer;
use crate::{Engine, Millis};

const SECOND: Millis = 1000;
const MINUTE: Millis = 60 * SECOND;
const HOUR: Millis = 60 * MINUTE;

/// At most `count` jobs handed out per `per_ms` milliseconds: `"10/s"`, `"600/m"`,
/// `"36000/h"` in text.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RateLimit {
    /// Jobs per interval; never 0.
    pub count: u32,
    /// The interval: a second, a minute or an hour.
    pub per_ms: Millis,
}

/// Why a rate limit's text was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BadRateLimit(pub String);

impl fmt::Display for BadRateLimit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "rate limit {:?}: expected COUNT/s, COUNT/m or COUNT/h with COUNT from 1 to {}",
            self.0,
            u32::MAX
        )
    }
}

impl std::error::Error for BadRateLimit {}

impl RateLimit {
    /// A limit of `count` per `per_ms`, if both are usable (neither 0, the interval at
    /// most an hour, so the bucket's arithmetic cannot overflow).
    pub fn new(count: u32, per_ms: Millis) -> Option<RateLimit> {
        (count > 0 && per_ms > 0 && per_ms <= HOUR).then_some(RateLimit { count, per_ms })
    }
}

impl FromStr for RateLimit {
    type Err = BadRateLimit;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let bad = || BadRateLimit(text.to_string());
        let (count, unit) = text.trim().split_once('/').ok_or_else(bad)?;
        let per_ms = match unit.trim() {
            "s" | "sec" | "second" => SECOND,
            "m" | "min" | "minute" => MINUTE,
            "h" | "hour" => HOUR,
            _ => return Err(bad()),
        };
        let count = count.trim().parse().map_err(|_| bad())?;
        RateLimit::new(count, per_ms).ok_or_else(bad)
    }
}

impl fmt::Display for RateLimit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.per_ms {
            SECOND => write!(f, "{}/s", self.count),
            MINUTE => write!(f, "{}/m", self.count),
            HOUR => write!(f, "{}/h", self.count),
            ms => write!(f, "{}/{ms}ms", self.count),
        }
    }
}

/// A queue's token bucket. Levels are kept in units of `1 / per_ms` of a token, so that
/// any count per interval refills exactly, without rounding drift: a millisecond adds
/// `count` units and a token costs `per_ms`.
#[derive(Clone, Debug)]
pub(crate) struct RateBucket {
    pub(crate) limit: RateLimit,
    level: u64,
    /// When `level` was last brought up to date.
    at: Millis,
    /// When a [`crate::timers::Timer::RateToken`] is set for this queue, if one is.
    pub(crate) armed: Option<Millis>,
    /// Restarted empty and waiting for the clock ([`RateBucket::start`]): no tokens until
    /// then, and none accrue.
    waiting_for_clock: bool,
}

impl RateBucket {
    /// A full bucket: a queue given a limit may hand out a burst of `count` at once.
    pub(crate) fn new(limit: RateLimit) -> Self {
        RateBucket {
            limit,
            level: Self::capacity(limit),
            at: 0,
            armed: None,
            waiting_for_clock: false,
        }
    }

    /// Empties the bucket until [`RateBucket::start`] gives it the time to count from
    /// (what was handed out before a restart is not known; see the module's doc).
    pub(crate) fn restart(&mut self) {
        self.level = 0;
        self.waiting_for_clock = true;
    }

    /// Starts a restarted bucket's refill at `now`, empty (a bucket that is counting
    /// already is left alone).
    pub(crate) fn start(&mut self, now: Millis) {
        if self.waiting_for_clock {
            self.waiting_for_clock = false;
            self.level = 0;
            self.at = now;
        }
    }

    /// Whether the bucket restarted and has not been given the time yet.
    pub(crate) fn is_waiting_for_clock(&self) -> bool {
        self.waiting_for_clock
    }

    fn capacity(limit: RateLimit) -> u64 {
        limit.count as u64 * limit.per_ms
    }

    fn level_at(&self, now: Millis) -> u64 {
        if self.waiting_for_clock {
            return 0;
        }
        // A whole interval refills the bucket, so a longer gap cannot add more (and the
        // product stays far below u64's range).
        let elapsed = now.saturating_sub(self.at).min(self.limit.per_ms);
        (self.level + elapsed * self.limit.count as u64).min(Self::capacity(self.limit))
    }

    /// Whether a job may be handed out now.
    #[inline]
    pub(crate) fn has_token(&self, now: Millis) -> bool {
        self.level_at(now) >= self.limit.per_ms
    }

    /// Takes a token for a hand-out (none left is not an error: `reserve-job` names its
    /// job and is not refused for the rate, it only uses up what the bucket has).
    pub(crate) fn take(&mut self, now: Millis) {
        if self.waiting_for_clock {
            return;
        }
        self.level = self.level_at(now).saturating_sub(self.limit.per_ms);
        self.at = self.at.max(now);
    }

    /// The first time at or after `now` when a token is there.
    pub(crate) fn next_token_at(&self, now: Millis) -> Millis {
        let level = self.level_at(now);
        if level >= self.limit.per_ms {
            return now;
        }
        now + (self.limit.per_ms - level).div_ceil(self.limit.count as u64)
    }

    /// How many whole tokens are there now.
    pub(crate) fn tokens(&self, now: Millis) -> u64 {
        self.level_at(now) / self.limit.per_ms
    }
}

impl Engine {
    /// Empties a queue's bucket until the clock next ticks (see the module's doc): a timer
    /// due at once makes the first [`Engine::tick`] start it, so tokens accrue from the
    /// moment the engine is live, not from the start of the log or of a standby's wait.
    pub(crate) fn restart_rate(&mut self, q: QueueId) {
        let Some(bucket) = self.queue_mut(q).rate.as_mut() else {
            return;
        };
        if bucket.is_waiting_for_clock() {
            return;
        }
        let armed = bucket.armed.replace(0);
        bucket.restart();
        if let Some(at) = armed {
            self.timers.remove(at, Timer::RateToken(q));
        }
        self.timers.add(0, Timer::RateToken(q));
    }

    /// Empties every rate-limited queue's bucket: the engine starts handing out again
    /// after a time it did not (a standby that took over, a leader that was unsure of its
    /// lease), when another node may have handed out jobs meanwhile.
    pub(crate) fn restart_rates(&mut self) {
        let limited: Vec<QueueId> = self
            .order
            .iter()
            .copied()
            .filter(|&q| self.queue(q).rate.is_some())
            .collect();
        for q in limited {
            self.restart_rate(q);
        }
    }

    /// Lets jobs be handed out or not; turning it back on restarts the rate buckets.
    pub(crate) fn set_handing_out(&mut self, on: bool) {
        if on && !self.handing_out {
            self.restart_rates();
        }
        self.handing_out = on;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_parse_and_print_in_the_same_words() {
        for text in ["10/s", "600/m", "36000/h", "1/s"] {
            assert_eq!(text.parse::<RateLimit>().unwrap().to_string(), text);
        }
        assert_eq!(
            " 5 / min ".parse::<RateLimit>().unwrap(),
            RateLimit::new(5, MINUTE).unwrap()
        );
        for bad in [
            "",
            "10",
            "0/s",
            "-1/s",
            "10/d",
            "x/s",
            "10/",
            "99999999999/s",
        ] {
            assert!(bad.parse::<RateLimit>().is_err(), "{bad}");
        }
    }

    #[test]
    fn a_bucket_refills_exactly_for_counts_that_do_not_divide_the_interval() {
        let mut b = RateBucket::new(RateLimit::new(3, SECOND).unwrap());
        let t0 = 1_000_000;
        for _ in 0..3 {
            assert!(b.has_token(t0));
            b.take(t0);
        }
        assert!(!b.has_token(t0));
        assert_eq!(b.next_token_at(t0), t0 + 334);
        assert!(!b.has_token(t0 + 333));
        assert!(b.has_token(t0 + 334));
        assert_eq!(b.tokens(t0 + SECOND), 3);
        assert_eq!(
            b.tokens(t0 + 10 * SECOND),
            3,
            "a quiet spell adds one burst, no more"
        );
    }

    #[test]
    fn a_restarted_bucket_is_empty_until_started_then_refills_from_then() {
        let mut b = RateBucket::new(RateLimit::new(2, SECOND).unwrap());
        let t0 = 5_000_000;
        b.restart();
        assert_eq!(b.tokens(t0 + HOUR), 0, "no time counts before the start");
        b.take(t0);
        assert!(!b.has_token(t0));
        b.start(t0);
        assert!(!b.has_token(t0));
        assert_eq!(b.next_token_at(t0), t0 + 500);
        assert_eq!(b.tokens(t0 + SECOND), 2);
        b.start(t0 + SECOND);
        assert_eq!(b.tokens(t0 + SECOND), 2, "starting again changes nothing");
    }
}
