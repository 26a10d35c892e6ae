//! How jobctl prints a reply: plain text tables for the listing commands (cells may span
//! lines), the string or pretty JSON for the rest.

use serde_json::{json, Value};

pub(super) fn render(master: bool, command: &str, v: &Value) -> String {
    match command {
        "list-targets" => {
            let mut rows = Vec::new();
            if let Some(Value::Object(t)) = v.get("targets") {
                for (name, s) in t {
                    rows.push(target_row(name.clone(), s));
                }
            }
            table(&["TARGET", "CONCURRENCY", "LENGTH", "PAUSED"], rows)
        }
        "list-workers" => {
            let mut rows = Vec::new();
            for w in v
                .get("workers")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                let who = format!(
                    "{}\n({})",
                    w.get("name").and_then(Value::as_str).unwrap_or(""),
                    w.get("remoteAddr").and_then(Value::as_str).unwrap_or("")
                );
                let status = w.get("workerStatus").and_then(|s| s.get("targets"));
                let names: Vec<String> = match status {
                    Some(Value::Object(t)) => t.keys().cloned().collect(),
                    _ => w
                        .get("targets")
                        .and_then(Value::as_array)
                        .into_iter()
                        .flatten()
                        .filter_map(|t| t.as_str().map(str::to_string))
                        .collect(),
                };
                let mut cols = [String::new(), String::new(), String::new(), String::new()];
                for n in &names {
                    let s = status
                        .and_then(|t| t.get(n))
                        .cloned()
                        .unwrap_or(Value::Null);
                    let r = target_row(n.clone(), &s);
                    for (c, val) in cols.iter_mut().zip(r) {
                        if !c.is_empty() {
                            c.push('\n');
                        }
                        c.push_str(&val);
                    }
                }
                let [t, c, l, p] = cols;
                rows.push(vec![who, t, c, l, p]);
            }
            table(
                &["WORKER", "TARGETS", "CONCURRENCY", "LENGTH", "PAUSED"],
                rows,
            )
        }
        "memory-usage" => {
            let mut rows = Vec::new();
            if let Some(Value::Object(m)) = v.get("memoryUsage") {
                for (k, val) in m {
                    rows.push(vec![k.clone(), val.to_string()]);
                }
            }
            if !master {
                let n = v.get("jobPromisesCount").cloned().unwrap_or(json!(0));
                rows.push(vec!["pendingJobPromises".into(), n.to_string()]);
            }
            table(&["WHAT", "VALUE"], rows)
        }
        _ => match v {
            Value::String(s) => format!("{s}\n"),
            other => format!(
                "{}\n",
                serde_json::to_string_pretty(other).unwrap_or_default()
            ),
        },
    }
}

fn target_row(name: String, s: &Value) -> Vec<String> {
    let field = |k: &str| s.get(k).map(|v| v.to_string()).unwrap_or_default();
    let paused = match s.get("paused") {
        Some(Value::Bool(true)) => "yes",
        Some(Value::Bool(false)) => "no",
        _ => "",
    };
    vec![
        name,
        field("concurrency"),
        field("length"),
        paused.to_string(),
    ]
}

/// A plain text table; cells may span several lines.
fn table(header: &[&str], rows: Vec<Vec<String>>) -> String {
    let mut widths: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for r in &rows {
        for (i, c) in r.iter().enumerate() {
            for line in c.lines() {
                widths[i] = widths[i].max(line.chars().count());
            }
        }
    }
    let sep: String = widths
        .iter()
        .map(|w| "-".repeat(w + 2))
        .collect::<Vec<_>>()
        .join("+");
    let line = |cells: Vec<&str>| -> String {
        let parts: Vec<String> = cells
            .iter()
            .zip(&widths)
            .map(|(c, w)| format!(" {c:<w$} "))
            .collect();
        format!("{}\n", parts.join("|").trim_end())
    };
    let mut out = line(header.to_vec());
    out.push_str(&sep);
    out.push('\n');
    for r in rows {
        let height = r
            .iter()
            .map(|c| c.lines().count().max(1))
            .max()
            .unwrap_or(1);
        for i in 0..height {
            out.push_str(&line(
                r.iter().map(|c| c.lines().nth(i).unwrap_or("")).collect(),
            ));
        }
    }
    out
}
