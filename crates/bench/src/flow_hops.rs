//! Where a flow's create→done goes: the bench stamps each flow when its create is sent
//! and answered and when each stage's handler first sees it, and reads the server's
//! fsync histogram around the run. The medians of the gaps between stamps, set beside
//! the mean fsync, say how much of each hop is the disk and how much is everything else
//! (HTTP, thread wake-ups, the client).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Instant;

use serde_json::{json, Value};

/// Stages stamped per flow: the first, the middle (for a fan-out, its first child) and
/// the last.
pub const STAGES: usize = 3;

/// Per flow id: when the create was sent and answered, and when each stage's handler
/// first saw the job.
#[derive(Default)]
pub struct Stamps {
    flows: Mutex<HashMap<String, FlowStamps>>,
}

#[derive(Default, Clone, Copy)]
struct FlowStamps {
    sent: Option<Instant>,
    answered: Option<Instant>,
    stages: [Option<Instant>; STAGES],
}

impl Stamps {
    fn with(&self, id: &str, f: impl FnOnce(&mut FlowStamps)) {
        let mut flows = self.flows.lock().unwrap();
        f(flows.entry(id.to_string()).or_default());
    }

    /// The create of flow `id` was sent at `sent` and answered at `answered`.
    pub fn created(&self, id: &str, sent: Instant, answered: Instant) {
        self.with(id, |s| {
            s.sent = Some(sent);
            s.answered = Some(answered);
        });
    }

    /// A handler of stage `stage` (0-based) saw flow `id` now; only the first sight counts.
    pub fn stage(&self, id: &str, stage: usize) {
        let now = Instant::now();
        self.with(id, |s| {
            s.stages[stage].get_or_insert(now);
        });
    }

    /// Median of each gap, in ms, over the flows stamped at every point: `create` (sent
    /// → answered), `to_stage1` (sent → first handler), `stage1_to_3` (first → last
    /// handler), `to_stage3` (sent → last handler: the flow's create→done) and, where the
    /// middle stage was stamped, `stage1_to_2` and `stage2_to_3`.
    pub fn medians(&self) -> Value {
        let flows = self.flows.lock().unwrap();
        let mut gaps: [Vec<f64>; 6] = Default::default();
        let ms =
            |from: Instant, to: Instant| to.saturating_duration_since(from).as_secs_f64() * 1e3;
        for s in flows.values() {
            let (Some(sent), Some(answered), [Some(first), middle, Some(last)]) =
                (s.sent, s.answered, s.stages)
            else {
                continue;
            };
            gaps[0].push(ms(sent, answered));
            gaps[1].push(ms(sent, first));
            gaps[2].push(ms(first, last));
            gaps[3].push(ms(sent, last));
            if let Some(middle) = middle {
                gaps[4].push(ms(first, middle));
                gaps[5].push(ms(middle, last));
            }
        }
        let [create, to1, one_three, to3, one_two, two_three] = gaps.map(median);
        json!({
            "create": create, "to_stage1": to1, "stage1_to_3": one_three, "to_stage3": to3,
            "stage1_to_2": one_two, "stage2_to_3": two_three,
        })
    }
}

/// Rounded to µs; `None` for no values.
fn median(mut v: Vec<f64>) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    Some((v[v.len() / 2] * 1000.0).round() / 1000.0)
}

/// The server's fsyncs so far: how many, and their total seconds (its
/// `jobyard_log_fsync_seconds` histogram in `/metrics`).
pub fn fsyncs(metrics: &str) -> Option<(f64, f64)> {
    let value = |name: &str| {
        metrics
            .lines()
            .find(|l| l.starts_with(name))?
            .rsplit(' ')
            .next()?
            .parse::<f64>()
            .ok()
    };
    Some((
        value("jobyard_log_fsync_seconds_count")?,
        value("jobyard_log_fsync_seconds_sum")?,
    ))
}

/// The server's fsyncs so far at or under each bucket bound of its histogram: (bound in
/// seconds, count).
pub fn fsync_buckets(metrics: &str) -> Vec<(f64, f64)> {
    metrics
        .lines()
        .filter_map(|l| l.strip_prefix("jobyard_log_fsync_seconds_bucket{le=\""))
        .filter_map(|rest| {
            let (bound, count) = rest.split_once("\"} ")?;
            Some((bound.parse().ok()?, count.trim().parse().ok()?))
        })
        .collect()
}

/// Of the fsyncs between two `/metrics` reads, the share that took at most each bound
/// (keys in ms), so that a hop's time can be set beside the fsync's own distribution.
pub fn fsync_shares(before: &str, after: &str) -> Value {
    let before = fsync_buckets(before);
    let after = fsync_buckets(after);
    let Some(&(_, total_after)) = after.iter().find(|(b, _)| b.is_infinite()) else {
        return Value::Null;
    };
    let count_at =
        |v: &[(f64, f64)], bound: f64| v.iter().find(|(b, _)| *b == bound).map_or(0.0, |&(_, c)| c);
    let total = total_after - count_at(&before, f64::INFINITY);
    if total <= 0.0 {
        return Value::Null;
    }
    let mut shares = serde_json::Map::new();
    for &(bound, count) in after.iter().filter(|(b, _)| b.is_finite()) {
        let share = (count - count_at(&before, bound)) / total;
        shares.insert(
            format!("{}", bound * 1000.0),
            json!((share * 1000.0).round() / 1000.0),
        );
    }
    Value::Object(shares)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn medians_use_only_flows_stamped_everywhere() {
        let stamps = Stamps::default();
        let t0 = Instant::now();
        stamps.created("x", t0, t0 + Duration::from_millis(1));
        stamps.stage("x", 0);
        stamps.stage("x", 1);
        stamps.stage("x", 2);
        stamps.stage("half", 0);
        stamps.created("no-middle", t0, t0);
        stamps.stage("no-middle", 0);
        stamps.stage("no-middle", 2);
        let m = stamps.medians();
        assert_eq!(m["create"], json!(1.0));
        assert!(m["to_stage1"].as_f64().is_some());
        assert!(m["stage1_to_2"].as_f64().is_some(), "x has every stamp");
        let empty = Stamps::default().medians();
        assert_eq!(empty["create"], Value::Null);
    }

    #[test]
    fn fsyncs_are_read_from_the_histogram_lines() {
        let text = "jobyard_log_fsync_seconds_bucket{le=\"0.001\"} 3\n\
                    jobyard_log_fsync_seconds_sum 0.0042\n\
                    jobyard_log_fsync_seconds_count 7\n";
        assert_eq!(fsyncs(text), Some((7.0, 0.0042)));
        assert_eq!(fsyncs("other 1\n"), None);
    }

    #[test]
    fn fsync_shares_count_only_the_syncs_between_the_reads() {
        let before = "jobyard_log_fsync_seconds_bucket{le=\"0.0005\"} 2\n\
                      jobyard_log_fsync_seconds_bucket{le=\"+Inf\"} 4\n";
        let after = "jobyard_log_fsync_seconds_bucket{le=\"0.0005\"} 5\n\
                     jobyard_log_fsync_seconds_bucket{le=\"+Inf\"} 8\n";
        assert_eq!(fsync_shares(before, after), json!({"0.5": 0.75}));
        assert_eq!(fsync_shares(after, after), Value::Null);
    }
}
