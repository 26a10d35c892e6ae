//! What the worker's scheduler ([`super::scheduler::EngineScheduler`]) tells it about
//! targets: each target's state as `status` reports it (in the order a JavaScript object
//! lists its keys), and the jobs it lets start.

/// One target as `status` reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TargetState {
    /// Name.
    pub name: String,
    /// Whether starting jobs is paused.
    pub paused: bool,
    /// Most jobs running at once.
    pub concurrency: u32,
    /// Jobs running plus jobs accepted but not started.
    pub length: usize,
}

/// A job the scheduler allows to start now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Start {
    /// Row id.
    pub id: u64,
    /// Its target.
    pub target: String,
    /// The engine job that stands for the row while it is accepted or running (its lease
    /// is the running slot).
    pub job: u64,
}

/// Whether JavaScript would treat `s` as an array index (those keys come first, ascending,
/// in a JS object; `status` keeps that order).
pub(crate) fn js_index(s: &str) -> Option<u32> {
    if s == "0" || (!s.starts_with('0') && !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit())) {
        s.parse::<u32>().ok().filter(|n| *n != u32::MAX)
    } else {
        None
    }
}

/// Sorts targets as `status` lists them: index-like names first by value, the rest keep
/// insertion order (stable sort).
pub(crate) fn in_status_order(targets: &mut [TargetState]) {
    targets.sort_by_key(|t| js_index(&t.name).map_or((1, 0), |n| (0, n)));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_order_is_js_object_order() {
        let mut targets: Vec<TargetState> = ["b", "10", "a", "2", "01"]
            .into_iter()
            .map(|n| TargetState {
                name: n.into(),
                paused: false,
                concurrency: 1,
                length: 0,
            })
            .collect();
        in_status_order(&mut targets);
        let names: Vec<String> = targets.into_iter().map(|t| t.name).collect();
        assert_eq!(names, vec!["2", "10", "b", "a", "01"]);
    }
}
