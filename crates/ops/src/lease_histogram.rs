//! `jobyard_lease_to_complete_seconds`: the broker's lease-to-complete histograms in the
//! Prometheus text format.
//!
//! Written here rather than through the `metrics` facade: the broker keeps the buckets
//! itself (a plain store per job under the engine lock, no registry lookup), and the
//! exporter can only be handed single observations, not a histogram's current counts.

use std::fmt::Write;

use jobyard_broker::{Broker, HistogramSnapshot, LEASE_BUCKETS_US};
use jobyard_engine::LeaseOutcome;

/// The metric's name.
pub const NAME: &str = "jobyard_lease_to_complete_seconds";

/// Appends the histograms of every queue to `out`.
pub(crate) fn render(broker: &Broker, out: &mut String) {
    let queues = broker.lease_latency();
    if queues.is_empty() {
        return;
    }
    let _ = writeln!(
        out,
        "# HELP {NAME} Time from a job's hand-out (reserve, GRAB_JOB, TAKE, launch, flow lease) \
         to its completion by the holder; outcome ok (finished ok, deleted, moved on) or failed \
         (finished failed, buried)."
    );
    let _ = writeln!(out, "# TYPE {NAME} histogram");
    for q in &queues {
        let queue = escape(&String::from_utf8_lossy(&q.queue));
        for outcome in [LeaseOutcome::Ok, LeaseOutcome::Failed] {
            let labels = format!("queue=\"{queue}\",outcome=\"{}\"", outcome.as_str());
            series(out, &labels, &q.of(outcome).snapshot());
        }
    }
}

fn series(out: &mut String, labels: &str, h: &HistogramSnapshot) {
    for (bound, n) in LEASE_BUCKETS_US.iter().zip(&h.cumulative) {
        let le = *bound as f64 / 1e6;
        let _ = writeln!(out, "{NAME}_bucket{{{labels},le=\"{le}\"}} {n}");
    }
    let _ = writeln!(out, "{NAME}_bucket{{{labels},le=\"+Inf\"}} {}", h.count);
    let _ = writeln!(out, "{NAME}_sum{{{labels}}} {}", h.sum_us as f64 / 1e6);
    let _ = writeln!(out, "{NAME}_count{{{labels}}} {}", h.count);
}

/// A label value as the text format wants it: backslash, quote and newline escaped.
fn escape(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_values_are_escaped() {
        assert_eq!(escape("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
    }
}
