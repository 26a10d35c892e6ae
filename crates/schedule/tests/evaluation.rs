//! A schedule's ticks under a fake clock: every time is a number the test chose.

use jiff::civil::date;
use jiff::tz::TimeZone;
use jobyard_schedule::{due, Millis, Missed, When};

const SEC: Millis = 1_000;
const HOUR: Millis = 3_600_000;

/// Milliseconds of a wall time in Berlin (the earlier one, where the hour repeats).
fn berlin(y: i16, mo: i8, d: i8, h: i8, mi: i8) -> Millis {
    let zone = TimeZone::get("Europe/Berlin").unwrap();
    let zoned = date(y, mo, d).at(h, mi, 0, 0).to_zoned(zone).unwrap();
    zoned.timestamp().as_millisecond() as Millis
}

/// Every tick in `(from, to]`, in order.
fn ticks(when: &When, from: Millis, to: Millis) -> Vec<Millis> {
    let mut out = Vec::new();
    let mut t = from;
    while let Some(next) = when.next_after(t).filter(|&n| n <= to) {
        out.push(next);
        t = next;
    }
    out
}

#[test]
fn seconds_are_optional_in_cron_expressions() {
    let six = When::cron("0 0 3 * * *", "Europe/Berlin").unwrap();
    let five = When::cron("0 3 * * *", "Europe/Berlin").unwrap();
    let from = berlin(2026, 1, 1, 0, 0);
    assert_eq!(six.next_after(from), Some(berlin(2026, 1, 1, 3, 0)));
    assert_eq!(five.next_after(from), six.next_after(from));
    assert!(When::cron("0 3 * *", "Europe/Berlin").is_err());
    assert!(When::cron("0 3 * * *", "Mars/Olympus").is_err());
}

#[test]
fn a_daily_tick_in_the_spring_gap_fires_once_right_after_it() {
    // 2026-03-29: Berlin's clocks go from 02:00 straight to 03:00.
    let when = When::cron("30 2 * * *", "Europe/Berlin").unwrap();
    let got = ticks(&when, berlin(2026, 3, 28, 0, 0), berlin(2026, 3, 31, 0, 0));
    assert_eq!(
        got,
        vec![
            berlin(2026, 3, 28, 2, 30),
            berlin(2026, 3, 29, 3, 0),
            berlin(2026, 3, 30, 2, 30),
        ]
    );
}

#[test]
fn a_daily_tick_in_the_repeated_autumn_hour_fires_once() {
    // 2026-10-25: Berlin's clocks go from 03:00 back to 02:00, so 02:30 happens twice.
    let when = When::cron("30 2 * * *", "Europe/Berlin").unwrap();
    let got = ticks(
        &when,
        berlin(2026, 10, 24, 0, 0),
        berlin(2026, 10, 27, 0, 0),
    );
    assert_eq!(
        got,
        vec![
            berlin(2026, 10, 24, 2, 30),
            berlin(2026, 10, 25, 2, 30),
            berlin(2026, 10, 26, 2, 30),
        ]
    );
}

#[test]
fn an_hourly_tick_follows_real_time_across_both_changes() {
    let when = When::cron("0 * * * *", "Europe/Berlin").unwrap();
    // Spring: the day has 23 hours, so 23 ticks, none doubled.
    let spring = ticks(&when, berlin(2026, 3, 29, 0, 0), berlin(2026, 3, 30, 0, 0));
    assert_eq!(spring.len(), 23);
    // Autumn: 25 hours, each real hour once.
    let autumn = ticks(
        &when,
        berlin(2026, 10, 25, 0, 0),
        berlin(2026, 10, 26, 0, 0),
    );
    assert_eq!(autumn.len(), 25);
    for pair in spring.windows(2).chain(autumn.windows(2)) {
        assert_eq!(pair[1] - pair[0], HOUR);
    }
}

#[test]
fn february_29th_ticks_only_in_leap_years() {
    let when = When::cron("0 0 12 29 2 *", "UTC").unwrap();
    let from = berlin(2026, 1, 1, 0, 0);
    let utc_noon = |y| {
        let zoned = date(y, 2, 29)
            .at(12, 0, 0, 0)
            .to_zoned(TimeZone::UTC)
            .unwrap();
        zoned.timestamp().as_millisecond() as Millis
    };
    assert_eq!(when.next_after(from), Some(utc_noon(2028)));
    assert_eq!(when.next_after(utc_noon(2028)), Some(utc_noon(2032)));
}

#[test]
fn intervals_tick_on_multiples_since_the_epoch() {
    let when = When::every("30s").unwrap();
    assert_eq!(when.next_after(1_000_000_000_001), Some(1_000_000_020_000));
    assert_eq!(
        when.latest_at_or_before(1_000_000_020_000),
        Some(1_000_000_020_000)
    );
    assert!(When::every("0s").is_err());
}

#[test]
fn a_tick_that_came_due_while_running_fires_once() {
    let when = When::every("10s").unwrap();
    let started = 1_000 * SEC;
    let d = due(&when, started, started, 1_010 * SEC + 3, Missed::Skip);
    assert_eq!(d.fire, Some(1_010 * SEC));
    assert_eq!(d.next, Some(1_020 * SEC));
    // Recorded as the last tick, it does not fire again.
    let again = due(&when, 1_010 * SEC, started, 1_015 * SEC, Missed::Skip);
    assert_eq!(again.fire, None);
}

#[test]
fn ticks_late_while_running_fire_as_one() {
    let when = When::every("10s").unwrap();
    let d = due(&when, 1_000 * SEC, 900 * SEC, 1_045 * SEC, Missed::Skip);
    assert_eq!(d.fire, Some(1_040 * SEC));
}

#[test]
fn missed_ticks_are_skipped_or_caught_up_once() {
    // Last tick at 02:00; down from 02:10 until 05:20: 03:00, 04:00 and 05:00 were missed.
    let when = When::cron("0 * * * *", "UTC").unwrap();
    let last = 2 * HOUR;
    let started = 5 * HOUR + 20 * 60 * SEC;
    let skip = due(&when, last, started, started, Missed::Skip);
    assert_eq!(skip.fire, None);
    assert_eq!(skip.next, Some(6 * HOUR));
    let catch_up = due(&when, last, started, started, Missed::CatchUp);
    assert_eq!(catch_up.fire, Some(5 * HOUR));
    // Once: with 05:00 recorded, nothing more until 06:00.
    let after = due(&when, 5 * HOUR, started, started + SEC, Missed::CatchUp);
    assert_eq!(after.fire, None);
    assert_eq!(
        due(&when, 5 * HOUR, started, 6 * HOUR, Missed::Skip).fire,
        Some(6 * HOUR)
    );
}
