//! Creating jobs and reading them: puts, unique keys, attributes, peeks.

use bytes::Bytes;

use crate::change::{Change, PutState};
use crate::job::{Body, Job, JobState, LogRef};
use crate::queue::QueueId;
use crate::{Engine, JobId, Millis};

/// Log bytes a durable job costs besides its body and queue name: an estimate used only to
/// decide when compaction pays off.
const RECORD_OVERHEAD: u64 = 56;

/// Entries of a dropped-bodies list kept allocated between turns (16 bytes each), by the
/// engine and by callers of [`crate::EngineCore::move_dropped_bodies`] that reuse theirs: a usual
/// turn's fit; the list of a larger one is let go.
pub const KEEP_DROPPED_LIST: usize = 16 << 10;

/// Everything a new job is made of; [`Engine::put_job`] takes it.
#[derive(Clone, Debug, Default)]
pub struct NewJob {
    pub queue: QueueId,
    pub pri: u32,
    /// Lease length in seconds for [`crate::Lease::JobTtr`] reservations.
    pub ttr: u32,
    /// Not handed out before this wall-clock time (0 or past = ready now).
    pub ready_at: Millis,
    /// Seconds of delay to report in stats.
    pub delay: u32,
    pub body: Bytes,
    /// Optional key that no other live job of the queue may have.
    pub unique: Option<Bytes>,
    /// Whether the job is written to the log (and so survives a restart).
    pub durable: bool,
    /// What a front end wants kept with the job besides its body (a jobd row id, a flow
    /// job's routing, ...): opaque to the engine, logged with the put, dropped at the end.
    pub attrs: Option<Bytes>,
}

/// The result of [`Engine::put`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PutOutcome {
    pub id: JobId,
}

impl Engine {
    pub fn job(&self, id: JobId) -> Option<&Job> {
        self.jobs.get(&id)
    }

    /// Every live job, in no particular order. For admin listings that must cover all
    /// queues at once (Gearman's `show jobs`, `prioritystatus`).
    pub fn jobs(&self) -> impl Iterator<Item = &Job> + '_ {
        self.jobs.values()
    }

    pub fn job_count(&self) -> usize {
        self.jobs.len()
    }

    /// The id the next job will get.
    pub(crate) fn next_id(&self) -> JobId {
        self.next_id
    }

    /// Estimated bytes the durable jobs would take in a fresh log.
    pub(crate) fn live_bytes(&self) -> u64 {
        self.live_bytes + self.flows.bytes
    }

    /// Creates a job. A delay of zero makes it ready at once.
    #[allow(clippy::too_many_arguments)]
    pub fn put(
        &mut self,
        q: QueueId,
        pri: u32,
        delay_secs: u32,
        ttr: u32,
        body: Bytes,
        durable: bool,
        now: Millis,
    ) -> PutOutcome {
        let ready_at = if delay_secs > 0 {
            now + delay_secs as Millis * 1000
        } else {
            0
        };
        self.put_job(
            NewJob {
                queue: q,
                pri,
                ttr,
                ready_at,
                delay: delay_secs,
                body,
                unique: None,
                durable,
                attrs: None,
            },
            now,
        )
    }

    /// Creates a job from its full description. The caller checks uniqueness first with
    /// [`Engine::find_unique`]; a key already in use is taken over by the new job.
    pub fn put_job(&mut self, job: NewJob, now: Millis) -> PutOutcome {
        self.saw(now);
        let id = self.next_id;
        self.next_id += 1;
        self.total_jobs += 1;
        let state = if job.ready_at > now {
            PutState::Delayed(job.ready_at)
        } else {
            PutState::Ready
        };
        let q = job.queue;
        // A durable job keeps an exact-size copy and the record takes the caller's buffer
        // (freed once written); a job that is not logged takes the buffer itself.
        let (body, record_body): (Box<[u8]>, _) = if job.durable {
            (Box::from(&job.body[..]), Some(job.body))
        } else {
            (Vec::from(job.body).into_boxed_slice(), None)
        };
        if let Some(record_body) = record_body {
            self.changes.push(Change::Put {
                id,
                queue: self.queue(q).name.clone(),
                pri: job.pri,
                ttr: job.ttr,
                delay: job.delay,
                created: now,
                state,
                unique: job.unique.clone(),
                attrs: job.attrs.clone(),
                attempt: 0,
                body: record_body,
            });
        }
        self.insert_job(
            id,
            q,
            job.pri,
            job.ttr,
            job.delay,
            now,
            state,
            Body::Mem(body),
            job.durable,
        );
        if let Some(key) = job.unique {
            self.set_unique(id, q, key);
        }
        if let Some(attrs) = job.attrs {
            self.attrs.insert(id, attrs);
        }
        self.queue_mut(q).total_jobs += 1;
        self.serve_waiters(now);
        PutOutcome { id }
    }

    /// Keeps the bodies learned written in one turn in memory until later turns bring
    /// newer ones, up to `bytes` (see [`crate::hot_bodies`]); 0, the default, drops each as
    /// soon as it is written.
    pub(crate) fn set_hot_body_budget(&mut self, bytes: usize) {
        self.hot.set_budget(bytes);
    }

    /// Tells the engine that durable jobs' bodies are now readable at these places in the
    /// log (one turn's worth, in the order written), so their copies in memory may go: the
    /// bodies of earlier turns go now, but for the newest few (see [`crate::hot_bodies`]),
    /// these with a later turn (or now, past the hot budget). Ignored for a job that has
    /// ended by then, is not durable, or whose body is not that long (nothing else may be
    /// put in its place).
    pub(crate) fn bodies_written(&mut self, places: impl IntoIterator<Item = (JobId, LogRef)>) {
        let mut places = places.into_iter().peekable();
        if places.peek().is_none() {
            return; // not a turn: nothing new was written
        }
        if !self.hot.keeps() {
            for (id, at) in places {
                self.drop_body(id, at);
            }
            return;
        }
        let mut newest = 0;
        for (id, at) in places {
            self.hot.push(id, at);
            newest += 1;
            while let Some((id, at)) = self.hot.pop_over_budget() {
                self.drop_body(id, at);
            }
        }
        while let Some((id, at)) = self.hot.pop_earlier(newest) {
            self.drop_body(id, at);
        }
    }

    /// [`Engine::bodies_written`] for one body.
    pub(crate) fn body_written(&mut self, id: JobId, at: LogRef) {
        self.bodies_written([(id, at)]);
    }

    /// Tells the engine that compaction copied a durable job's body to `at`: the job keeps
    /// that place from now on, also when its body is still in memory (the place a pending
    /// [`Engine::body_written`] names is in a file about to be let go; it is then ignored).
    pub(crate) fn body_moved(&mut self, id: JobId, at: LogRef) {
        if let Some(job) = self.jobs.get_mut(&id) {
            if job.durable && job.body.len() == at.len() as usize {
                job.body = Body::Log(at);
            }
        }
    }

    /// Bodies written and still kept in memory under the hot budget, for stats and tests
    /// (also counting entries of jobs that ended since).
    pub(crate) fn hot_bodies(&self) -> usize {
        self.hot.len()
    }

    /// Moves the bodies whose jobs now name their places in the log instead into `into`.
    /// Freeing a turn's worth of bodies takes time; a caller holding a lock others wait
    /// for frees them after it lets go (otherwise they go with the next turn's). Moved,
    /// not handed over in a new `Vec`: the engine's list keeps its memory, and a caller
    /// that reuses `into` too frees no kilobyte-sized block per turn, which with glibc's
    /// malloc would sweep the bodies just freed out of its fast bins (docs/performance.md,
    /// the put cost).
    pub(crate) fn move_dropped_bodies(&mut self, into: &mut Vec<Box<[u8]>>) {
        into.append(&mut self.dropped);
        if self.dropped.capacity() > KEEP_DROPPED_LIST {
            self.dropped = Vec::new(); // an unusual turn's list is not kept for ever
        }
    }

    fn drop_body(&mut self, id: JobId, at: LogRef) {
        if let Some(job) = self.jobs.get_mut(&id) {
            if job.durable && matches!(&job.body, Body::Mem(b) if b.len() == at.len() as usize) {
                if let Body::Mem(b) = std::mem::replace(&mut job.body, Body::Log(at)) {
                    self.dropped.push(b);
                }
            }
        }
    }

    /// A job's attributes, if it was put with some.
    pub fn attrs_of(&self, id: JobId) -> Option<&Bytes> {
        self.attrs.get(&id)
    }

    pub(crate) fn set_unique(&mut self, id: JobId, q: QueueId, key: Bytes) {
        if let Some(old) = self.by_unique.insert((q, key.clone()), id) {
            self.unique_of.remove(&old);
        }
        self.unique_of.insert(id, key);
    }

    /// The live job of this queue that has this unique key.
    pub fn find_unique(&self, q: QueueId, key: &[u8]) -> Option<JobId> {
        self.by_unique
            .get(&(q, Bytes::copy_from_slice(key)))
            .copied()
    }

    /// A job's unique key, if it has one.
    pub fn unique_of(&self, id: JobId) -> Option<&Bytes> {
        self.unique_of.get(&id)
    }

    #[allow(clippy::too_many_arguments)]
    pub(crate) fn insert_job(
        &mut self,
        id: JobId,
        q: QueueId,
        pri: u32,
        ttr: u32,
        delay: u32,
        created: Millis,
        state: PutState,
        body: Body,
        durable: bool,
    ) {
        if durable {
            self.live_bytes += self.record_cost(q, body.len());
        }
        let job = Job {
            id,
            queue: q,
            pri,
            ttr,
            delay,
            state: JobState::Ready,
            due: 0,
            owner: 0,
            created,
            durable,
            reserves: 0,
            timeouts: 0,
            releases: 0,
            buries: 0,
            kicks: 0,
            body,
        };
        self.jobs.insert(job);
        match state {
            PutState::Ready => self.enter_ready(id),
            PutState::Delayed(at) => self.enter_delayed(id, at),
            PutState::Buried => self.enter_buried(id),
        }
    }

    pub(crate) fn record_cost(&self, q: QueueId, body_len: usize) -> u64 {
        body_len as u64 + self.queue(q).name.len() as u64 + RECORD_OVERHEAD
    }

    /// The next job a reserve on this queue would get (pause ignored).
    pub fn peek_ready(&self, q: QueueId) -> Option<&Job> {
        self.queue(q).ready.first().map(|(_, id)| &self.jobs[id])
    }
    /// The delayed job of this queue that becomes ready soonest.
    pub fn peek_delayed(&self, q: QueueId) -> Option<&Job> {
        self.queue(q).delayed.first().map(|(_, id)| &self.jobs[id])
    }
    /// The job of this queue that was buried longest ago.
    pub fn peek_buried(&self, q: QueueId) -> Option<&Job> {
        self.queue(q).buried.first().map(|(_, id)| &self.jobs[id])
    }

    /// Whole seconds until a delayed job is ready or a lease ends (0 otherwise).
    pub fn time_left_secs(&self, job: &Job, now: Millis) -> u64 {
        match job.state {
            JobState::Delayed | JobState::Reserved => whole_secs_left(job.due, now),
            _ => 0,
        }
    }
}

/// Whole seconds left until `due`, counted as beanstalkd counts them: its clock has
/// nanoseconds, so by the time anyone asks some time has always passed, and a 10 s lease
/// asked about at once has 9 whole seconds left. Milliseconds cannot see that time, so the
/// millisecond in progress counts as passed.
pub(crate) fn whole_secs_left(due: Millis, now: Millis) -> u64 {
    due.saturating_sub(now).saturating_sub(1) / 1000
}
