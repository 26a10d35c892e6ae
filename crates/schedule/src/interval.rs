//! Fixed intervals written as a number and a unit: "500ms", "30s", "5m", "2h", "1d".

use crate::{BadSchedule, Millis};

/// The interval `text` names, in milliseconds: a whole number followed by `ms`, `s`, `m`,
/// `h` or `d`. Zero and intervals past a year are refused.
pub fn parse_interval(text: &str) -> Result<Millis, BadSchedule> {
    let bad = || {
        BadSchedule(format!(
            "bad interval {text:?}: want e.g. \"30s\", \"5m\", \"1h\""
        ))
    };
    let text = text.trim();
    let split = text.find(|c: char| !c.is_ascii_digit()).ok_or_else(bad)?;
    let (number, unit) = text.split_at(split);
    let count: Millis = number.parse().map_err(|_| bad())?;
    let unit_ms: Millis = match unit {
        "ms" => 1,
        "s" => 1_000,
        "m" => 60_000,
        "h" => 3_600_000,
        "d" => 86_400_000,
        _ => return Err(bad()),
    };
    let ms = count.checked_mul(unit_ms).ok_or_else(bad)?;
    if ms == 0 || ms > 366 * 86_400_000 {
        return Err(bad());
    }
    Ok(ms)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn intervals_take_a_number_and_a_unit() {
        assert_eq!(parse_interval("30s"), Ok(30_000));
        assert_eq!(parse_interval("5m"), Ok(300_000));
        assert_eq!(parse_interval("2h"), Ok(7_200_000));
        assert_eq!(parse_interval("1d"), Ok(86_400_000));
        assert_eq!(parse_interval("250ms"), Ok(250));
        for bad in ["", "s", "30", "0s", "30x", "-5s", "999d", "1.5s"] {
            assert!(parse_interval(bad).is_err(), "{bad:?}");
        }
    }
}
