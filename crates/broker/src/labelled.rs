//! Figures a front end keeps per named thing it has several of (a jobd worker's targets),
//! one row of counters and gauges per label value, for `/metrics`.
//!
//! Like [`crate::ProtocolMetrics`], the hot path holds its row (an `Arc`) and bumps
//! atomics; the registry is walked only by a scrape.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// Whether a figure only grows (a Prometheus counter) or goes up and down (a gauge).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FigureKind {
    /// Only grows; exported with `absolute`.
    Counter,
    /// Goes up and down; exported with `set`.
    Gauge,
}

/// The figures of one label value, in the order of the family's names.
#[derive(Debug)]
pub struct LabelledRow {
    values: Box<[AtomicU64]>,
}

impl LabelledRow {
    /// Adds one to figure `i`.
    pub fn inc(&self, i: usize) {
        self.values[i].fetch_add(1, Ordering::Relaxed);
    }

    /// Takes one from figure `i` (a gauge).
    pub fn dec(&self, i: usize) {
        self.values[i].fetch_sub(1, Ordering::Relaxed);
    }

    /// Sets figure `i` (a gauge).
    pub fn set(&self, i: usize, v: i64) {
        self.values[i].store(v as u64, Ordering::Relaxed);
    }

    /// Figure `i` (gauges may be negative transiently, so signed).
    pub fn get(&self, i: usize) -> i64 {
        self.values[i].load(Ordering::Relaxed) as i64
    }
}

/// A family: metric names with their kinds, one label, and a row per label value.
#[derive(Debug)]
pub struct LabelledMetrics {
    /// The label's name (`target`).
    pub label: &'static str,
    /// Metric names (full Prometheus names) and kinds.
    pub figures: &'static [(&'static str, FigureKind)],
    rows: Mutex<Vec<(String, Arc<LabelledRow>)>>,
}

impl LabelledMetrics {
    pub(crate) fn new(
        label: &'static str,
        figures: &'static [(&'static str, FigureKind)],
    ) -> LabelledMetrics {
        LabelledMetrics {
            label,
            figures,
            rows: Mutex::new(Vec::new()),
        }
    }

    /// The row of `value`, created at zero on first use (later calls share it, so
    /// counters survive a target removed and added again).
    pub fn row(&self, value: &str) -> Arc<LabelledRow> {
        let mut rows = self.rows.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((_, r)) = rows.iter().find(|(v, _)| v == value) {
            return r.clone();
        }
        let row = Arc::new(LabelledRow {
            values: self.figures.iter().map(|_| AtomicU64::new(0)).collect(),
        });
        rows.push((value.to_string(), row.clone()));
        row
    }

    /// Every row with its label value, in creation order.
    pub fn rows(&self) -> Vec<(String, Arc<LabelledRow>)> {
        self.rows.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FIGS: &[(&str, FigureKind)] =
        &[("x_total", FigureKind::Counter), ("y", FigureKind::Gauge)];

    #[test]
    fn rows_are_shared_by_value() {
        let m = LabelledMetrics::new("target", FIGS);
        let a = m.row("t1");
        a.inc(0);
        m.row("t1").inc(0);
        m.row("t2").inc(1);
        m.row("t2").dec(1);
        m.row("t2").dec(1);
        assert_eq!(a.get(0), 2);
        assert_eq!(m.row("t2").get(1), -1);
        assert_eq!(m.rows().len(), 2);
    }
}
