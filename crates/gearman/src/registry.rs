//! Who is attached to what: the Gearman-only state shared by all Gearman connections.
//!
//! The engine knows jobs and leases; it does not know that a Gearman client is waiting for
//! a job's WORK_* packets, what a worker reported as progress, or which functions an admin
//! created. That lives here, behind one mutex. Lock order: the broker's engine lock first,
//! then this one; never the other way round.

use std::collections::{BTreeMap, HashMap, HashSet};

use bytes::Bytes;
use jobyard_engine::{ConnId, JobId};
use tokio::sync::mpsc::UnboundedSender;

use crate::packet::{kind, response};

/// One Gearman connection as other connections and the admin commands see it.
#[derive(Debug)]
pub(crate) struct ConnInfo {
    /// Packets forwarded to this connection (WORK_* of jobs it waits for).
    pub tx: UnboundedSender<Bytes>,
    /// Whether WORK_EXCEPTION is forwarded as is (else as WORK_FAIL).
    pub exceptions: bool,
    /// Set by SET_CLIENT_ID; `-` until then.
    pub client_id: Bytes,
    /// Ability names, oldest first (duplicates kept, as gearmand does).
    pub abilities: Vec<Bytes>,
    pub fd: i32,
    pub ip: String,
    /// Jobs this connection waits for as a foreground client.
    pub waiting_on: HashSet<JobId>,
}

/// A function known to Gearman (created by a submit, CAN_DO or `create function`).
#[derive(Debug, Default)]
pub(crate) struct Function {
    /// maxqueue limits for HIGH, NORMAL, LOW; 0 = unlimited.
    pub limits: [u32; 3],
}

/// What Gearman remembers about one job beyond the engine's record.
#[derive(Debug, Default)]
pub(crate) struct Tracked {
    /// Waiting foreground clients, in attach order (a client attached twice is listed twice,
    /// so it gets each packet twice, as from gearmand).
    pub clients: Vec<ConnId>,
    /// Last WORK_STATUS numerator and denominator while running.
    pub progress: (u32, u32),
    /// The reducer of a SUBMIT_REDUCE_JOB*, for JOB_ASSIGN_ALL.
    pub reducer: Option<Bytes>,
}

/// All Gearman-side state. See the module comment for the lock order.
#[derive(Debug, Default)]
pub(crate) struct Registry {
    pub conns: HashMap<ConnId, ConnInfo>,
    pub functions: BTreeMap<Bytes, Function>,
    pub jobs: HashMap<JobId, Tracked>,
}

impl Registry {
    /// Adds `conn` as a waiting client of `job`.
    pub fn attach(&mut self, job: JobId, conn: ConnId) {
        self.jobs.entry(job).or_default().clients.push(conn);
        if let Some(c) = self.conns.get_mut(&conn) {
            c.waiting_on.insert(job);
        }
    }

    /// Number of waiting clients of a job.
    pub fn client_count(&self, job: JobId) -> usize {
        self.jobs.get(&job).map_or(0, |t| t.clients.len())
    }

    /// Sends one packet to every waiting client of `job`.
    pub fn forward(&self, job: JobId, t: u32, body: &[u8]) {
        let Some(tracked) = self.jobs.get(&job) else {
            return;
        };
        if tracked.clients.is_empty() {
            return;
        }
        let packet = response(t, &[body]);
        for c in &tracked.clients {
            if let Some(info) = self.conns.get(c) {
                let _ = info.tx.send(packet.clone());
            }
        }
    }

    /// Ends a job's tracking and sends its last packet to each client: WORK_EXCEPTION goes
    /// to clients with the `exceptions` option, WORK_FAIL `handle` to the others.
    pub fn finish(&mut self, job: JobId, t: u32, body: &[u8], handle: &[u8]) {
        let Some(tracked) = self.jobs.remove(&job) else {
            return;
        };
        let packet = response(t, &[body]);
        let fail = response(kind::WORK_FAIL, &[handle]);
        for c in &tracked.clients {
            if let Some(info) = self.conns.get_mut(c) {
                info.waiting_on.remove(&job);
                let p = if t == kind::WORK_EXCEPTION && !info.exceptions {
                    fail.clone()
                } else {
                    packet.clone()
                };
                let _ = info.tx.send(p);
            }
        }
    }

    /// Forgets a job that ended without a result for anyone (nobody waits for it).
    pub fn forget(&mut self, job: JobId) {
        if let Some(tracked) = self.jobs.remove(&job) {
            for c in &tracked.clients {
                if let Some(info) = self.conns.get_mut(c) {
                    info.waiting_on.remove(&job);
                }
            }
        }
    }

    /// Resets a job's progress (it was requeued or handed out anew).
    pub fn reset_progress(&mut self, job: JobId) {
        if let Some(t) = self.jobs.get_mut(&job) {
            t.progress = (0, 0);
        }
    }

    /// Ability entries registered for `name` across all connections (duplicates count).
    pub fn workers_for(&self, name: &[u8]) -> usize {
        self.conns
            .values()
            .map(|c| c.abilities.iter().filter(|a| &a[..] == name).count())
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::sync::mpsc;

    fn conn(reg: &mut Registry, id: ConnId, exceptions: bool) -> mpsc::UnboundedReceiver<Bytes> {
        let (tx, rx) = mpsc::unbounded_channel();
        reg.conns.insert(
            id,
            ConnInfo {
                tx,
                exceptions,
                client_id: Bytes::from_static(b"-"),
                abilities: vec![],
                fd: 0,
                ip: String::new(),
                waiting_on: HashSet::new(),
            },
        );
        rx
    }

    #[test]
    fn exceptions_reach_each_client_in_its_own_variant() {
        let mut reg = Registry::default();
        let mut plain = conn(&mut reg, 1, false);
        let mut exc = conn(&mut reg, 2, true);
        reg.attach(7, 1);
        reg.attach(7, 2);
        reg.forward(7, kind::WORK_DATA, b"h\0d");
        reg.finish(7, kind::WORK_EXCEPTION, b"h\0boom", b"h");
        assert_eq!(&plain.try_recv().unwrap()[12..], b"h\0d");
        let last = plain.try_recv().unwrap();
        assert_eq!(&last[4..8], &kind::WORK_FAIL.to_be_bytes());
        assert_eq!(&last[12..], b"h", "no trailing NUL (gearmand's is a bug)");
        exc.try_recv().unwrap();
        let last = exc.try_recv().unwrap();
        assert_eq!(&last[4..8], &kind::WORK_EXCEPTION.to_be_bytes());
        assert!(reg.jobs.is_empty());
        assert!(reg.conns[&1].waiting_on.is_empty());
    }
}
