//! Property tests: random operation sequences run on the engine and on a deliberately
//! naive reference model (a `Vec` of jobs and linear scans), compared after every step; and
//! replaying what the engine logged (changes, snapshots) rebuilds its durable state.
//!
//! Reserves here never block (timeout 0): blocking waits are covered one case at a time in
//! `operations.rs`, where the order in which waiters are served can be stated exactly.

use std::collections::{BTreeMap, BTreeSet};

use bytes::Bytes;
use jobyard_engine::{
    Change, ConnId, Engine, EngineCore, JobId, JobState, Lease, Millis, Notice, NoticeKind,
    QueueId, ReserveOutcome, WaitMode, SAFETY_MARGIN_MS, URGENT_PRIORITY,
};
use proptest::prelude::*;

const T0: Millis = 1_700_000_000_000;
const QUEUES: usize = 3;
const CONNS: ConnId = 3;
const QUEUE_NAMES: [&str; QUEUES] = ["q0", "q1", "q2"];

// ----- operations -------------------------------------------------------------------------

#[derive(Clone, Debug)]
enum LeaseKind {
    Ttr,
    For(Millis),
    Unlimited,
}

impl LeaseKind {
    fn lease(&self) -> Lease {
        match self {
            LeaseKind::Ttr => Lease::JobTtr,
            LeaseKind::For(ms) => Lease::For(*ms),
            LeaseKind::Unlimited => Lease::Unlimited,
        }
    }
}

#[derive(Clone, Debug)]
enum Op {
    Put {
        q: usize,
        pri: u32,
        delay: u32,
        ttr: u32,
        durable: bool,
    },
    Reserve {
        conn: ConnId,
        queues: Vec<usize>,
        in_order: bool,
        warn: bool,
        lease: LeaseKind,
    },
    ReserveJob {
        conn: ConnId,
        pick: u16,
        lease: LeaseKind,
    },
    Delete {
        conn: ConnId,
        pick: u16,
    },
    Release {
        conn: ConnId,
        pick: u16,
        pri: u32,
        delay: u32,
    },
    Bury {
        conn: ConnId,
        pick: u16,
        pri: u32,
    },
    Kick {
        q: usize,
        bound: u64,
    },
    KickJob {
        pick: u16,
    },
    Touch {
        conn: ConnId,
        pick: u16,
    },
    Pause {
        q: usize,
        secs: u32,
    },
    Advance {
        ms: Millis,
    },
    Disconnect {
        conn: ConnId,
    },
    /// At most `n` jobs of queue `q` leased at once (0: no limit).
    Limit {
        q: usize,
        n: u32,
    },
}

fn pri() -> impl Strategy<Value = u32> {
    // Few values, so ties (decided by id) are common; both sides of the urgent threshold.
    prop::sample::select(vec![0, 1, 2, URGENT_PRIORITY - 1, URGENT_PRIORITY, 5000])
}

fn lease() -> impl Strategy<Value = LeaseKind> {
    prop_oneof![
        6 => Just(LeaseKind::Ttr),
        1 => (1..3000u64).prop_map(LeaseKind::For),
        1 => Just(LeaseKind::Unlimited),
    ]
}

fn conn() -> impl Strategy<Value = ConnId> {
    1..=CONNS
}

fn op() -> impl Strategy<Value = Op> {
    let q = 0..QUEUES;
    prop_oneof![
        6 => (q.clone(), pri(), 0..3u32, 0..4u32, prop::bool::weighted(0.85)).prop_map(
            |(q, pri, delay, ttr, durable)| Op::Put { q, pri, delay, ttr, durable }
        ),
        6 => (
            conn(),
            prop::sample::subsequence(vec![0usize, 1, 2], 1..=QUEUES).prop_shuffle(),
            prop::bool::weighted(0.25),
            any::<bool>(),
            lease(),
        )
            .prop_map(|(conn, queues, in_order, warn, lease)| Op::Reserve {
                conn,
                queues,
                in_order,
                warn,
                lease
            }),
        2 => (conn(), any::<u16>(), lease())
            .prop_map(|(conn, pick, lease)| Op::ReserveJob { conn, pick, lease }),
        3 => (conn(), any::<u16>()).prop_map(|(conn, pick)| Op::Delete { conn, pick }),
        3 => (conn(), any::<u16>(), pri(), prop::sample::select(vec![0u32, 0, 1, 2]))
            .prop_map(|(conn, pick, pri, delay)| Op::Release { conn, pick, pri, delay }),
        3 => (conn(), any::<u16>(), pri()).prop_map(|(conn, pick, pri)| Op::Bury { conn, pick, pri }),
        2 => (q.clone(), 0..4u64).prop_map(|(q, bound)| Op::Kick { q, bound }),
        2 => any::<u16>().prop_map(|pick| Op::KickJob { pick }),
        2 => (conn(), any::<u16>()).prop_map(|(conn, pick)| Op::Touch { conn, pick }),
        1 => (q.clone(), prop::sample::select(vec![0u32, 1, 2])).prop_map(|(q, secs)| Op::Pause { q, secs }),
        4 => prop::sample::select(vec![0u64, 1, 400, 999, 1000, 1500, 2500])
            .prop_map(|ms| Op::Advance { ms }),
        1 => conn().prop_map(|conn| Op::Disconnect { conn }),
        1 => (q, prop::sample::select(vec![0u32, 1, 2])).prop_map(|(q, n)| Op::Limit { q, n }),
    ]
}

fn ops() -> impl Strategy<Value = Vec<Op>> {
    prop::collection::vec(op(), 1..80)
}

// ----- the reference model ----------------------------------------------------------------

#[derive(Clone, Debug, PartialEq, Eq)]
struct MJob {
    id: JobId,
    queue: usize,
    pri: u32,
    ttr: u32,
    state: JobState,
    /// Ready-at while delayed, lease end while reserved (0 = none), else 0.
    due: Millis,
    owner: ConnId,
    buried_seq: u64,
    durable: bool,
    reserves: u32,
    timeouts: u32,
    releases: u32,
    buries: u32,
    kicks: u32,
    body: Bytes,
}

#[derive(Debug)]
struct Model {
    jobs: Vec<MJob>,
    paused_until: [Millis; QUEUES],
    /// Lease limits per queue (0: none); a reserve skips a queue at its limit.
    limits: [u32; QUEUES],
    next_id: JobId,
    bury_seq: u64,
    job_timeouts: u64,
    total_jobs: u64,
}

impl Model {
    fn new() -> Self {
        Model {
            jobs: Vec::new(),
            paused_until: [0; QUEUES],
            limits: [0; QUEUES],
            next_id: 1,
            bury_seq: 0,
            job_timeouts: 0,
            total_jobs: 0,
        }
    }

    fn find(&mut self, id: JobId) -> Option<&mut MJob> {
        self.jobs.iter_mut().find(|j| j.id == id)
    }

    fn holds(&self, conn: ConnId, id: JobId) -> bool {
        self.jobs
            .iter()
            .any(|j| j.id == id && j.state == JobState::Reserved && j.owner == conn)
    }

    fn lease_end(lease: &LeaseKind, ttr: u32, now: Millis) -> Millis {
        match lease {
            LeaseKind::Ttr => now + ttr.max(1) as Millis * 1000,
            LeaseKind::For(ms) => now + (*ms).max(1),
            LeaseKind::Unlimited => 0,
        }
    }

    fn make_ready(j: &mut MJob) {
        j.state = JobState::Ready;
        j.due = 0;
    }

    fn put(
        &mut self,
        q: usize,
        pri: u32,
        delay: u32,
        ttr: u32,
        durable: bool,
        now: Millis,
    ) -> JobId {
        let id = self.next_id;
        self.next_id += 1;
        self.total_jobs += 1;
        let (state, due) = if delay > 0 {
            (JobState::Delayed, now + delay as Millis * 1000)
        } else {
            (JobState::Ready, 0)
        };
        self.jobs.push(MJob {
            id,
            queue: q,
            pri,
            ttr,
            state,
            due,
            owner: 0,
            buried_seq: 0,
            durable,
            reserves: 0,
            timeouts: 0,
            releases: 0,
            buries: 0,
            kicks: 0,
            body: body_of(id),
        });
        id
    }

    fn paused(&self, q: usize, now: Millis) -> bool {
        self.paused_until[q] > now
    }

    /// Whether a reserve may take another job of `q` (its lease limit not reached).
    fn has_room(&self, q: usize) -> bool {
        let leased = self
            .jobs
            .iter()
            .filter(|j| j.queue == q && j.state == JobState::Reserved)
            .count() as u32;
        self.limits[q] == 0 || leased < self.limits[q]
    }

    #[allow(clippy::too_many_arguments)]
    fn reserve(
        &mut self,
        conn: ConnId,
        queues: &[usize],
        in_order: bool,
        warn: bool,
        lease: &LeaseKind,
        now: Millis,
    ) -> ReserveOutcome {
        let candidate = if in_order {
            queues.iter().find_map(|&q| {
                if self.paused(q, now) || !self.has_room(q) {
                    return None;
                }
                self.jobs
                    .iter()
                    .filter(|j| j.queue == q && j.state == JobState::Ready)
                    .map(|j| (j.pri, j.id))
                    .min()
            })
        } else {
            self.jobs
                .iter()
                .filter(|j| {
                    j.state == JobState::Ready
                        && queues.contains(&j.queue)
                        && !self.paused(j.queue, now)
                        && self.has_room(j.queue)
                })
                .map(|j| (j.pri, j.id))
                .min()
        };
        if let Some((_, id)) = candidate {
            let j = self.find(id).unwrap();
            j.state = JobState::Reserved;
            j.owner = conn;
            j.due = Self::lease_end(lease, j.ttr, now);
            j.reserves += 1;
            return ReserveOutcome::Reserved(id);
        }
        let soonest = self
            .jobs
            .iter()
            .filter(|j| j.state == JobState::Reserved && j.owner == conn && j.due > 0)
            .map(|j| j.due)
            .min();
        if warn && soonest.is_some_and(|due| due <= now + SAFETY_MARGIN_MS) {
            return ReserveOutcome::DeadlineSoon;
        }
        ReserveOutcome::TimedOut
    }

    fn reserve_job(&mut self, conn: ConnId, id: JobId, lease: &LeaseKind, now: Millis) -> bool {
        match self.find(id) {
            Some(j) if j.state != JobState::Reserved => {
                j.state = JobState::Reserved;
                j.owner = conn;
                j.due = Self::lease_end(lease, j.ttr, now);
                j.reserves += 1;
                true
            }
            _ => false,
        }
    }

    fn delete(&mut self, conn: ConnId, id: JobId) -> bool {
        let Some(pos) = self.jobs.iter().position(|j| j.id == id) else {
            return false;
        };
        let j = &self.jobs[pos];
        if j.state == JobState::Reserved && j.owner != conn {
            return false;
        }
        self.jobs.remove(pos);
        true
    }

    fn release(&mut self, conn: ConnId, id: JobId, pri: u32, delay: u32, now: Millis) -> bool {
        if !self.holds(conn, id) {
            return false;
        }
        let j = self.find(id).unwrap();
        j.pri = pri;
        j.releases += 1;
        if delay > 0 {
            j.state = JobState::Delayed;
            j.due = now + delay as Millis * 1000;
        } else {
            Self::make_ready(j);
        }
        true
    }

    fn bury(&mut self, conn: ConnId, id: JobId, pri: u32) -> bool {
        if !self.holds(conn, id) {
            return false;
        }
        self.bury_seq += 1;
        let seq = self.bury_seq;
        let j = self.find(id).unwrap();
        j.pri = pri;
        j.buries += 1;
        j.state = JobState::Buried;
        j.due = 0;
        j.buried_seq = seq;
        true
    }

    fn kick(&mut self, q: usize, bound: u64) -> u64 {
        let mut buried: Vec<(u64, JobId)> = self
            .jobs
            .iter()
            .filter(|j| j.queue == q && j.state == JobState::Buried)
            .map(|j| (j.buried_seq, j.id))
            .collect();
        let mut ids: Vec<JobId> = if !buried.is_empty() {
            buried.sort();
            buried.into_iter().map(|(_, id)| id).collect()
        } else {
            let mut delayed: Vec<(Millis, JobId)> = self
                .jobs
                .iter()
                .filter(|j| j.queue == q && j.state == JobState::Delayed)
                .map(|j| (j.due, j.id))
                .collect();
            delayed.sort();
            delayed.into_iter().map(|(_, id)| id).collect()
        };
        ids.truncate(bound as usize);
        for &id in &ids {
            let j = self.find(id).unwrap();
            j.kicks += 1;
            Self::make_ready(j);
        }
        ids.len() as u64
    }

    fn kick_job(&mut self, id: JobId) -> bool {
        match self.find(id) {
            Some(j) if matches!(j.state, JobState::Buried | JobState::Delayed) => {
                j.kicks += 1;
                Self::make_ready(j);
                true
            }
            _ => false,
        }
    }

    fn touch(&mut self, conn: ConnId, id: JobId, now: Millis) -> bool {
        if !self.holds(conn, id) {
            return false;
        }
        let j = self.find(id).unwrap();
        if j.due > 0 {
            j.due = now + j.ttr.max(1) as Millis * 1000;
        }
        true
    }

    fn pause(&mut self, q: usize, secs: u32, now: Millis) {
        self.paused_until[q] = if secs == 0 {
            0
        } else {
            now + secs as Millis * 1000
        };
    }

    /// Everything due at or before `now`; returns the lease-expiry notices.
    fn tick(&mut self, now: Millis) -> Vec<Notice> {
        let mut out = Vec::new();
        for j in &mut self.jobs {
            match j.state {
                JobState::Delayed if j.due <= now => Self::make_ready(j),
                JobState::Reserved if j.due > 0 && j.due <= now => {
                    j.timeouts += 1;
                    self.job_timeouts += 1;
                    out.push(Notice {
                        conn: j.owner,
                        kind: NoticeKind::LeaseExpired(j.id),
                    });
                    Self::make_ready(j);
                }
                _ => {}
            }
        }
        for p in &mut self.paused_until {
            if *p <= now {
                *p = 0;
            }
        }
        out
    }

    fn disconnect(&mut self, conn: ConnId) {
        for j in &mut self.jobs {
            if j.state == JobState::Reserved && j.owner == conn {
                Self::make_ready(j);
            }
        }
    }

    fn next_deadline(&self) -> Option<Millis> {
        let jobs = self.jobs.iter().filter_map(|j| match j.state {
            JobState::Delayed => Some(j.due),
            JobState::Reserved if j.due > 0 => Some(j.due),
            _ => None,
        });
        let pauses = self.paused_until.iter().copied().filter(|&p| p > 0);
        jobs.chain(pauses).min()
    }
}

fn body_of(id: JobId) -> Bytes {
    Bytes::from(format!("body of job {id}"))
}

// ----- running both -----------------------------------------------------------------------

struct World {
    engine: EngineCore,
    model: Model,
    queues: [QueueId; QUEUES],
    now: Millis,
}

impl World {
    fn new() -> Self {
        let mut engine = EngineCore::new();
        // Pinned, as beanstalkd's `default` is, so queue ids stay put for the whole run.
        let queues = QUEUE_NAMES.map(|name| {
            let q = engine.queue_id_or_create(name.as_bytes());
            engine.pin(q);
            q
        });
        World {
            engine,
            model: Model::new(),
            queues,
            now: T0,
        }
    }

    /// Applies `op` to both; fails the test if what they answer differs.
    fn step(&mut self, op: &Op) -> Result<(), TestCaseError> {
        let now = self.now;
        let e = &mut self.engine;
        let m = &mut self.model;
        let mut expected_notices = Vec::new();
        match op {
            Op::Put {
                q,
                pri,
                delay,
                ttr,
                durable,
            } => {
                let want = m.put(*q, *pri, *delay, *ttr, *durable, now);
                let got = e.put(
                    self.queues[*q],
                    *pri,
                    *delay,
                    *ttr,
                    body_of(want),
                    *durable,
                    now,
                );
                prop_assert_eq!(got.id, want);
            }
            Op::Reserve {
                conn,
                queues,
                in_order,
                warn,
                lease,
            } => {
                let want = m.reserve(*conn, queues, *in_order, *warn, lease, now);
                let qs: Vec<QueueId> = queues.iter().map(|&q| self.queues[q]).collect();
                let mode = if *in_order {
                    WaitMode::InOrder
                } else {
                    WaitMode::Best
                };
                let got = e.reserve(*conn, &qs, mode, lease.lease(), Some(0), *warn, now);
                prop_assert_eq!(got, want);
                prop_assert_eq!(e.has_ready(&qs, now), m_has_ready(m, queues, now));
            }
            Op::ReserveJob { conn, pick, lease } => {
                let id = pick_id(m, *pick);
                let want = m.reserve_job(*conn, id, lease, now);
                prop_assert_eq!(e.reserve_job(*conn, id, lease.lease(), now), want);
            }
            Op::Delete { conn, pick } => {
                let id = pick_id(m, *pick);
                let want = m.delete(*conn, id);
                prop_assert_eq!(e.delete(*conn, id), want);
            }
            Op::Release {
                conn,
                pick,
                pri,
                delay,
            } => {
                let id = pick_id(m, *pick);
                let want = m.release(*conn, id, *pri, *delay, now);
                prop_assert_eq!(e.release(*conn, id, *pri, *delay, now), want);
            }
            Op::Bury { conn, pick, pri } => {
                let id = pick_id(m, *pick);
                let want = m.bury(*conn, id, *pri);
                prop_assert_eq!(e.bury(*conn, id, *pri), want);
            }
            Op::Kick { q, bound } => {
                let want = m.kick(*q, *bound);
                prop_assert_eq!(e.kick(self.queues[*q], *bound, now), want);
            }
            Op::KickJob { pick } => {
                let id = pick_id(m, *pick);
                let want = m.kick_job(id);
                prop_assert_eq!(e.kick_job(id, now), want);
            }
            Op::Touch { conn, pick } => {
                let id = pick_id(m, *pick);
                let want = m.touch(*conn, id, now);
                prop_assert_eq!(e.touch(*conn, id, now), want);
            }
            Op::Pause { q, secs } => {
                m.pause(*q, *secs, now);
                e.pause(self.queues[*q], *secs, now);
            }
            Op::Advance { ms } => {
                self.now += ms;
                expected_notices = m.tick(self.now);
                e.tick(self.now);
            }
            Op::Disconnect { conn } => {
                m.disconnect(*conn);
                e.disconnect(*conn, now);
            }
            Op::Limit { q, n } => {
                m.limits[*q] = *n;
                e.set_lease_limit(self.queues[*q], *n, now);
            }
        }
        let mut got: Vec<Notice> = e.take_notices().collect();
        got.sort_by_key(notice_key);
        expected_notices.sort_by_key(notice_key);
        prop_assert_eq!(got, expected_notices);
        self.compare()
    }

    /// Every observable piece of state must agree.
    fn compare(&self) -> Result<(), TestCaseError> {
        let e = &self.engine;
        let m = &self.model;
        let now = self.now;
        prop_assert_eq!(e.next_id(), m.next_id);
        prop_assert_eq!(e.job_count(), m.jobs.len());
        prop_assert_eq!(e.job_timeouts(), m.job_timeouts);
        prop_assert_eq!(e.total_jobs(), m.total_jobs);
        for id in 0..=m.next_id {
            let want = m.jobs.iter().find(|j| j.id == id);
            let got = e.job(id);
            prop_assert_eq!(got.is_some(), want.is_some(), "job {} exists", id);
            let (Some(got), Some(want)) = (got, want) else {
                continue;
            };
            prop_assert_eq!(got.id, id);
            prop_assert_eq!(got.queue, self.queues[want.queue], "queue of {}", id);
            prop_assert_eq!(got.state, want.state, "state of {}", id);
            prop_assert_eq!(got.pri, want.pri, "pri of {}", id);
            prop_assert_eq!(got.ttr, want.ttr);
            if want.state != JobState::Buried {
                prop_assert_eq!(got.due, want.due, "due of {}", id);
            }
            prop_assert_eq!(got.durable, want.durable);
            prop_assert_eq!(got.body.in_memory(), Some(&want.body[..]));
            if want.state == JobState::Reserved {
                prop_assert_eq!(got.owner, want.owner, "owner of {}", id);
            }
            if want.state == JobState::Buried {
                prop_assert_eq!(got.buried_seq(), want.buried_seq, "burial order of {}", id);
            }
            prop_assert_eq!(
                (
                    got.reserves,
                    got.timeouts,
                    got.releases,
                    got.buries,
                    got.kicks
                ),
                (
                    want.reserves,
                    want.timeouts,
                    want.releases,
                    want.buries,
                    want.kicks
                ),
                "counters of {}",
                id
            );
            // beanstalkd counts whole seconds with a nanosecond clock: some time has always
            // passed, so the millisecond in progress counts as gone (10 s asked at once: 9).
            let left = match want.state {
                JobState::Delayed | JobState::Reserved => {
                    want.due.saturating_sub(now).saturating_sub(1) / 1000
                }
                _ => 0,
            };
            prop_assert_eq!(e.time_left_secs(got, now), left);
        }

        let c = e.counts();
        let count = |s: JobState| m.jobs.iter().filter(|j| j.state == s).count() as u64;
        prop_assert_eq!(c.ready, count(JobState::Ready));
        prop_assert_eq!(c.reserved, count(JobState::Reserved));
        prop_assert_eq!(c.delayed, count(JobState::Delayed));
        prop_assert_eq!(c.buried, count(JobState::Buried));
        let urgent = m
            .jobs
            .iter()
            .filter(|j| j.state == JobState::Ready && j.pri < URGENT_PRIORITY)
            .count() as u64;
        prop_assert_eq!(c.urgent, urgent);

        for (i, &q) in self.queues.iter().enumerate() {
            let queue = e.queue(q);
            let in_q = |s: JobState| m.jobs.iter().filter(move |j| j.queue == i && j.state == s);
            prop_assert_eq!(queue.ready_len(), in_q(JobState::Ready).count());
            prop_assert_eq!(queue.delayed_len(), in_q(JobState::Delayed).count());
            prop_assert_eq!(queue.buried_len(), in_q(JobState::Buried).count());
            prop_assert_eq!(queue.reserved as usize, in_q(JobState::Reserved).count());
            prop_assert_eq!(
                queue.urgent as usize,
                in_q(JobState::Ready)
                    .filter(|j| j.pri < URGENT_PRIORITY)
                    .count()
            );
            let head = in_q(JobState::Ready).map(|j| (j.pri, j.id)).min();
            prop_assert_eq!(queue.head(), head);
            prop_assert_eq!(e.peek_ready(q).map(|j| j.id), head.map(|h| h.1));
            let soonest = in_q(JobState::Delayed).map(|j| (j.due, j.id)).min();
            prop_assert_eq!(e.peek_delayed(q).map(|j| j.id), soonest.map(|s| s.1));
            let oldest = in_q(JobState::Buried).map(|j| (j.buried_seq, j.id)).min();
            prop_assert_eq!(e.peek_buried(q).map(|j| j.id), oldest.map(|s| s.1));
            prop_assert_eq!(queue.is_paused(now), m.paused(i, now));
            prop_assert_eq!(queue.waiting(), 0);
        }

        for conn in 1..=CONNS {
            let got: BTreeSet<JobId> = e.held_by(conn).collect();
            let want: BTreeSet<JobId> = m
                .jobs
                .iter()
                .filter(|j| j.state == JobState::Reserved && j.owner == conn)
                .map(|j| j.id)
                .collect();
            prop_assert_eq!(got, want, "held by {}", conn);
            prop_assert!(!e.is_waiting(conn));
        }
        // No timer is leaked or lost: the engine's next wake-up is the model's earliest event.
        prop_assert_eq!(e.next_deadline(), m.next_deadline());
        Ok(())
    }
}

/// A job id chosen from every id handed out so far, plus 0 and the next one (unknown).
fn pick_id(m: &Model, pick: u16) -> JobId {
    pick as JobId % (m.next_id + 1)
}

fn m_has_ready(m: &Model, queues: &[usize], now: Millis) -> bool {
    m.jobs.iter().any(|j| {
        j.state == JobState::Ready
            && queues.contains(&j.queue)
            && !m.paused(j.queue, now)
            && m.has_room(j.queue)
    })
}

fn notice_key(n: &Notice) -> (ConnId, String) {
    (n.conn, format!("{:?}", n.kind))
}

// ----- durable views for the replay property ----------------------------------------------

/// (queue name, state with reserved shown as ready, pri, ttr, ready-at if delayed, body).
type DurableJob = (Vec<u8>, JobState, u32, u32, Millis, Vec<u8>);

fn durable_view(e: &Engine, max_id: JobId) -> BTreeMap<JobId, DurableJob> {
    (0..=max_id)
        .filter_map(|id| e.job(id))
        .filter(|j| j.durable)
        .map(|j| {
            let state = match j.state {
                JobState::Reserved => JobState::Ready,
                s => s,
            };
            let due = if state == JobState::Delayed { j.due } else { 0 };
            (
                j.id,
                (
                    e.queue(j.queue).name.to_vec(),
                    state,
                    j.pri,
                    j.ttr,
                    due,
                    j.body.in_memory().expect("in memory").to_vec(),
                ),
            )
        })
        .collect()
}

fn buried_order(e: &Engine, max_id: JobId) -> BTreeMap<Vec<u8>, Vec<JobId>> {
    let mut by_queue: BTreeMap<Vec<u8>, Vec<(u64, JobId)>> = BTreeMap::new();
    for j in (0..=max_id).filter_map(|id| e.job(id)) {
        if j.durable && j.state == JobState::Buried {
            by_queue
                .entry(e.queue(j.queue).name.to_vec())
                .or_default()
                .push((j.buried_seq(), j.id));
        }
    }
    by_queue
        .into_iter()
        .map(|(q, mut v)| {
            v.sort();
            (q, v.into_iter().map(|(_, id)| id).collect())
        })
        .collect()
}

fn rebuild(changes: impl IntoIterator<Item = Change>, next_id: JobId, now: Millis) -> EngineCore {
    let mut r = EngineCore::new();
    for change in changes {
        r.replay(change);
    }
    r.raise_next_id(next_id);
    // Delays that ran out "while the server was down" become ready now.
    r.tick(now);
    r
}

// ----- properties -------------------------------------------------------------------------

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    #[test]
    fn engine_agrees_with_the_reference_model(ops in ops()) {
        let mut w = World::new();
        for op in &ops {
            w.step(op)?;
        }
        // Everything still in flight settles the same way.
        for conn in 1..=CONNS {
            w.step(&Op::Disconnect { conn })?;
        }
        w.step(&Op::Advance { ms: 10_000 })?;
        prop_assert_eq!(w.engine.counts().delayed + w.engine.counts().reserved, 0);
    }

    #[test]
    fn replaying_the_changes_or_a_snapshot_rebuilds_the_durable_state(
        ops in ops(),
        snapshot_at in any::<prop::sample::Index>(),
    ) {
        let mut w = World::new();
        let cut = snapshot_at.index(ops.len() + 1);
        let mut log: Vec<Change> = Vec::new();
        let mut after_snapshot: Vec<Change> = Vec::new();
        let mut snapshot: Option<(Vec<Change>, JobId)> = None;
        for (i, op) in ops.iter().enumerate() {
            if i == cut {
                log.extend(w.engine.take_changes());
                snapshot = Some((w.engine.snapshot(), w.engine.next_id()));
            }
            w.step(op)?;
            let changes: Vec<Change> = w.engine.take_changes().collect();
            if snapshot.is_some() {
                after_snapshot.extend(changes.iter().cloned());
            }
            log.extend(changes);
        }
        let e = &w.engine;
        let max_id = e.next_id();
        let want = durable_view(e, max_id);
        let want_buried = buried_order(e, max_id);

        // 1. The whole change log.
        let r = rebuild(log, 0, w.now);
        prop_assert_eq!(durable_view(&r, max_id), want.clone());
        prop_assert_eq!(buried_order(&r, max_id), want_buried.clone());
        prop_assert!(r.next_id() <= e.next_id());
        prop_assert!(want.keys().all(|&id| id < r.next_id()));

        // 2. A snapshot taken part-way, then the changes made after it (what storage keeps
        //    after compaction).
        let (snap, snap_next) = snapshot.unwrap_or_else(|| (e.snapshot(), e.next_id()));
        let r = rebuild(snap.into_iter().chain(after_snapshot), snap_next, w.now);
        prop_assert_eq!(durable_view(&r, max_id), want.clone());
        prop_assert_eq!(buried_order(&r, max_id), want_buried.clone());

        // 3. A snapshot of the final state, with ids continuing exactly.
        let r = rebuild(e.snapshot(), e.next_id(), w.now);
        prop_assert_eq!(durable_view(&r, max_id), want);
        prop_assert_eq!(buried_order(&r, max_id), want_buried);
        prop_assert_eq!(r.next_id(), e.next_id());
        prop_assert_eq!(r.counts().reserved, 0);
        prop_assert_eq!(r.total_jobs(), 0);
    }
}

// ----- blocking waits ---------------------------------------------------------------------
//
// Which of several waiters gets a job is a policy (oldest first, best job across its
// queues) that `operations.rs` pins down case by case. Here random runs check what must hold
// whatever the policy: no wake-up is lost, every wait ends exactly once and for a reason
// that is true, and the counts of waiters add up.

#[derive(Clone, Debug)]
enum WOp {
    Plain(Op),
    Block {
        conn: ConnId,
        queues: Vec<usize>,
        mode: u8,
        timeout: Option<Millis>,
        warn: bool,
        lease: LeaseKind,
    },
}

impl WOp {
    /// The connection that sends it, if it is a command of one connection.
    fn conn(&self) -> Option<ConnId> {
        match self {
            WOp::Block { conn, .. } => Some(*conn),
            WOp::Plain(op) => match op {
                Op::Reserve { conn, .. }
                | Op::ReserveJob { conn, .. }
                | Op::Delete { conn, .. }
                | Op::Release { conn, .. }
                | Op::Bury { conn, .. }
                | Op::Touch { conn, .. } => Some(*conn),
                _ => None,
            },
        }
    }
}

fn wop() -> impl Strategy<Value = WOp> {
    prop_oneof![
        3 => op().prop_map(WOp::Plain),
        1 => (
            conn(),
            prop::sample::subsequence(vec![0usize, 1, 2], 1..=QUEUES).prop_shuffle(),
            prop::sample::select(vec![0u8, 0, 0, 1, 2]),
            prop::sample::select(vec![None, None, Some(0u64), Some(500), Some(1000), Some(3000)]),
            any::<bool>(),
            lease(),
        )
            .prop_map(|(conn, queues, mode, timeout, warn, lease)| WOp::Block {
                conn,
                queues,
                mode,
                timeout,
                warn,
                lease,
            }),
    ]
}

#[derive(Debug)]
struct TrackedWait {
    queues: Vec<QueueId>,
    mode: WaitMode,
    timeout_at: Option<Millis>,
    warn: bool,
}

struct Waits {
    engine: EngineCore,
    queues: [QueueId; QUEUES],
    now: Millis,
    next_id: JobId,
    waits: BTreeMap<ConnId, TrackedWait>,
}

impl Waits {
    fn new() -> Self {
        let w = World::new();
        Waits {
            engine: w.engine,
            queues: w.queues,
            now: T0,
            next_id: 1,
            waits: BTreeMap::new(),
        }
    }

    fn holds(&self, conn: ConnId, id: JobId) -> bool {
        self.engine
            .job(id)
            .is_some_and(|j| j.state == JobState::Reserved && j.owner == conn)
    }

    fn soonest_lease(&self, conn: ConnId) -> Option<Millis> {
        let e = &self.engine;
        e.held_by(conn)
            .filter_map(|id| e.job(id).map(|j| j.due))
            .filter(|&d| d > 0)
            .min()
    }

    fn step(&mut self, op: &WOp) -> Result<(), TestCaseError> {
        // A connection blocked in a reserve sends nothing until it is answered (its later
        // commands queue up); it can only go away.
        if let Some(conn) = op.conn() {
            if self.waits.contains_key(&conn) {
                return Ok(());
            }
        }
        // A DEADLINE_SOON is judged by the leases held before the step: one tick can both
        // warn a waiter and, later in the same tick, end the lease it was warned about.
        let soonest_before: BTreeMap<ConnId, Option<Millis>> = self
            .waits
            .keys()
            .map(|&conn| (conn, self.soonest_lease(conn)))
            .collect();
        let now = self.now;
        let qs = self.queues;
        match op {
            WOp::Block {
                conn,
                queues,
                mode,
                timeout,
                warn,
                lease,
            } => {
                let mode = [WaitMode::Best, WaitMode::InOrder, WaitMode::WakeOnly][*mode as usize];
                let queues: Vec<QueueId> = queues.iter().map(|&q| qs[q]).collect();
                let ready = self.engine.has_ready(&queues, now);
                // A reserve that would be told DEADLINE_SOON if nothing were ready.
                let warned = *warn
                    && self
                        .soonest_lease(*conn)
                        .is_some_and(|d| d <= now + SAFETY_MARGIN_MS);
                let out =
                    self.engine
                        .reserve(*conn, &queues, mode, lease.lease(), *timeout, *warn, now);
                match out {
                    ReserveOutcome::Reserved(id) => {
                        prop_assert!(ready && mode != WaitMode::WakeOnly);
                        prop_assert!(self.holds(*conn, id));
                    }
                    ReserveOutcome::Available => prop_assert!(ready && mode == WaitMode::WakeOnly),
                    ReserveOutcome::DeadlineSoon => prop_assert!(!ready && warned),
                    ReserveOutcome::TimedOut => {
                        prop_assert!(!ready && !warned && *timeout == Some(0))
                    }
                    ReserveOutcome::Waiting => {
                        prop_assert!(!ready && !warned && *timeout != Some(0));
                        self.waits.insert(
                            *conn,
                            TrackedWait {
                                queues,
                                mode,
                                timeout_at: timeout.map(|t| now + t),
                                warn: *warn,
                            },
                        );
                    }
                }
            }
            WOp::Plain(op) => {
                let next_id = self.next_id;
                let id = |pick: &u16| *pick as JobId % (next_id + 1);
                let e = &mut self.engine;
                match op {
                    Op::Put {
                        q,
                        pri,
                        delay,
                        ttr,
                        durable,
                    } => {
                        let id = e
                            .put(qs[*q], *pri, *delay, *ttr, body_of(0), *durable, now)
                            .id;
                        prop_assert_eq!(id, self.next_id);
                        self.next_id += 1;
                    }
                    Op::Reserve {
                        conn,
                        queues,
                        in_order,
                        warn,
                        lease,
                    } => {
                        let queues: Vec<QueueId> = queues.iter().map(|&q| qs[q]).collect();
                        let mode = if *in_order {
                            WaitMode::InOrder
                        } else {
                            WaitMode::Best
                        };
                        let out =
                            e.reserve(*conn, &queues, mode, lease.lease(), Some(0), *warn, now);
                        prop_assert_ne!(out, ReserveOutcome::Waiting);
                    }
                    Op::ReserveJob { conn, pick, lease } => {
                        e.reserve_job(*conn, id(pick), lease.lease(), now);
                    }
                    Op::Delete { conn, pick } => {
                        e.delete(*conn, id(pick));
                    }
                    Op::Release {
                        conn,
                        pick,
                        pri,
                        delay,
                    } => {
                        e.release(*conn, id(pick), *pri, *delay, now);
                    }
                    Op::Bury { conn, pick, pri } => {
                        e.bury(*conn, id(pick), *pri);
                    }
                    Op::Kick { q, bound } => {
                        e.kick(qs[*q], *bound, now);
                    }
                    Op::KickJob { pick } => {
                        e.kick_job(id(pick), now);
                    }
                    Op::Touch { conn, pick } => {
                        e.touch(*conn, id(pick), now);
                    }
                    Op::Pause { q, secs } => e.pause(qs[*q], *secs, now),
                    Op::Advance { ms } => {
                        self.now += ms;
                        e.tick(self.now);
                    }
                    Op::Disconnect { conn } => {
                        e.disconnect(*conn, now);
                        self.waits.remove(conn);
                    }
                    Op::Limit { q, n } => e.set_lease_limit(qs[*q], *n, now),
                }
            }
        }
        self.check_notices(&soonest_before)?;
        self.check_invariants()
    }

    fn check_notices(
        &mut self,
        soonest_before: &BTreeMap<ConnId, Option<Millis>>,
    ) -> Result<(), TestCaseError> {
        let now = self.now;
        let notices: Vec<Notice> = self.engine.take_notices().collect();
        let mut ended = BTreeSet::new();
        for n in notices {
            if let NoticeKind::LeaseExpired(id) = n.kind {
                prop_assert!(self.engine.job(id).is_some(), "expired job {} exists", id);
                continue;
            }
            prop_assert!(ended.insert(n.conn), "two endings for one wait: {:?}", n);
            let Some(wait) = self.waits.remove(&n.conn) else {
                return Err(TestCaseError::fail(format!(
                    "{n:?} for a connection not waiting"
                )));
            };
            match n.kind {
                NoticeKind::Reserved(id) => {
                    prop_assert_ne!(wait.mode, WaitMode::WakeOnly);
                    prop_assert!(self.holds(n.conn, id), "{:?}: job not held", n);
                    let job = self.engine.job(id).unwrap();
                    prop_assert!(wait.queues.contains(&job.queue));
                    prop_assert!(!self.engine.queue(job.queue).is_paused(now));
                    let queue = self.engine.queue(job.queue);
                    prop_assert!(
                        queue.lease_limit == 0 || queue.reserved <= queue.lease_limit,
                        "{:?}: served past the lease limit",
                        n
                    );
                }
                NoticeKind::Wake => prop_assert_eq!(wait.mode, WaitMode::WakeOnly),
                NoticeKind::TimedOut => {
                    prop_assert!(wait.timeout_at.is_some_and(|t| t <= now), "{:?} early", n)
                }
                NoticeKind::DeadlineSoon => {
                    prop_assert!(wait.warn);
                    let soonest = soonest_before.get(&n.conn).copied().flatten();
                    prop_assert!(
                        soonest.is_some_and(|d| d <= now + SAFETY_MARGIN_MS),
                        "{:?} with soonest lease {:?}",
                        n,
                        soonest
                    );
                }
                NoticeKind::LeaseExpired(_) => unreachable!(),
                NoticeKind::Ended(..) | NoticeKind::Update(..) => {
                    return Err(TestCaseError::fail(format!("{n:?}: nothing watches")))
                }
            }
        }
        Ok(())
    }

    fn check_invariants(&self) -> Result<(), TestCaseError> {
        let e = &self.engine;
        let now = self.now;
        prop_assert_eq!(e.waiting_count(), self.waits.len());
        for conn in 1..=CONNS {
            prop_assert_eq!(e.is_waiting(conn), self.waits.contains_key(&conn));
        }
        for &q in &self.queues {
            let n = self
                .waits
                .values()
                .filter(|w| w.queues.contains(&q))
                .count();
            prop_assert_eq!(e.queue(q).waiting(), n);
        }
        for (conn, wait) in &self.waits {
            // No lost wake-up: nobody sleeps while something it could take is ready.
            prop_assert!(
                !e.has_ready(&wait.queues, now),
                "connection {} waits although a job is ready",
                conn
            );
            if let Some(t) = wait.timeout_at {
                prop_assert!(t > now, "connection {} waits past its timeout", conn);
            }
            if wait.warn {
                prop_assert!(self
                    .soonest_lease(*conn)
                    .is_none_or(|due| due > now + SAFETY_MARGIN_MS));
            }
        }
        // Everything due has been done.
        prop_assert!(e.next_deadline().is_none_or(|t| t > now));
        let c = e.counts();
        let held: u64 = (1..=CONNS).map(|conn| e.held_by(conn).count() as u64).sum();
        prop_assert_eq!(c.reserved, held);
        prop_assert_eq!(
            (c.ready + c.reserved + c.delayed + c.buried) as usize,
            e.job_count()
        );
        Ok(())
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    #[test]
    fn waits_are_never_lost_and_end_once_for_a_true_reason(
        ops in prop::collection::vec(wop(), 1..100),
    ) {
        let mut w = Waits::new();
        for op in &ops {
            w.step(op)?;
        }
        // Time passing ends every wait that has a timeout.
        w.step(&WOp::Plain(Op::Advance { ms: 60_000 }))?;
        prop_assert!(w.waits.values().all(|wait| wait.timeout_at.is_none()));
        for conn in 1..=CONNS {
            w.step(&WOp::Plain(Op::Disconnect { conn }))?;
        }
        prop_assert_eq!(w.engine.waiting_count(), 0);
    }
}
