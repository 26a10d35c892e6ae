//! One metrics registry for the whole server.
//!
//! The hot path only bumps atomics that a front end got once, at start-up; nothing here is
//! looked up by name per command. Readers (beanstalkd `stats`, Gearman admin `status`,
//! Prometheus) walk the registry when asked. Per-queue figures live in the engine's
//! [`jobyard_engine::Queue`] (they change in the same transitions as the queue), the log's
//! in [`jobyard_storage::LogStats`]; this registry holds what belongs to neither: each
//! protocol's connections and commands, compaction, and the lease-to-complete histograms
//! ([`crate::lease_latency`]: recorded per completed lease through a handle cached by queue
//! id, so nothing is looked up by name per job either).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crate::labelled::{FigureKind, LabelledMetrics};

/// Counters of one protocol front end.
#[derive(Debug)]
pub struct ProtocolMetrics {
    /// The front end's name (`beanstalk`, `gearman`, ...), used as a label.
    pub name: &'static str,
    /// Sessions open now.
    pub connections: AtomicU64,
    /// Sessions opened since start.
    pub connections_total: AtomicU64,
    /// Sessions refused because the connection limit was reached.
    pub refused: AtomicU64,
    /// Jobs this protocol created, completed (ended ok) and failed, since start.
    pub jobs_created: AtomicU64,
    pub jobs_completed: AtomicU64,
    pub jobs_failed: AtomicU64,
    commands: Box<[AtomicU64]>,
    command_names: &'static [&'static str],
}

impl ProtocolMetrics {
    /// Counts one command, by its index in the names the front end registered.
    pub fn count(&self, command: usize) {
        self.commands[command].fetch_add(1, Ordering::Relaxed);
    }

    /// Each command name with its count, in registration order.
    pub fn commands(&self) -> impl Iterator<Item = (&'static str, u64)> + '_ {
        self.command_names
            .iter()
            .zip(self.commands.iter())
            .map(|(n, c)| (*n, c.load(Ordering::Relaxed)))
    }

    /// The count of one command.
    pub fn command(&self, command: usize) -> u64 {
        self.commands[command].load(Ordering::Relaxed)
    }

    /// Bumps a gauge or counter by one.
    pub fn inc(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// Lowers a gauge by one.
    pub fn dec(counter: &AtomicU64) {
        counter.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Counters of log compaction.
#[derive(Debug, Default)]
pub struct CompactionMetrics {
    /// Snapshots started.
    pub runs: AtomicU64,
    /// Longest time the engine lock was held for one chunk of a snapshot, in microseconds:
    /// the pause a compaction imposes on connections.
    pub max_pause_us: AtomicU64,
    /// Total time the engine lock was held for snapshot chunks, in microseconds.
    pub pause_us_total: AtomicU64,
}

/// The registry.
#[derive(Debug, Default)]
pub struct Metrics {
    protocols: Mutex<Vec<Arc<ProtocolMetrics>>>,
    labelled: Mutex<Vec<Arc<LabelledMetrics>>>,
    pub compaction: CompactionMetrics,
    /// Lease-to-complete histograms per queue, recorded as the broker commits.
    pub lease_latency: crate::lease_latency::LeaseLatency,
}

impl Metrics {
    /// The counters of a protocol, registered on first call (later calls with the same name
    /// return the same counters, so a front end started twice shares them).
    pub fn protocol(
        &self,
        name: &'static str,
        command_names: &'static [&'static str],
    ) -> Arc<ProtocolMetrics> {
        let mut list = self.protocols.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(p) = list.iter().find(|p| p.name == name) {
            return p.clone();
        }
        let p = Arc::new(ProtocolMetrics {
            name,
            connections: AtomicU64::new(0),
            connections_total: AtomicU64::new(0),
            refused: AtomicU64::new(0),
            jobs_created: AtomicU64::new(0),
            jobs_completed: AtomicU64::new(0),
            jobs_failed: AtomicU64::new(0),
            commands: command_names.iter().map(|_| AtomicU64::new(0)).collect(),
            command_names,
        });
        list.push(p.clone());
        p
    }

    /// A family of per-label figures (e.g. per jobd target), registered on first call;
    /// later calls with the same first figure name return the same family.
    pub fn labelled(
        &self,
        label: &'static str,
        figures: &'static [(&'static str, FigureKind)],
    ) -> Arc<LabelledMetrics> {
        let mut list = self.labelled.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(f) = list.iter().find(|f| f.figures.first() == figures.first()) {
            return f.clone();
        }
        let f = Arc::new(LabelledMetrics::new(label, figures));
        list.push(f.clone());
        f
    }

    /// Every registered family of per-label figures.
    pub fn families(&self) -> Vec<Arc<LabelledMetrics>> {
        self.labelled
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Every registered protocol, in registration order.
    pub fn protocols(&self) -> Vec<Arc<ProtocolMetrics>> {
        self.protocols
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_protocol_registered_twice_shares_its_counters() {
        let m = Metrics::default();
        let a = m.protocol("beanstalk", &["cmd-put", "cmd-delete"]);
        let b = m.protocol("beanstalk", &["cmd-put", "cmd-delete"]);
        a.count(1);
        b.count(1);
        ProtocolMetrics::inc(&a.connections);
        assert_eq!(b.command(1), 2);
        assert_eq!(
            b.commands().collect::<Vec<_>>(),
            vec![("cmd-put", 0), ("cmd-delete", 2)]
        );
        assert_eq!(m.protocols().len(), 1);
        assert_eq!(b.connections.load(Ordering::Relaxed), 1);
    }
}
