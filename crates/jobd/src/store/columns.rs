//! Reading ids and text from result rows, and fitting job output into the table's text
//! columns when the database refuses it.

use sqlx::Row;

pub(super) fn row_id(row: &sqlx::mysql::MySqlRow) -> Result<u64, sqlx::Error> {
    if let Ok(v) = row.try_get::<u64, _>("id") {
        return Ok(v);
    }
    if let Ok(v) = row.try_get::<u32, _>("id") {
        return Ok(v.into());
    }
    row.try_get::<i64, _>("id").map(|v| v.max(0) as u64)
}

pub(super) fn text(row: &sqlx::mysql::MySqlRow, col: &str) -> Result<String, sqlx::Error> {
    if let Ok(s) = row.try_get::<String, _>(col) {
        return Ok(s);
    }
    let b: Vec<u8> = row.try_get(col)?;
    Ok(String::from_utf8_lossy(&b).trim_end().to_string())
}

/// MySQL errors about the value, not the connection: 1366 incorrect string value,
/// 1406 data too long, 1264 out of range, 1265 truncated, 1301/1153 packet too large.
pub fn is_data_error(e: &sqlx::Error) -> bool {
    match e {
        sqlx::Error::Database(db) => {
            let code = db
                .try_downcast_ref::<sqlx::mysql::MySqlDatabaseError>()
                .map(|m| m.number())
                .unwrap_or(0);
            matches!(code, 1366 | 1406 | 1264 | 1265 | 1301 | 1153 | 1300)
        }
        _ => false,
    }
}

/// Cuts `s` to at most `max` bytes at a character boundary.
pub fn truncate(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s[..end].to_string()
}

/// Replaces characters outside the Basic Multilingual Plane (4 bytes in UTF-8, rejected by
/// MySQL's 3-byte `utf8` columns) with U+FFFD.
pub fn bmp_only(s: &str) -> String {
    s.chars()
        .map(|c| if (c as u32) > 0xFFFF { '\u{FFFD}' } else { c })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn truncate_keeps_char_boundaries() {
        assert_eq!(truncate("aé", 2), "a");
        assert_eq!(truncate("abc", 5), "abc");
    }

    #[test]
    fn bmp_only_replaces_emoji() {
        assert_eq!(bmp_only("a😀b"), "a\u{FFFD}b");
    }
}
