//! `jobyard ctl cluster`: the nodes sharing this server's storage, as `GET /v1/cluster`
//! describes them (issue 27): one row a node, the leader marked, with the epoch and the
//! asked node's lag. On the file log the server is a cluster of one.

use serde_json::Value;

use crate::client::{Client, Failure};
use crate::table::render;

/// How an answer is shown in a terminal.
type Shown = fn(&Value) -> String;

/// Calls `GET /v1/cluster`; gives its answer and how to show it.
pub fn execute(client: &Client) -> Result<(Value, Shown), Failure> {
    Ok((client.call_api("GET", "/cluster", None)?, table))
}

fn text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => "-".into(),
        other => other.to_string(),
    }
}

/// A line naming the node asked, its role, the epoch and its lag, then a row per live node
/// (`*` marks the leader, `(this)` the node asked). A server without a node name (the file
/// log) is shown as the single node it is.
fn table(v: &Value) -> String {
    let this = v["node"].as_str();
    let leader = v["leader"].as_str();
    let mut out = match this {
        Some(node) => format!(
            "node {node}: {}, epoch {}, lag {} ms\n",
            text(&v["role"]),
            text(&v["epoch"]),
            text(&v["lag_ms"])
        ),
        None => "single node, file log\n".to_string(),
    };
    let mut rows: Vec<Vec<String>> = v["nodes"]
        .as_array()
        .map(|nodes| {
            nodes
                .iter()
                .map(|n| {
                    let name = text(&n["node"]);
                    let is_leader = leader == n["node"].as_str() && leader.is_some();
                    vec![
                        if is_leader { "*".into() } else { String::new() },
                        name.clone(),
                        text(&n["role"]),
                        if this == Some(name.as_str()) {
                            format!("{} ms (this)", text(&v["lag_ms"]))
                        } else {
                            "-".into()
                        },
                    ]
                })
                .collect()
        })
        .unwrap_or_default();
    if rows.is_empty() {
        // The file log lists no nodes: show the one there is.
        rows.push(vec![
            "*".into(),
            this.unwrap_or("(this server)").into(),
            text(&v["role"]),
            format!("{} ms (this)", text(&v["lag_ms"])),
        ]);
    }
    out.push_str(&render(&["LEADER", "NODE", "ROLE", "LAG"], &rows));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_leader_is_marked_and_the_asked_node_shows_its_lag() {
        let v = json!({"role": "standby", "epoch": 7, "leader": "a:1", "node": "b:1",
            "lag_ms": 12, "nodes": [{"node": "a:1", "role": "leader"},
                                    {"node": "b:1", "role": "standby"}]});
        let shown = table(&v);
        let lines: Vec<&str> = shown.lines().collect();
        assert_eq!(lines[0], "node b:1: standby, epoch 7, lag 12 ms");
        assert!(
            lines[2].starts_with('*') && lines[2].contains("a:1"),
            "{shown}"
        );
        assert!(
            lines[3].contains("b:1") && lines[3].contains("12 ms (this)"),
            "{shown}"
        );
        assert!(!lines[3].starts_with('*'), "{shown}");
    }

    #[test]
    fn the_file_log_is_a_cluster_of_one() {
        let v = json!({"role": "leader", "epoch": 0, "leader": null, "node": null,
            "lag_ms": 0, "nodes": []});
        let shown = table(&v);
        assert!(shown.starts_with("single node, file log\n"), "{shown}");
        assert!(shown.contains("(this server)"), "{shown}");
    }
}
