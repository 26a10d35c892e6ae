//! Aligned text tables from the admin API's JSON.

use serde_json::Value;

/// Columns padded to their widest cell; numbers right-aligned.
pub fn render(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut width: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for row in rows {
        for (i, cell) in row.iter().enumerate() {
            width[i] = width[i].max(cell.chars().count());
        }
    }
    let numeric: Vec<bool> = (0..header.len())
        .map(|i| {
            !rows.is_empty()
                && rows
                    .iter()
                    .all(|r| r[i].chars().all(|c| c.is_ascii_digit() || c == ','))
        })
        .collect();
    let line = |cells: Vec<&str>| -> String {
        let mut out = cells
            .iter()
            .enumerate()
            .map(|(i, c)| {
                let pad = width[i] - c.chars().count();
                if numeric[i] {
                    format!("{}{c}", " ".repeat(pad))
                } else {
                    format!("{c}{}", " ".repeat(pad))
                }
            })
            .collect::<Vec<_>>()
            .join("  ");
        out.truncate(out.trim_end().len());
        out.push('\n');
        out
    };
    let mut out = line(header.to_vec());
    for row in rows {
        out.push_str(&line(row.iter().map(String::as_str).collect()));
    }
    out
}

fn s(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => "-".into(),
        other => other.to_string(),
    }
}

pub fn queues(v: &Value) -> String {
    let keys = [
        "name",
        "ready",
        "reserved",
        "delayed",
        "buried",
        "waiting",
        "created",
        "completed",
        "failed",
    ];
    let rows: Vec<Vec<String>> = v["queues"]
        .as_array()
        .map(|qs| {
            qs.iter()
                .map(|q| {
                    let mut row: Vec<String> = keys.iter().map(|k| s(&q[*k])).collect();
                    if q["paused"] == Value::Bool(true) {
                        row[0].push_str(" (paused)");
                    }
                    row
                })
                .collect()
        })
        .unwrap_or_default();
    render(
        &[
            "QUEUE",
            "READY",
            "RESERVED",
            "DELAYED",
            "BURIED",
            "WAITING",
            "CREATED",
            "COMPLETED",
            "FAILED",
        ],
        &rows,
    )
}

pub fn stats(v: &Value) -> String {
    let mut out = format!(
        "jobs: {}   created since start: {}   queues: {}   draining: {}\n\n",
        s(&v["jobs"]),
        s(&v["jobs_created"]),
        v["queues"].as_array().map_or(0, Vec::len),
        s(&v["draining"])
    );
    let keys = [
        "name",
        "connections",
        "connections_total",
        "refused",
        "jobs_created",
        "jobs_completed",
        "jobs_failed",
    ];
    let rows: Vec<Vec<String>> = v["protocols"]
        .as_array()
        .map(|ps| {
            ps.iter()
                .map(|p| keys.iter().map(|k| s(&p[*k])).collect())
                .collect()
        })
        .unwrap_or_default();
    out.push_str(&render(
        &[
            "PROTOCOL",
            "OPEN",
            "SINCE START",
            "REFUSED",
            "CREATED",
            "COMPLETED",
            "FAILED",
        ],
        &rows,
    ));
    if let Some(log) = v["log"].as_object() {
        out.push_str(&format!(
            "\nlog: {} records, {} bytes, {} writes, {} fsyncs, segment {}\n",
            s(&log["records"]),
            s(&log["bytes"]),
            s(&log["writes"]),
            s(&log["fsyncs"]),
            s(&log["segment"])
        ));
    }
    out
}

pub fn jobs(v: &Value) -> String {
    let rows: Vec<Vec<String>> = v["jobs"]
        .as_array()
        .map(|js| {
            js.iter()
                .map(|j| {
                    let mut body = s(&j["body_preview"]).replace(['\n', '\r'], " ");
                    if body.chars().count() > 60 {
                        body = body.chars().take(57).collect::<String>() + "...";
                    }
                    vec![
                        s(&j["id"]),
                        s(&j["pri"]),
                        s(&j["age_s"]),
                        s(&j["reserves"]),
                        body,
                    ]
                })
                .collect()
        })
        .unwrap_or_default();
    let mut out = render(&["ID", "PRI", "AGE_S", "RESERVES", "BODY"], &rows);
    if let Some(next) = v["next"].as_str() {
        out.push_str(&format!("(more: --after {next})\n"));
    }
    out
}

pub fn job(v: &Value) -> String {
    let keys = [
        "id",
        "queue",
        "state",
        "pri",
        "ttr",
        "age_s",
        "time_left_s",
        "reserves",
        "timeouts",
        "releases",
        "buries",
        "kicks",
        "size",
        "attrs",
        "body_preview",
    ];
    let rows: Vec<Vec<String>> = keys
        .iter()
        .map(|k| vec![k.to_string(), s(&v[*k])])
        .collect();
    render(&["FIELD", "VALUE"], &rows)
}

/// A queue's policy, one field a line.
pub fn policy(v: &Value) -> String {
    let keys = [
        "queue",
        "lease_limit",
        "rate_limit",
        "rate_tokens",
        "paused",
        "paused_until_ms",
        "waiting_workers",
        "retry",
    ];
    let rows: Vec<Vec<String>> = keys
        .iter()
        .map(|k| vec![k.to_string(), s(&v[*k])])
        .collect();
    render(&["FIELD", "VALUE"], &rows)
}

pub fn done(v: &Value) -> String {
    let fields: Vec<String> = v
        .as_object()
        .map(|o| o.iter().map(|(k, x)| format!("{k}: {}", s(x))).collect())
        .unwrap_or_default();
    format!("ok  {}\n", fields.join("  "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_align_and_numbers_sit_right() {
        let t = render(
            &["QUEUE", "READY"],
            &[
                vec!["emails".into(), "7".into()],
                vec!["thumbnails".into(), "1234".into()],
            ],
        );
        assert_eq!(
            t,
            "QUEUE       READY\nemails          7\nthumbnails   1234\n"
        );
    }
}
