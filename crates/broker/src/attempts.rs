//! Each job's last attempts, for the operator: when each lease began and ended, which
//! session held it, how it ended and the error a failure carried.
//!
//! Fed by the engine's lease closes ([`jobyard_engine::LeaseClosed`]) as the broker commits,
//! under the engine lock: a job never leased has no entry and costs nothing. A job keeps
//! its newest [`ATTEMPTS_PER_JOB`] attempts; once it has ended they move to a list of the
//! [`FINISHED_KEPT`] most recently ended jobs, so a finished job's page still shows how
//! it went for a while. A job that ends without a lease ending (an operator's delete of a
//! buried job) is noticed by [`AttemptLog::sweep`], which the history sampler runs once a
//! second over a bounded slice of the jobs. Memory only: a restart forgets every attempt.

use std::collections::{HashMap, VecDeque};

use jobyard_engine::{ConnId, JobId, LeaseClose, LeaseClosed, Millis};

/// Attempts kept per job (the newest).
pub const ATTEMPTS_PER_JOB: usize = 16;
/// Ended jobs whose attempts are kept (the most recently ended).
pub const FINISHED_KEPT: usize = 4096;
/// Bytes of a failure's error text kept.
pub const ERROR_BYTES: usize = 512;
/// Live jobs checked per sweep.
pub const SWEEP_BATCH: usize = 1024;

/// One lease of a job and how it ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Attempt {
    /// Wall-clock milliseconds the lease began and ended.
    pub started_ms: Millis,
    pub ended_ms: Millis,
    /// The session (connection or worker) that held it.
    pub holder: ConnId,
    pub how: LeaseClose,
    /// A failure's error text, cut to [`ERROR_BYTES`].
    pub error: Option<Box<str>>,
}

/// The attempts of live and recently ended jobs.
#[derive(Debug, Default)]
pub(crate) struct AttemptLog {
    live: HashMap<JobId, VecDeque<Attempt>>,
    /// Live jobs in the order the sweep visits them.
    sweep_order: VecDeque<JobId>,
    finished: HashMap<JobId, VecDeque<Attempt>>,
    finished_order: VecDeque<JobId>,
    /// Lease closes taken from the engine this turn (kept to reuse its allocation).
    pub(crate) buffer: Vec<LeaseClosed>,
}

impl AttemptLog {
    /// Records the closes in `buffer`: `now_us` is the lease clock and `now_ms` the wall
    /// clock at the commit; `exists` tells whether a job is still in the engine.
    pub(crate) fn record(&mut self, now_us: u64, now_ms: Millis, exists: impl Fn(JobId) -> bool) {
        let closes = std::mem::take(&mut self.buffer);
        for close in &closes {
            let lasted_ms = close.started.map_or(0, |s| now_us.saturating_sub(s) / 1000);
            let attempt = Attempt {
                started_ms: now_ms.saturating_sub(lasted_ms),
                ended_ms: now_ms,
                holder: close.holder,
                how: close.how,
                error: close.error.as_ref().map(|e| cut(e)),
            };
            if exists(close.job) {
                let list = self.live.entry(close.job).or_insert_with(|| {
                    self.sweep_order.push_back(close.job);
                    VecDeque::new()
                });
                push_bounded(list, attempt);
            } else {
                // Most jobs end with their first lease: straight to the ended ones, with no
                // stop in the live map.
                let mut list = self.live.remove(&close.job).unwrap_or_default();
                push_bounded(&mut list, attempt);
                self.keep_ended(close.job, list);
            }
        }
        self.buffer = closes;
        self.buffer.clear();
    }

    /// Keeps an ended job's attempts among the recently ended ones.
    fn keep_ended(&mut self, job: JobId, list: VecDeque<Attempt>) {
        if self.finished_order.len() == FINISHED_KEPT {
            if let Some(oldest) = self.finished_order.pop_front() {
                self.finished.remove(&oldest);
            }
        }
        self.finished_order.push_back(job);
        self.finished.insert(job, list);
    }

    /// Checks up to [`SWEEP_BATCH`] live jobs and moves those that ended without a lease
    /// ending to the recently ended ones.
    ///
    /// Entries of jobs that ended through a lease close are dropped on the way without
    /// counting towards the batch: they accumulate no faster than leases end, so the
    /// sweep's order never holds more than a second's worth of them beyond the live jobs.
    pub(crate) fn sweep(&mut self, exists: impl Fn(JobId) -> bool) {
        let mut checked = 0;
        for _ in 0..self.sweep_order.len() {
            if checked == SWEEP_BATCH {
                break;
            }
            let Some(job) = self.sweep_order.pop_front() else {
                break;
            };
            if !self.live.contains_key(&job) {
                continue;
            }
            checked += 1;
            if exists(job) {
                self.sweep_order.push_back(job);
            } else if let Some(list) = self.live.remove(&job) {
                self.keep_ended(job, list);
            }
        }
    }

    /// A job's attempts, oldest first, and whether the job has ended.
    pub(crate) fn of(&self, job: JobId) -> Option<(Vec<Attempt>, bool)> {
        if let Some(list) = self.live.get(&job) {
            return Some((list.iter().cloned().collect(), false));
        }
        let list = self.finished.get(&job)?;
        Some((list.iter().cloned().collect(), true))
    }
}

/// Adds the newest attempt, dropping the oldest past [`ATTEMPTS_PER_JOB`].
fn push_bounded(list: &mut VecDeque<Attempt>, attempt: Attempt) {
    if list.len() == ATTEMPTS_PER_JOB {
        list.pop_front();
    }
    list.push_back(attempt);
}

/// The error text kept: valid UTF-8 (lossy), at most [`ERROR_BYTES`] bytes.
fn cut(error: &[u8]) -> Box<str> {
    let text = String::from_utf8_lossy(&error[..error.len().min(ERROR_BYTES)]);
    let mut end = text.len().min(ERROR_BYTES);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text[..end].into()
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use super::*;

    fn close(job: JobId, how: LeaseClose, error: Option<&'static str>) -> LeaseClosed {
        LeaseClosed {
            job,
            holder: 7,
            how,
            started: Some(1_000_000),
            error: error.map(|e| Bytes::from_static(e.as_bytes())),
        }
    }

    #[test]
    fn attempts_are_kept_per_job_bounded_and_moved_when_it_ends() {
        let mut log = AttemptLog::default();
        for _ in 0..ATTEMPTS_PER_JOB + 3 {
            log.buffer.push(close(1, LeaseClose::Released, None));
        }
        log.buffer.push(close(2, LeaseClose::Expired, None));
        log.record(3_000_000, 10_000, |_| true);
        let (one, ended) = log.of(1).unwrap();
        assert_eq!(one.len(), ATTEMPTS_PER_JOB);
        assert!(!ended);
        assert_eq!((one[0].started_ms, one[0].ended_ms), (8_000, 10_000));
        assert_eq!(one[0].holder, 7);

        log.buffer.push(close(1, LeaseClose::Failed, Some("boom")));
        log.record(3_000_000, 10_000, |id| id != 1);
        let (one, ended) = log.of(1).unwrap();
        assert!(ended, "a finished job shows its last attempts");
        let last = one.last().unwrap();
        assert_eq!(
            (last.how, last.error.as_deref()),
            (LeaseClose::Failed, Some("boom"))
        );
        assert!(log.of(3).is_none(), "a job never leased has nothing");
    }

    #[test]
    fn a_job_gone_without_a_lease_ending_is_swept_and_old_finished_ones_forgotten() {
        let mut log = AttemptLog::default();
        log.buffer.push(close(5, LeaseClose::Buried, None));
        log.record(2_000_000, 5_000, |_| true);
        log.sweep(|_| true);
        assert!(!log.of(5).unwrap().1);
        log.sweep(|_| false);
        assert!(log.of(5).unwrap().1, "deleted while buried: ended");
        assert!(log.live.is_empty() && log.sweep_order.is_empty());

        // Jobs released, then ended by a lease close, leave only stale entries: one sweep
        // drops them all, however many.
        for job in 1_000_000..1_000_000 + 3 * SWEEP_BATCH as u64 {
            log.buffer.push(close(job, LeaseClose::Released, None));
        }
        log.record(2_000_000, 5_000, |_| true);
        for job in 1_000_000..1_000_000 + 3 * SWEEP_BATCH as u64 {
            log.buffer.push(close(job, LeaseClose::Ok, None));
        }
        log.record(2_000_000, 5_000, |_| false);
        log.sweep(|_| true);
        assert!(log.sweep_order.is_empty());

        for job in 100..100 + FINISHED_KEPT as u64 {
            log.buffer.push(close(job, LeaseClose::Ok, None));
        }
        log.record(2_000_000, 5_000, |_| false);
        assert!(log.of(5).is_none(), "the oldest ended job is forgotten");
        assert_eq!(log.finished.len(), FINISHED_KEPT);
    }

    #[test]
    fn error_text_is_cut_on_a_character_boundary() {
        let long = "é".repeat(ERROR_BYTES);
        let kept = cut(long.as_bytes());
        assert!(kept.len() <= ERROR_BYTES && kept.chars().all(|c| c == 'é'));
    }
}
