//! SQL sent as text (not prepared) for the fetch's transaction: its statements change with
//! every fetch (id lists, which targets), so preparing them would cost a round trip and a
//! server-side prepare each, and only the text protocol takes several statements in one
//! round trip. Values are written as literals that need no escaping whatever they hold
//! or the `sql_mode` is: strings as hex literals with a character set introducer (which
//! compare and convert under the column's collation as a bound value would), numbers in
//! decimal, absent values as `NULL`.

use crate::launcher::{signal_name, Outcome};

/// `s` as an SQL string literal: `_utf8mb4 X'…'`, or `''` when empty.
pub fn string_literal(s: &str) -> String {
    if s.is_empty() {
        return "''".to_string();
    }
    let hex: String = s.bytes().map(|b| format!("{b:02X}")).collect();
    format!("_utf8mb4 X'{hex}'")
}

/// The session variable a fetch keeps the rows it took in, between its statements: a JSON
/// array of `[id, w]` pairs, `w` being the index of the row's target in `wants`.
const FETCHED: &str = "@jobyard_fetched";

/// A whole fetch as one text batch, one round trip: `BEGIN`; every wanted target's
/// `SELECT … FOR UPDATE SKIP LOCKED` (the rows it locks recorded in a session variable,
/// since the ids are not known before); the `accepted` and then the `running` UPDATE of
/// those rows (jobd's order, reference §3) by joining the variable as a table (each row
/// found by its primary key); the `done` rows of `ends`; the rows taken, as `id` and `w`
/// (the index of the row's target in `wants`); `COMMIT`.
///
/// Two round trips before (the SELECTs, then the UPDATEs with the ids they returned):
/// this is on the path from a poke to the launch, and each round trip is also a wake-up
/// of a MariaDB thread.
pub fn fetch(table: &str, wants: &[(String, u64)], ends: &[(u64, &Outcome)], now: i64) -> String {
    let selects: Vec<String> = wants
        .iter()
        .enumerate()
        .filter(|(_, (_, limit))| *limit > 0)
        .map(|(i, (target, limit))| {
            format!(
                "(SELECT id, {i} AS w FROM {table} WHERE status='waiting' AND target={} \
                 ORDER BY id LIMIT {limit} FOR UPDATE SKIP LOCKED)",
                string_literal(target)
            )
        })
        .collect();
    let mut sql = String::from("BEGIN; ");
    if selects.is_empty() {
        sql.push_str(&format!("SET {FETCHED} = NULL; "));
    } else {
        sql.push_str(&format!(
            "SET {FETCHED} = (SELECT JSON_ARRAYAGG(JSON_ARRAY(id, w)) FROM ({}) AS f); ",
            selects.join(" UNION ALL ")
        ));
    }
    let taken = format!(
        "{table} JOIN JSON_TABLE({FETCHED}, '$[*]' COLUMNS (fid BIGINT PATH '$[0]')) AS f \
         ON {table}.id = f.fid"
    );
    sql.push_str(&format!(
        "UPDATE {taken} SET {table}.status='accepted'; \
         UPDATE {taken} SET {table}.status='running', {table}.result='ok', {table}.time_started={now}; "
    ));
    if !ends.is_empty() {
        sql.push_str(&done_rows(table, ends, now));
        sql.push_str("; ");
    }
    // The rows before the COMMIT: if reading them failed, nothing would be committed
    // that the worker does not know it took.
    sql.push_str(&format!(
        "SELECT fid AS id, w FROM JSON_TABLE({FETCHED}, '$[*]' \
         COLUMNS (fid BIGINT PATH '$[0]', w BIGINT PATH '$[1]')) AS f; COMMIT"
    ));
    sql
}

/// The `done` UPDATE of several finished jobs as one statement, the columns in jobd's
/// order as in [`crate::store::Store::finish`] (`status`, `result`, `time_finished`,
/// `return_code`, `sig`, `stdout`, `stderr`), each per-row value a `CASE id WHEN … END`.
/// Used inside the fetch's transaction, so jobs that ended share its commit.
pub fn done_rows(table: &str, ends: &[(u64, &Outcome)], now: i64) -> String {
    let case = |col: &str, value: &dyn Fn(&Outcome) -> String| {
        let arms: String = ends
            .iter()
            .map(|(id, o)| format!(" WHEN {id} THEN {}", value(o)))
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
    fn a_fetch_locks_then_writes_in_jobds_order_and_reads_back_before_committing() {
        let sql = fetch(
            "`jobs`",
            &[("a".into(), 2), ("b".into(), 0), ("c".into(), 1)],
            &[],
            9,
        );
        let at = |needle: &str| {
            sql.find(needle)
                .unwrap_or_else(|| panic!("{needle} in {sql}"))
        };
        assert!(sql.starts_with("BEGIN; "));
        assert!(
            at("0 AS w") < at("2 AS w"),
            "one SELECT per target with free slots"
        );
        assert!(
            !sql.contains("1 AS w"),
            "no SELECT for a target without free slots"
        );
        assert!(at("target=_utf8mb4 X'61' ORDER BY id LIMIT 2 FOR UPDATE SKIP LOCKED") > 0);
        assert!(at("status='accepted'") < at("status='running'"));
        assert!(at("time_started=9") < at("SELECT fid AS id, w"));
        assert!(sql.ends_with("; COMMIT"));
        assert!(!sql.contains("status='done'"), "no ends, no done UPDATE");
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
}
