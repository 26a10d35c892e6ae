//! Who is attached to what: the Gearman-only state shared by all Gearman connections.
//!
//! The engine knows jobs, leases and who watches a job (a foreground client waiting for
//! its result is a watcher, and hears the end from the engine whichever protocol ended it).
//! It does not know a Gearman worker's abilities and client id (admin `workers`), the last
//! progress a worker reported (GET_STATUS), a reduce job's reducer, or which functions an
//! admin created. That lives here, behind one mutex. Lock order: the broker's engine lock
//! first, then this one; never the other way round.

use std::collections::{BTreeMap, HashMap};

use bytes::Bytes;
use jobyard_engine::{ConnId, Engine, JobId};

use crate::functions::Function;

/// One Gearman connection as the admin commands see it.
#[derive(Debug)]
pub(crate) struct ConnInfo {
    /// Set by SET_CLIENT_ID; `-` until then.
    pub client_id: Bytes,
    /// Ability names, oldest first (duplicates kept, as gearmand does).
    pub abilities: Vec<Bytes>,
    pub fd: i32,
    pub ip: String,
}

/// What Gearman remembers about one job beyond the engine's record.
#[derive(Debug, Default)]
pub(crate) struct Tracked {
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
    jobs: HashMap<JobId, Tracked>,
    /// Size of `jobs` after its last pruning: it is pruned again when it doubles.
    pruned_at: usize,
}

impl Registry {
    /// What is tracked about a job, if anything.
    pub fn tracked(&self, job: JobId) -> Option<&Tracked> {
        self.jobs.get(&job)
    }

    /// What is tracked about a job, created if needed. Jobs can end without Gearman
    /// hearing of it (a beanstalkd consumer deletes one nobody watches), so entries of
    /// jobs that no longer exist are pruned whenever the table has doubled: memory stays
    /// proportional to the live jobs without a periodic sweep.
    pub fn track(&mut self, engine: &Engine, job: JobId) -> &mut Tracked {
        if !self.jobs.contains_key(&job) && self.jobs.len() >= (2 * self.pruned_at).max(64) {
            self.jobs.retain(|id, _| engine.job(*id).is_some());
            self.pruned_at = self.jobs.len();
        }
        self.jobs.entry(job).or_default()
    }

    /// Forgets a job that ended.
    pub fn forget(&mut self, job: JobId) {
        self.jobs.remove(&job);
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
    use jobyard_engine::{EngineCore, NewJob};

    #[test]
    fn entries_of_jobs_ended_elsewhere_are_pruned_as_the_table_grows() {
        let mut engine = EngineCore::new();
        let q = engine.queue_id_or_create(b"f");
        engine.pin(q);
        let mut reg = Registry::default();
        let ids: Vec<JobId> = (0..200)
            .map(|_| {
                engine
                    .put_job(
                        NewJob {
                            queue: q,
                            ..NewJob::default()
                        },
                        1,
                    )
                    .id
            })
            .collect();
        for &id in &ids {
            reg.track(&engine, id).progress = (1, 2);
            assert!(engine.delete(0, id), "ended without Gearman hearing of it");
        }
        assert!(reg.jobs.len() < 200, "pruned: {}", reg.jobs.len());
        let live = engine
            .put_job(
                NewJob {
                    queue: q,
                    ..NewJob::default()
                },
                1,
            )
            .id;
        reg.track(&engine, live).progress = (3, 4);
        assert_eq!(reg.tracked(live).unwrap().progress, (3, 4));
    }
}
