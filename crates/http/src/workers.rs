//! Worker sessions: who owns an HTTP lease.
//!
//! HTTP requests come and go on any connection, so a lease cannot belong to a connection
//! as it does in beanstalkd. It belongs to a worker session instead: a session id from the
//! broker (`broker.connect()`), a mailbox where the engine's notices for it arrive (a
//! blocked lease being served), and a place from the gate, so the connection limit counts
//! workers too. A session ends when it is deleted, when the server stops, or when it has
//! been idle (no request, no lease held) for the configured time; ending it gives back
//! whatever it still holds, as a beanstalkd disconnect does.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use jobyard_broker::{Broker, Mailbox, ProtocolMetrics};
use jobyard_engine::ConnId;
use jobyard_net::{Gate, Slot};

use crate::error::ApiError;

/// One worker session.
pub struct Worker {
    /// Its session id in the broker (what owns its leases).
    pub conn: ConnId,
    /// Held by the lease request in progress: one at a time per worker.
    pub(crate) mailbox: tokio::sync::Mutex<Mailbox>,
    last_seen: AtomicU64,
    broker: Arc<Broker>,
    _slot: Slot,
}

impl Worker {
    /// The id clients use for it.
    pub fn id(&self) -> String {
        self.conn.to_string()
    }

    fn seen(&self) {
        self.last_seen.store(Broker::now(), Ordering::Relaxed);
    }
}

impl Drop for Worker {
    /// Forgets the session in the engine: what it held is ready again. The last reference
    /// is dropped outside any engine transaction (see [`Workers`]).
    fn drop(&mut self) {
        self.broker.disconnect(self.conn);
    }
}

/// The live worker sessions.
///
/// Lock order: this table's mutex, then the engine's; a handler never takes this one
/// while it holds an engine transaction, and never drops a [`Worker`] inside one.
pub struct Workers {
    map: Mutex<HashMap<ConnId, Arc<Worker>>>,
    idle: Duration,
}

impl Workers {
    /// An empty table whose sessions end after `idle` without a request or a lease.
    pub fn new(idle: Duration) -> Workers {
        Workers {
            map: Mutex::new(HashMap::new()),
            idle,
        }
    }

    /// How long a session may be idle before it ends.
    pub fn idle_timeout(&self) -> Duration {
        self.idle
    }

    fn table(&self) -> std::sync::MutexGuard<'_, HashMap<ConnId, Arc<Worker>>> {
        self.map.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A new session, if the gate has a place for it.
    pub fn create(
        &self,
        broker: &Arc<Broker>,
        gate: &Gate,
        metrics: &Arc<ProtocolMetrics>,
    ) -> Result<Arc<Worker>, ApiError> {
        if gate.is_shutting_down() {
            return Err(ApiError::shutting_down());
        }
        let Some(slot) = gate.try_enter("an HTTP worker session") else {
            ProtocolMetrics::inc(&metrics.refused);
            return Err(ApiError::too_many_sessions());
        };
        let (conn, mailbox) = broker.connect();
        let worker = Arc::new(Worker {
            conn,
            mailbox: tokio::sync::Mutex::new(mailbox),
            last_seen: AtomicU64::new(Broker::now()),
            broker: broker.clone(),
            _slot: slot,
        });
        self.table().insert(conn, worker.clone());
        Ok(worker)
    }

    /// The session a client names, marked as seen.
    pub fn get(&self, id: &str) -> Result<Arc<Worker>, ApiError> {
        let worker = id
            .parse::<ConnId>()
            .ok()
            .and_then(|conn| self.table().get(&conn).cloned())
            .ok_or_else(|| ApiError::unknown_worker(id))?;
        worker.seen();
        Ok(worker)
    }

    /// Ends a session (it is forgotten once the requests using it finish).
    pub fn remove(&self, id: &str) -> Result<Arc<Worker>, ApiError> {
        let worker = id
            .parse::<ConnId>()
            .ok()
            .and_then(|conn| self.table().remove(&conn))
            .ok_or_else(|| ApiError::unknown_worker(id))?;
        Ok(worker)
    }

    /// Ends the sessions idle for longer than the timeout that hold no lease and have no
    /// request in progress. Returns how many ended.
    pub fn sweep(&self, broker: &Broker) -> usize {
        let now = Broker::now();
        let idle_ms = self.idle.as_millis() as u64;
        let ended: Vec<Arc<Worker>> = {
            let mut table = self.table();
            let candidates: Vec<ConnId> = table
                .values()
                // Only the table refers to it: no request is using it.
                .filter(|w| Arc::strong_count(w) == 1)
                .filter(|w| now.saturating_sub(w.last_seen.load(Ordering::Relaxed)) >= idle_ms)
                .map(|w| w.conn)
                .collect();
            if candidates.is_empty() {
                return 0;
            }
            let idle: Vec<ConnId> = {
                let txn = broker.lock();
                candidates
                    .into_iter()
                    .filter(|&c| txn.held_by(c).next().is_none())
                    .collect()
            };
            idle.iter().filter_map(|c| table.remove(c)).collect()
        };
        // Dropped here, outside both locks: each drop disconnects its session.
        ended.len()
    }

    /// Ends every session (the server is stopping).
    pub fn clear(&self) {
        let all: Vec<Arc<Worker>> = self.table().drain().map(|(_, w)| w).collect();
        drop(all);
    }

    /// Sessions alive now.
    pub(crate) fn count(&self) -> usize {
        self.table().len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use jobyard_engine::{Lease, ReserveOutcome, WaitMode};

    fn setup(places: usize) -> (Arc<Broker>, Gate, Arc<ProtocolMetrics>, Workers) {
        let broker = Broker::in_memory();
        let metrics = broker.metrics().protocol("http", &[]);
        (
            broker,
            Gate::new(places),
            metrics,
            Workers::new(Duration::ZERO),
        )
    }

    #[test]
    fn an_idle_worker_ends_unless_it_holds_a_lease_or_is_in_use() {
        let (broker, gate, metrics, workers) = setup(4);
        let holder = workers.create(&broker, &gate, &metrics).unwrap();
        let idle = workers.create(&broker, &gate, &metrics).unwrap();
        let (idle_id, holder_conn) = (idle.id(), holder.conn);
        drop(idle);
        let id = {
            let mut txn = broker.lock();
            let q = txn.queue_id_or_create(b"q");
            let id = txn.put(q, 1, 0, 60, Bytes::from_static(b"x"), true, 1).id;
            let got = txn.reserve(
                holder_conn,
                &[q],
                WaitMode::Best,
                Lease::JobTtr,
                Some(0),
                false,
                1,
            );
            assert_eq!(got, ReserveOutcome::Reserved(id));
            id
        };
        assert_eq!(workers.sweep(&broker), 1, "the idle one ends");
        assert!(workers.get(&idle_id).is_err());
        let in_use = workers.get(&holder.id()).unwrap();
        assert!(broker.lock().release(holder_conn, id, 1, 0, 2));
        assert_eq!(workers.sweep(&broker), 0, "a request is using it");
        drop((in_use, holder));
        let id = {
            let mut txn = broker.lock();
            let q = txn.queue_id(b"q").unwrap();
            let got = txn.reserve(
                holder_conn,
                &[q],
                WaitMode::Best,
                Lease::JobTtr,
                Some(0),
                false,
                3,
            );
            assert_eq!(got, ReserveOutcome::Reserved(id));
            id
        };
        assert_eq!(workers.sweep(&broker), 0, "it holds a lease");
        assert_eq!(workers.count(), 1);
        assert!(broker.lock().release(holder_conn, id, 1, 0, 4));
        assert_eq!(workers.sweep(&broker), 1);
        assert_eq!(workers.count(), 0);
    }

    #[test]
    fn workers_take_places_from_the_gate_and_give_them_back_when_they_end() {
        let (broker, gate, metrics, workers) = setup(1);
        let w = workers.create(&broker, &gate, &metrics).unwrap();
        let err = workers.create(&broker, &gate, &metrics).err().unwrap();
        assert_eq!(err.code, "too_many_sessions");
        let id = w.id();
        drop(w);
        drop(workers.remove(&id).unwrap());
        assert!(workers.create(&broker, &gate, &metrics).is_ok());
        workers.clear();
        assert!(gate.try_enter("after clear").is_some());
        assert_eq!(workers.remove("nope").err().unwrap().code, "unknown_worker");
    }

    #[test]
    fn ending_a_worker_gives_its_jobs_back() {
        let (broker, gate, metrics, workers) = setup(2);
        let w = workers.create(&broker, &gate, &metrics).unwrap();
        let conn = w.conn;
        let id = {
            let mut txn = broker.lock();
            let q = txn.queue_id_or_create(b"q");
            let id = txn.put(q, 1, 0, 60, Bytes::from_static(b"x"), true, 1).id;
            txn.reserve(conn, &[q], WaitMode::Best, Lease::JobTtr, Some(0), false, 1);
            id
        };
        drop(w);
        drop(workers.remove(&conn.to_string()).unwrap());
        let txn = broker.lock();
        assert_eq!(txn.job(id).unwrap().state, jobyard_engine::JobState::Ready);
    }
}
