//! Rate limits: at most N jobs of a queue handed out per interval, as a token bucket.
//!
//! The bucket holds up to N tokens (a burst of N after a quiet spell) and refills at N per
//! interval; each hand-out takes one. It is pure arithmetic on the time the caller passes
//! in, so the engine's fake clock drives it in tests exactly as the broker's clock does live.

use std::fmt;
use std::str::FromStr;

use crate::Millis;

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
}

impl RateBucket {
    /// A full bucket: a queue given a limit may hand out a burst of `count` at once.
    pub(crate) fn new(limit: RateLimit) -> Self {
        RateBucket {
            limit,
            level: Self::capacity(limit),
            at: 0,
            armed: None,
        }
    }

    fn capacity(limit: RateLimit) -> u64 {
        limit.count as u64 * limit.per_ms
    }

    fn level_at(&self, now: Millis) -> u64 {
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
}
