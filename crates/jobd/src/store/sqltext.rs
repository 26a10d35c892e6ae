//! SQL sent as text (not prepared) for the fetch's transaction: its statements change with
//! every fetch (id lists, which targets), so preparing them would cost a round trip and a
//! server-side prepare each, and only the text protocol takes several statements in one
//! round trip. Values are written as literals that need no escaping whatever they hold
//! or the `sql_mode` is: strings as hex literals with a character set introducer (which
//! compare and convert under the column's collation as a bound value would), numbers in
//! decimal, absent values as `NULL`.

use crate::launch::{signal_name, Outcome};

/// `s` as an SQL string literal: `_utf8mb4 X'…'`, or `''` when empty.
pub fn string_literal(s: &str) -> String {
    if s.is_empty() {
        return "''".to_string();
    }
    let hex: String = s.bytes().map(|b| format!("{b:02X}")).collect();
    format!("_utf8mb4 X'{hex}'")
}

/// `BEGIN` and one `SELECT … FOR UPDATE SKIP LOCKED` per wanted target, as one text batch
/// (one round trip instead of one for `BEGIN` and one per target). Each row carries the
/// index of its target in `wants` as `w`.
pub fn select_waiting(table: &str, wants: &[(String, u64)]) -> String {
    let mut sql = String::from("BEGIN");
    for (i, (target, limit)) in wants.iter().enumerate() {
        if *limit == 0 {
            continue;
        }
        sql.push_str(&format!(
            "; SELECT id, {i} AS w FROM {table} WHERE status='waiting' AND target={} \
             ORDER BY id LIMIT {limit} FOR UPDATE SKIP LOCKED",
            string_literal(target)
        ));
    }
    sql
}

/// The `done` UPDATE of several finished jobs as one statement, the columns in jobd's
/// order as in [`crate::store::Store::finish`] (`status`, `result`, `time_finished`,
/// `return_code`, `sig`, `stdout`, `stderr`), each per-row value a `CASE id WHEN … END`.
/// Used inside the fetch's transaction, so jobs that ended share its commit. A column
/// whose value is the same for every row (the usual case: exit 0, no signal, no output)
/// is written as that value, not a `CASE`: less for MariaDB to parse and evaluate per
/// fetch, parsing and UPDATEs being a third of its CPU (perf, 1x8).
pub fn done_rows(table: &str, ends: &[(u64, &Outcome)], now: i64) -> String {
    let case = |col: &str, value: &dyn Fn(&Outcome) -> String| {
        let values: Vec<String> = ends.iter().map(|(_, o)| value(o)).collect();
        if values.windows(2).all(|w| w[0] == w[1]) {
            if let Some(v) = values.first() {
                return format!("{col} = {v}");
            }
        }
        let arms: String = ends
            .iter()
            .zip(&values)
            .map(|((id, _), v)| format!(" WHEN {id} THEN {v}"))
            .collect();
        format!("{col} = CASE id{arms} END")
    };
    let ids: Vec<String> = ends.iter().map(|(id, _)| id.to_string()).collect();
    format!(
        "UPDATE {table} SET status='done', {}, time_finished={now}, {}, {}, {}, {} WHERE id IN ({})",
        case("result", &|o| if o.ok() { "'ok'" } else { "'fail'" }.to_string()),
        case("return_code", &|o| match o.code {
            Some(c) => c.clamp(0, 255).to_string(),
            None => "NULL".to_string(),
        }),
        case("sig", &|o| match o.signal {
            Some(s) => string_literal(&signal_name(s)),
            None => "NULL".to_string(),
        }),
        case("stdout", &|o| string_literal(&o.stdout)),
        case("stderr", &|o| string_literal(&o.stderr)),
        ids.join(","),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strings_become_hex_literals() {
        assert_eq!(string_literal(""), "''");
        assert_eq!(string_literal("a'"), "_utf8mb4 X'6127'");
    }

    #[test]
    fn done_rows_lists_every_row_in_column_order() {
        let ok = Outcome {
            code: Some(0),
            signal: None,
            stdout: "hi".into(),
            stderr: String::new(),
        };
        let killed = Outcome {
            code: None,
            signal: Some(libc::SIGTERM),
            stdout: String::new(),
            stderr: "x".into(),
        };
        let sql = done_rows("`jobs`", &[(7, &ok), (9, &killed)], 100);
        assert_eq!(
            sql,
            "UPDATE `jobs` SET status='done', result = CASE id WHEN 7 THEN 'ok' WHEN 9 THEN 'fail' END, \
             time_finished=100, return_code = CASE id WHEN 7 THEN 0 WHEN 9 THEN NULL END, \
             sig = CASE id WHEN 7 THEN NULL WHEN 9 THEN _utf8mb4 X'5349475445524D' END, \
             stdout = CASE id WHEN 7 THEN _utf8mb4 X'6869' WHEN 9 THEN '' END, \
             stderr = CASE id WHEN 7 THEN '' WHEN 9 THEN _utf8mb4 X'78' END WHERE id IN (7,9)"
        );
    }

    #[test]
    fn done_rows_writes_a_shared_value_once() {
        let ok = |out: &str| Outcome {
            code: Some(0),
            signal: None,
            stdout: out.into(),
            stderr: String::new(),
        };
        let (a, b) = (ok(""), ok("x"));
        let sql = done_rows("`jobs`", &[(7, &a), (9, &b)], 100);
        assert_eq!(
            sql,
            "UPDATE `jobs` SET status='done', result = 'ok', time_finished=100, return_code = 0, \
             sig = NULL, stdout = CASE id WHEN 7 THEN '' WHEN 9 THEN _utf8mb4 X'78' END, \
             stderr = '' WHERE id IN (7,9)"
        );
    }
}
