//! The live jobs by id, kept compact: memory per queued job is a product target.
//!
//! A `HashMap<JobId, Box<Job>>` costs a 96-byte allocation per job plus a 16-byte table
//! entry (id and pointer) at a load of 50–87 %. Here jobs sit in fixed-size pages of slots
//! (no allocation per job, no copying when the table grows), and the hash table holds only
//! a 4-byte slot number; the id it is looked up by is read from the slot.

use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;

use hashbrown::HashTable;

use crate::job::Job;
use crate::JobId;

/// Slots per page: 88 KiB pages, so a page is one allocation served by `mmap` and a
/// half-empty last page costs little next to a table of many jobs.
const PAGE: usize = 1024;

/// Jobs by id.
#[derive(Default)]
pub(crate) struct JobTable {
    pages: Vec<Box<[Option<Job>]>>,
    /// Slots emptied by removals, reused first.
    free: Vec<u32>,
    index: HashTable<u32>,
    hasher: RandomState,
}

impl JobTable {
    fn slot(&self, n: u32) -> &Option<Job> {
        &self.pages[n as usize / PAGE][n as usize % PAGE]
    }

    fn slot_mut(&mut self, n: u32) -> &mut Option<Job> {
        &mut self.pages[n as usize / PAGE][n as usize % PAGE]
    }

    fn find(&self, id: JobId) -> Option<u32> {
        let pages = &self.pages;
        let holds = |&n: &u32| {
            pages[n as usize / PAGE][n as usize % PAGE]
                .as_ref()
                .is_some_and(|job| job.id == id)
        };
        self.index.find(self.hasher.hash_one(id), holds).copied()
    }

    pub fn get(&self, id: &JobId) -> Option<&Job> {
        self.find(*id).and_then(|n| self.slot(n).as_ref())
    }

    pub fn get_mut(&mut self, id: &JobId) -> Option<&mut Job> {
        let n = self.find(*id)?;
        self.slot_mut(n).as_mut()
    }

    pub fn contains_key(&self, id: &JobId) -> bool {
        self.find(*id).is_some()
    }

    pub fn len(&self) -> usize {
        self.index.len()
    }

    /// Adds a job, replacing one with the same id.
    pub fn insert(&mut self, job: Job) {
        let id = job.id;
        if let Some(old) = self.get_mut(&id) {
            *old = job;
            return;
        }
        let n = match self.free.pop() {
            Some(n) => n,
            None => self.grow(),
        };
        *self.slot_mut(n) = Some(job);
        let (pages, hasher) = (&self.pages, &self.hasher);
        let rehash = |&m: &u32| {
            let job = pages[m as usize / PAGE][m as usize % PAGE].as_ref();
            hasher.hash_one(job.expect("indexed slots hold jobs").id)
        };
        self.index.insert_unique(hasher.hash_one(id), n, rehash);
    }

    /// A new page; returns its first slot and frees the rest.
    fn grow(&mut self) -> u32 {
        let first = (self.pages.len() * PAGE) as u32;
        self.pages.push((0..PAGE).map(|_| None).collect());
        self.free.extend((first + 1..first + PAGE as u32).rev());
        first
    }

    pub fn remove(&mut self, id: &JobId) -> Option<Job> {
        let pages = &self.pages;
        let holds = |&n: &u32| {
            pages[n as usize / PAGE][n as usize % PAGE]
                .as_ref()
                .is_some_and(|job| job.id == *id)
        };
        let (n, _) = self
            .index
            .find_entry(self.hasher.hash_one(*id), holds)
            .ok()?
            .remove();
        self.free.push(n);
        self.slot_mut(n).take()
    }

    pub fn values(&self) -> impl Iterator<Item = &Job> + '_ {
        self.pages.iter().flat_map(|page| page.iter().flatten())
    }

    pub fn keys(&self) -> impl Iterator<Item = &JobId> + '_ {
        self.values().map(|job| &job.id)
    }
}

impl std::fmt::Debug for JobTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_map()
            .entries(self.values().map(|j| (j.id, j)))
            .finish()
    }
}

impl std::ops::Index<&JobId> for JobTable {
    type Output = Job;
    fn index(&self, id: &JobId) -> &Job {
        self.get(id).expect("no job with this id")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::job::{Body, JobState};

    fn job(id: JobId) -> Job {
        Job {
            id,
            queue: 0,
            pri: 0,
            ttr: 0,
            delay: 0,
            state: JobState::Ready,
            due: 0,
            owner: 0,
            created: 0,
            durable: true,
            reserves: 0,
            timeouts: 0,
            releases: 0,
            buries: 0,
            kicks: 0,
            body: Body::Mem(Box::from(&id.to_le_bytes()[..])),
        }
    }

    /// An empty slot costs no more than a job: `Option<Job>` uses the state's niche.
    #[test]
    fn a_slot_is_as_small_as_a_job() {
        assert_eq!(
            std::mem::size_of::<Option<Job>>(),
            std::mem::size_of::<Job>()
        );
    }

    #[test]
    fn jobs_are_found_by_id_across_pages_and_slots_are_reused() {
        let mut t = JobTable::default();
        for id in 1..=3000 {
            t.insert(job(id));
        }
        assert_eq!(t.len(), 3000);
        assert_eq!(t[&2500].body.in_memory(), Some(&2500u64.to_le_bytes()[..]));
        for id in (1..=3000).step_by(2) {
            assert_eq!(t.remove(&id).map(|j| j.id), Some(id));
        }
        assert!(t.remove(&1).is_none());
        assert!(!t.contains_key(&1) && t.contains_key(&2));
        for id in 3001..=4500 {
            t.insert(job(id));
        }
        assert_eq!(t.len(), 3000);
        assert_eq!(t.pages.len(), 3, "freed slots are used before a new page");
        let mut ids: Vec<JobId> = t.keys().copied().collect();
        ids.sort_unstable();
        let want: Vec<JobId> = (2..=3000).step_by(2).chain(3001..=4500).collect();
        assert_eq!(ids, want);
        t.get_mut(&4500).expect("present").pri = 7;
        assert_eq!(t[&4500].pri, 7);
    }
}
