//! `jobyard ctl dead-letters`: a queue's dead letters (jobs that failed their last attempt
//! under a retry policy) over the HTTP API's dead-letter routes: listed with their
//! failures, retried or discarded in bulk.

use clap::Subcommand;
use serde_json::{json, Value};

use crate::client::{Client, Failure};
use crate::enc;
use crate::table::render;

/// What `jobyard ctl dead-letters` does.
#[derive(Subcommand, Debug)]
pub enum DeadLettersAction {
    /// The queue's dead letters: each one's origin, failed attempts and last error.
    List { queue: String },
    /// Send dead letters back to the queues they failed in, ready, with no failures
    /// counted: those named, or all of them.
    Retry { queue: String, ids: Vec<u64> },
    /// Delete dead letters: those named, or all of them.
    Discard { queue: String, ids: Vec<u64> },
}

/// How an answer is shown in a terminal.
type Shown = fn(&Value) -> String;

/// Calls the route of `action`; gives its answer and how to show it.
pub fn execute(client: &Client, action: &DeadLettersAction) -> Result<(Value, Shown), Failure> {
    use DeadLettersAction::*;
    let path = |queue: &str, tail: &str| format!("/queues/{}/dead-letters{tail}", enc(queue));
    Ok(match action {
        List { queue } => (client.call_api("GET", &path(queue, ""), None)?, list),
        Retry { queue, ids } => {
            let body = chosen(ids);
            let v = client.call_api("POST", &path(queue, "/retry"), Some(&body))?;
            (v, crate::table::done)
        }
        Discard { queue, ids } => {
            let body = chosen(ids);
            let v = client.call_api("POST", &path(queue, "/discard"), Some(&body))?;
            (v, crate::table::done)
        }
    })
}

/// The bulk routes' body: no ids means every dead letter of the queue.
fn chosen(ids: &[u64]) -> Value {
    if ids.is_empty() {
        json!({})
    } else {
        json!({ "ids": ids })
    }
}

fn list(v: &Value) -> String {
    let rows: Vec<Vec<String>> = v["dead_letters"]
        .as_array()
        .map(|jobs| jobs.iter().map(row).collect())
        .unwrap_or_default();
    render(&["ID", "ORIGIN", "FAILED", "LAST FAILURE"], &rows)
}

fn row(job: &Value) -> Vec<String> {
    let last = job["failures"].as_array().and_then(|f| f.last());
    let last = last.map_or_else(String::new, |f| match f["error"].as_str() {
        Some(error) => format!("{}: {error}", f["how"].as_str().unwrap_or("")),
        None => f["how"].as_str().unwrap_or("").to_string(),
    });
    let cell = |k: &str| match &job[k] {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    vec![cell("id"), cell("origin"), cell("failed_attempts"), last]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_ids_means_all_and_a_listing_shows_the_last_failure() {
        assert_eq!(chosen(&[]), json!({}));
        assert_eq!(chosen(&[4, 5]), json!({"ids": [4, 5]}));
        let v = json!({"dead_letters": [{"id": 7, "origin": "emails", "failed_attempts": 3,
            "failures": [{"how": "failed", "error": "smtp 550"}]}]});
        let shown = list(&v);
        assert!(shown.contains("emails"), "{shown}");
        assert!(shown.contains("failed: smtp 550"), "{shown}");
    }
}
