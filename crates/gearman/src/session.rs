//! One Gearman connection's state and the execution of its binary requests.
//!
//! Every request runs under the broker lock (then the registry lock), so what it causes on
//! other connections (results for watched jobs, NOOPs) is queued in their mailboxes before
//! its own reply is written, as in gearmand's single processing thread.

use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use jobyard_broker::{Broker, ProtocolMetrics, Txn};
use jobyard_engine::{
    ConnId, EndStatus, JobEnd, JobId, JobState, JobUpdate, Lease, Millis, NewJob, NoticeKind,
    QueueId, ReserveOutcome, WaitMode,
};
use jobyard_net::Step;

use crate::admin::atoi;
use crate::decode::Frame;
use crate::functions::{ensure_function, level, total_jobs};
use crate::jobs::{coalesce_key, fail_job, shown_unique, DASH_KEY};
use crate::packet::{kind, put_error, put_response, request_fields, split_fields};
use crate::packet::{MAX_HANDLE, MAX_UNIQUE};
use crate::registry::{ConnInfo, Registry};
use crate::{handle, Server, GEARMAN_JOB_TTR, PRI_HIGH, PRI_LOW, PRI_NORMAL};

/// What the connection loop does after a frame.
pub(crate) type Outcome = Step;

/// A function this worker can do, with its CAN_DO_TIMEOUT.
#[derive(Clone, Debug)]
struct Ability {
    name: Bytes,
    q: QueueId,
    timeout: Option<Millis>,
}

/// Which assignment packet a grab asks for.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Grab {
    Plain,
    Uniq,
    All,
}

/// A submit request, whatever its packet type.
struct Submit {
    func: Bytes,
    unique: Bytes,
    data: Bytes,
    pri: u32,
    background: bool,
    ready_at: Millis,
    reducer: Option<Bytes>,
}

/// The per-connection protocol state.
pub struct Session {
    pub conn: ConnId,
    pub(crate) server: Arc<Server>,
    /// Oldest first; grabs walk it newest first, as gearmand does.
    abilities: Vec<Ability>,
    /// Whether WORK_EXCEPTION is passed on as is (else as WORK_FAIL).
    exceptions: bool,
}

impl Session {
    /// Registers a new connection with the registry.
    pub fn new(server: Arc<Server>, conn: ConnId, fd: i32, ip: String) -> Session {
        server.registry().conns.insert(
            conn,
            ConnInfo {
                client_id: Bytes::from_static(b"-"),
                abilities: Vec::new(),
                fd,
                ip,
            },
        );
        let exceptions = server.config.exceptions;
        Session {
            conn,
            server,
            abilities: Vec::new(),
            exceptions,
        }
    }

    /// Ends the session: held jobs are requeued (or failed past the retry limit), waiting
    /// foreground jobs nobody else waits for are discarded, abilities are dropped. The
    /// connection layer then forgets the connection in the broker.
    fn end(self) {
        let now = Broker::now();
        let server = self.server.clone();
        let mut txn = server.broker.lock();
        let mut reg = server.registry();
        let held: Vec<JobId> = txn.held_by(self.conn).collect();
        for id in held {
            self.requeue(&mut txn, &mut reg, id, now);
        }
        reg.conns.remove(&self.conn);
        for id in txn.stop_watching(self.conn) {
            let abandoned = txn.watcher_count(id) == 0
                && txn
                    .job(id)
                    .is_some_and(|j| !j.durable && j.state != JobState::Reserved);
            if abandoned {
                txn.delete(self.conn, id);
                reg.forget(id);
            }
        }
        for a in &self.abilities {
            txn.remove_consumer(a.q);
        }
    }

    /// Gives a held job back: failed for good past the retry limit, discarded if it is a
    /// foreground job nobody waits for any more, else ready again with its priority.
    fn requeue(&self, txn: &mut Txn<'_>, reg: &mut Registry, id: JobId, now: Millis) {
        let Some(job) = txn.job(id) else { return };
        let (pri, reserves, durable) = (job.pri, job.reserves, job.durable);
        let limit = self.server.config.job_retries;
        if limit > 0 && reserves >= limit {
            fail_job(&self.server, txn, reg, id);
        } else if !durable && txn.watcher_count(id) == 0 {
            txn.delete(self.conn, id);
            reg.forget(id);
        } else {
            txn.release(self.conn, id, pri, 0, now);
            reg.reset_progress(id);
        }
    }

    /// Handles a notice from the engine: a NOOP for a sleeping worker, the WORK_* packets
    /// of a watched job, or the retry rules for a job whose CAN_DO_TIMEOUT ran out.
    fn on_notice(&mut self, notice: NoticeKind, out: &mut BytesMut) {
        match notice {
            NoticeKind::Wake => put_response(out, kind::NOOP, &[]),
            NoticeKind::Ended(id, end) => self.job_ended(id, &end, out),
            NoticeKind::Update(id, update) => {
                let h = handle::format(&self.server.config.handle_prefix, id);
                match &*update {
                    JobUpdate::Progress { num, den } => {
                        put_response(out, kind::WORK_STATUS, &[&h, num, den])
                    }
                    JobUpdate::Data(d) => put_response(out, kind::WORK_DATA, &[&h, d]),
                    JobUpdate::Warning(d) => put_response(out, kind::WORK_WARNING, &[&h, d]),
                }
            }
            NoticeKind::LeaseExpired(id) => {
                // CAN_DO_TIMEOUT ran out: the engine made the job ready again. Apply the
                // retry limit and the abandoned-foreground rule as for any requeue.
                let mut txn = self.server.broker.lock();
                let mut reg = self.server.registry();
                reg.reset_progress(id);
                let Some(job) = txn.job(id) else { return };
                if job.state == JobState::Reserved {
                    return;
                }
                let limit = self.server.config.job_retries;
                if limit > 0 && job.reserves >= limit {
                    fail_job(&self.server, &mut txn, &mut reg, id);
                } else if !job.durable && txn.watcher_count(id) == 0 {
                    txn.delete(self.conn, id);
                    reg.forget(id);
                }
            }
            NoticeKind::Reserved(_) | NoticeKind::TimedOut | NoticeKind::DeadlineSoon => {}
        }
    }

    /// The last packet a waiting client gets, whichever protocol ended the job: a job
    /// deleted elsewhere counts as done (deleting is how other protocols say so), and an
    /// exception reaches only clients that asked for exceptions (the others get WORK_FAIL).
    fn job_ended(&mut self, id: JobId, end: &JobEnd, out: &mut BytesMut) {
        let h = handle::format(&self.server.config.handle_prefix, id);
        match (end.status, &end.error) {
            (EndStatus::Ok | EndStatus::Deleted, _) => {
                put_response(out, kind::WORK_COMPLETE, &[&h, &end.result])
            }
            (EndStatus::Failed, Some(e)) if self.exceptions => {
                put_response(out, kind::WORK_EXCEPTION, &[&h, e])
            }
            (EndStatus::Failed, _) => put_response(out, kind::WORK_FAIL, &[&h]),
        }
        self.server.registry().forget(id);
    }

    /// Runs one frame and writes its replies into `out`.
    fn frame(&mut self, frame: Frame, out: &mut BytesMut) -> Outcome {
        match frame {
            Frame::Packet { request: false, .. } => {
                put_error(out, "INVALID_MAGIC", "Request magic expected");
                Outcome::Done(0)
            }
            Frame::Packet { kind, body, .. } => self.packet(kind, body, out),
            Frame::Line(line) => crate::admin_exec::run(&self.server, self.conn, &line, out),
            Frame::Fatal(f) => {
                if let Some((code, text)) = f.reply() {
                    put_error(out, code, text);
                }
                tracing::debug!(conn = self.conn, protocol = "gearman", reason = ?f, "closing");
                Outcome::Close
            }
        }
    }

    fn packet(&mut self, t: u32, body: Bytes, out: &mut BytesMut) -> Outcome {
        let not_expected = |out: &mut BytesMut| {
            put_error(out, "INVALID_COMMAND", "Command not expected");
            Outcome::Done(0)
        };
        let Some(n) = request_fields(t) else {
            return not_expected(out);
        };
        let Some(f) = split_fields(&body, n) else {
            put_error(
                out,
                "INVALID_PACKET",
                "Packet has too few arguments for its type",
            );
            return Outcome::Done(0);
        };
        let now = Broker::now();
        match t {
            kind::ALL_YOURS | kind::SUBMIT_JOB_SCHED => not_expected(out),
            kind::ECHO_REQ => {
                put_response(out, kind::ECHO_RES, &[&body]);
                Outcome::Done(0)
            }
            kind::SUBMIT_JOB
            | kind::SUBMIT_JOB_BG
            | kind::SUBMIT_JOB_HIGH
            | kind::SUBMIT_JOB_HIGH_BG
            | kind::SUBMIT_JOB_LOW
            | kind::SUBMIT_JOB_LOW_BG => {
                let (pri, background) = match t {
                    kind::SUBMIT_JOB => (PRI_NORMAL, false),
                    kind::SUBMIT_JOB_BG => (PRI_NORMAL, true),
                    kind::SUBMIT_JOB_HIGH => (PRI_HIGH, false),
                    kind::SUBMIT_JOB_HIGH_BG => (PRI_HIGH, true),
                    kind::SUBMIT_JOB_LOW => (PRI_LOW, false),
                    _ => (PRI_LOW, true),
                };
                let [func, unique, data] = <[Bytes; 3]>::try_from(f).expect("3 fields");
                self.submit(
                    Submit {
                        func,
                        unique,
                        data,
                        pri,
                        background,
                        ready_at: 0,
                        reducer: None,
                    },
                    now,
                    out,
                )
            }
            kind::SUBMIT_JOB_EPOCH => {
                let [func, unique, epoch, data] = <[Bytes; 4]>::try_from(f).expect("4 fields");
                let secs = atoi(&epoch).max(0) as u64;
                let Some(ready_at) = secs.checked_mul(1000) else {
                    put_error(out, "INVALID_PACKET", "Epoch time out of range");
                    return Outcome::Done(0);
                };
                self.submit(
                    Submit {
                        func,
                        unique,
                        data,
                        pri: PRI_NORMAL,
                        background: true,
                        ready_at,
                        reducer: None,
                    },
                    now,
                    out,
                )
            }
            kind::SUBMIT_REDUCE_JOB | kind::SUBMIT_REDUCE_JOB_BACKGROUND => {
                let [func, unique, reducer, _aggregator, data] =
                    <[Bytes; 5]>::try_from(f).expect("5 fields");
                if reducer.len() > MAX_UNIQUE {
                    put_error(out, "ARGUMENT_TOO_LARGE", "Reducer name too large");
                    return Outcome::Done(0);
                }
                self.submit(
                    Submit {
                        func,
                        unique,
                        data,
                        pri: PRI_NORMAL,
                        background: t == kind::SUBMIT_REDUCE_JOB_BACKGROUND,
                        ready_at: 0,
                        reducer: Some(reducer),
                    },
                    now,
                    out,
                )
            }
            kind::CAN_DO => self.can_do(f[0].clone(), None, now, out),
            kind::CAN_DO_TIMEOUT => {
                let ms = atoi(&f[1]);
                let timeout = (ms > 0).then(|| (ms as Millis).max(1000));
                self.can_do(f[0].clone(), timeout, now, out)
            }
            kind::CANT_DO => self.cant_do(Some(&f[0]), now),
            kind::RESET_ABILITIES => self.cant_do(None, now),
            kind::PRE_SLEEP => {
                let mut txn = self.server.broker.lock();
                if self.sleep(&mut txn, now) {
                    put_response(out, kind::NOOP, &[]);
                }
                Outcome::Done(txn.commit())
            }
            kind::GRAB_JOB => self.grab(Grab::Plain, now, out),
            kind::GRAB_JOB_UNIQ => self.grab(Grab::Uniq, now, out),
            kind::GRAB_JOB_ALL => self.grab(Grab::All, now, out),
            kind::WORK_STATUS
            | kind::WORK_COMPLETE
            | kind::WORK_FAIL
            | kind::WORK_EXCEPTION
            | kind::WORK_DATA
            | kind::WORK_WARNING => self.work(t, &f, out),
            kind::GET_STATUS => {
                self.get_status(&f[0], out);
                Outcome::Done(0)
            }
            kind::GET_STATUS_UNIQUE => {
                self.get_status_unique(&f[0], out);
                Outcome::Done(0)
            }
            kind::SET_CLIENT_ID => {
                let id = f[0].slice(..f[0].len().min(127));
                if let Some(c) = self.server.registry().conns.get_mut(&self.conn) {
                    c.client_id = id;
                }
                Outcome::Done(0)
            }
            kind::OPTION_REQ => {
                let name = &f[0];
                if name.len() < 64 && name.eq_ignore_ascii_case(b"exceptions") {
                    self.exceptions = true;
                    put_response(out, kind::OPTION_RES, &[name]);
                } else {
                    put_error(
                        out,
                        "UNKNOWN_OPTION",
                        "Server does not recognize given option",
                    );
                }
                Outcome::Done(0)
            }
            _ => not_expected(out),
        }
    }

    fn submit(&mut self, s: Submit, now: Millis, out: &mut BytesMut) -> Outcome {
        if s.unique.len() > MAX_UNIQUE {
            put_error(out, "ARGUMENT_TOO_LARGE", "Unique value too large");
            return Outcome::Done(0);
        }
        let server = self.server.clone();
        if server.broker.draining() {
            put_error(
                out,
                "QUEUE_ERROR",
                "Server is draining and accepts no new jobs",
            );
            return Outcome::Done(0);
        }
        let logged = s.background && server.broker.log().is_some();
        if logged
            && !server
                .broker
                .log()
                .is_some_and(|l| l.has_room(s.data.len() + 64))
        {
            put_error(out, "OUT_OF_MEMORY", "No room to store the job (disk full)");
            return Outcome::Done(0);
        }
        let prefix = &server.config.handle_prefix;
        let mut txn = server.broker.lock();
        let mut reg = server.registry();
        let q = ensure_function(&mut txn, &mut reg, &s.func);
        let mut key = coalesce_key(&s.unique, &s.data);
        if let Some(k) = &key {
            if let Some(id) = txn.find_unique(q, k) {
                let same = !k.starts_with(DASH_KEY)
                    || txn
                        .job(id)
                        .is_some_and(|j| txn.body(j).is_ok_and(|b| *b == s.data[..]));
                if same {
                    if !s.background {
                        txn.watch(self.conn, id);
                    }
                    put_response(out, kind::JOB_CREATED, &[&handle::format(prefix, id)]);
                    return Outcome::Done(0);
                }
                key = None;
            }
        }
        let limit = reg
            .functions
            .get(&s.func[..])
            .map_or(0, |f| f.limits[level(s.pri)]);
        if limit > 0 && total_jobs(&txn, q) >= limit as usize {
            put_error(out, "QUEUE_ERROR", "Job queue is full");
            return Outcome::Done(0);
        }
        let delay = (s.ready_at.saturating_sub(now) / 1000).min(u32::MAX as u64) as u32;
        let put = txn.put_job(
            NewJob {
                queue: q,
                pri: s.pri,
                ttr: GEARMAN_JOB_TTR,
                ready_at: s.ready_at,
                delay,
                body: s.data,
                unique: key,
                durable: s.background,
                attrs: None,
            },
            now,
        );
        ProtocolMetrics::inc(&server.metrics.jobs_created);
        if s.reducer.is_some() {
            reg.track(&txn, put.id).reducer = s.reducer;
        }
        if !s.background {
            txn.watch(self.conn, put.id);
        }
        drop(reg);
        let lsn = txn.commit();
        put_response(out, kind::JOB_CREATED, &[&handle::format(prefix, put.id)]);
        Outcome::Done(lsn)
    }

    fn mirror_abilities(&self, reg: &mut Registry) {
        if let Some(c) = reg.conns.get_mut(&self.conn) {
            c.abilities = self.abilities.iter().map(|a| a.name.clone()).collect();
        }
    }

    fn can_do(
        &mut self,
        name: Bytes,
        timeout: Option<Millis>,
        now: Millis,
        out: &mut BytesMut,
    ) -> Outcome {
        let mut txn = self.server.broker.lock();
        let mut reg = self.server.registry();
        let q = ensure_function(&mut txn, &mut reg, &name);
        txn.add_consumer(q);
        self.abilities.push(Ability { name, q, timeout });
        self.mirror_abilities(&mut reg);
        drop(reg);
        // A sleeping worker must also be woken for jobs of its new function.
        if txn.is_waiting(self.conn) && self.sleep(&mut txn, now) {
            put_response(out, kind::NOOP, &[]);
        }
        Outcome::Done(txn.commit())
    }

    /// CANT_DO (`Some(name)`) or RESET_ABILITIES (`None`): drops abilities and requeues
    /// the jobs of those functions this connection holds.
    fn cant_do(&mut self, name: Option<&Bytes>, now: Millis) -> Outcome {
        let mut txn = self.server.broker.lock();
        let mut reg = self.server.registry();
        let mut dropped: Vec<QueueId> = Vec::new();
        self.abilities.retain(|a| {
            let drop = name.is_none_or(|n| *n == a.name);
            if drop {
                dropped.push(a.q);
            }
            !drop
        });
        let held: Vec<JobId> = txn
            .held_by(self.conn)
            .filter(|id| txn.job(*id).is_some_and(|j| dropped.contains(&j.queue)))
            .collect();
        for id in held {
            self.requeue(&mut txn, &mut reg, id, now);
        }
        for q in dropped {
            txn.remove_consumer(q);
        }
        self.mirror_abilities(&mut reg);
        drop(reg);
        if txn.is_waiting(self.conn) {
            self.sleep(&mut txn, now);
        }
        Outcome::Done(txn.commit())
    }

    /// Starts (or restarts) a PRE_SLEEP wait. True if a job is available right now, so the
    /// worker must get a NOOP at once instead of sleeping.
    fn sleep(&self, txn: &mut Txn<'_>, now: Millis) -> bool {
        txn.cancel_wait(self.conn);
        let queues: Vec<QueueId> = self.abilities.iter().rev().map(|a| a.q).collect();
        matches!(
            txn.reserve(
                self.conn,
                &queues,
                WaitMode::WakeOnly,
                Lease::Unlimited,
                None,
                false,
                now
            ),
            ReserveOutcome::Available
        )
    }

    fn grab(&mut self, grab: Grab, now: Millis, out: &mut BytesMut) -> Outcome {
        let server = self.server.clone();
        let mut txn = server.broker.lock();
        let mut reg = server.registry();
        txn.cancel_wait(self.conn);
        let limit = server.config.job_retries;
        let mut found = None;
        let mut i = self.abilities.len();
        while i > 0 {
            let a = &self.abilities[i - 1];
            let lease = a.timeout.map_or(Lease::Unlimited, Lease::For);
            let ReserveOutcome::Reserved(id) = txn.reserve(
                self.conn,
                &[a.q],
                WaitMode::InOrder,
                lease,
                Some(0),
                false,
                now,
            ) else {
                i -= 1;
                continue;
            };
            let job = txn.job(id).expect("just reserved");
            if limit > 0 && job.reserves > limit {
                // Handed out `limit` times already and lost each time (e.g. by timeouts).
                fail_job(&server, &mut txn, &mut reg, id);
                continue;
            }
            if !job.durable && txn.watcher_count(id) == 0 {
                // A foreground job whose clients all left: nobody wants the result.
                txn.delete(self.conn, id);
                reg.forget(id);
                continue;
            }
            found = Some((i - 1, id));
            break;
        }
        let Some((idx, id)) = found else {
            put_response(out, kind::NO_JOB, &[]);
            return Outcome::Done(txn.commit());
        };
        reg.reset_progress(id);
        let job = txn.job(id).expect("just reserved");
        let h = handle::format(&server.config.handle_prefix, id);
        let func = &self.abilities[idx].name;
        let unique = shown_unique(txn.unique_of(id));
        let reducer = reg.tracked(id).and_then(|t| t.reducer.clone());
        let body = match txn.body(job) {
            Ok(body) => body,
            Err(e) => {
                tracing::error!("cannot read job {id}'s body back from the log: {e}");
                put_error(
                    out,
                    "BODY_UNREADABLE",
                    "the job's body cannot be read from the log",
                );
                return Outcome::Done(txn.commit());
            }
        };
        let body = &body[..];
        match (grab, reducer) {
            (Grab::Plain, _) => put_response(out, kind::JOB_ASSIGN, &[&h, func, body]),
            (Grab::All, Some(r)) => {
                put_response(out, kind::JOB_ASSIGN_ALL, &[&h, func, unique, &r, body])
            }
            _ => put_response(out, kind::JOB_ASSIGN_UNIQ, &[&h, func, unique, body]),
        }
        if server.config.round_robin {
            let a = self.abilities.remove(idx);
            self.abilities.insert(0, a);
            self.mirror_abilities(&mut reg);
        }
        drop(reg);
        Outcome::Done(txn.commit())
    }

    fn work(&mut self, t: u32, f: &[Bytes], out: &mut BytesMut) -> Outcome {
        let h = &f[0];
        if t == kind::WORK_FAIL && h.len() >= MAX_HANDLE {
            put_error(
                out,
                "ARGUMENT_TOO_LARGE",
                "Error occurred due to GEARMAND_JOB_HANDLE_SIZE being too small from snprintf",
            );
            return Outcome::Done(0);
        }
        let server = self.server.clone();
        let mut txn = server.broker.lock();
        let id = handle::parse(&server.config.handle_prefix, h).filter(|id| {
            txn.job(*id)
                .is_some_and(|j| j.state == JobState::Reserved && j.owner == self.conn)
        });
        let Some(id) = id else {
            let text = match t {
                kind::WORK_DATA | kind::WORK_WARNING => "Job does not exist on server",
                kind::WORK_EXCEPTION => "An exception was received for a job that does not exist",
                _ => "Job given in work result not found",
            };
            put_error(out, "JOB_NOT_FOUND", text);
            return Outcome::Done(0);
        };
        let mut reg = server.registry();
        let m = &server.metrics;
        match t {
            kind::WORK_STATUS => {
                let clamp = |b: &Bytes| atoi(b).clamp(0, u32::MAX as i64) as u32;
                reg.track(&txn, id).progress = (clamp(&f[1]), clamp(&f[2]));
                let (num, den) = (f[1].clone(), f[2].clone());
                txn.publish(id, JobUpdate::Progress { num, den });
            }
            kind::WORK_DATA => txn.publish(id, JobUpdate::Data(f[1].clone())),
            kind::WORK_WARNING => txn.publish(id, JobUpdate::Warning(f[1].clone())),
            kind::WORK_COMPLETE => {
                txn.finish(self.conn, id, JobEnd::ok(f[1].clone()));
                reg.forget(id);
                ProtocolMetrics::inc(&m.jobs_completed);
            }
            kind::WORK_EXCEPTION => {
                txn.finish(self.conn, id, JobEnd::failed(Some(f[1].clone())));
                reg.forget(id);
                ProtocolMetrics::inc(&m.jobs_failed);
            }
            _ => {
                txn.finish(self.conn, id, JobEnd::failed(None));
                reg.forget(id);
                ProtocolMetrics::inc(&m.jobs_failed);
            }
        }
        drop(reg);
        // The end of a job acknowledges nothing to this worker, so its next request is not
        // held back for the log: completion is at least once (a crash before the delete is
        // durable hands the job out again), as with a worker lost mid-job.
        txn.commit();
        Outcome::Done(0)
    }

    fn get_status(&self, h: &Bytes, out: &mut BytesMut) {
        let txn = self.server.broker.lock();
        let reg = self.server.registry();
        let job = handle::parse(&self.server.config.handle_prefix, h).and_then(|id| txn.job(id));
        let (known, running, (num, den)) = match job {
            None => (0, 0, (0, 0)),
            Some(j) if j.state == JobState::Reserved => {
                (1, 1, reg.tracked(j.id).map_or((0, 0), |t| t.progress))
            }
            Some(_) => (1, 0, (0, 0)),
        };
        let (num, den) = (num.to_string(), den.to_string());
        put_response(
            out,
            kind::STATUS_RES,
            &[
                h,
                num_str(known),
                num_str(running),
                num.as_bytes(),
                den.as_bytes(),
            ],
        );
    }

    fn get_status_unique(&self, u: &Bytes, out: &mut BytesMut) {
        let txn = self.server.broker.lock();
        let reg = self.server.registry();
        let found = if u.is_empty() || u.len() > MAX_UNIQUE {
            None
        } else {
            txn.queues()
                .filter_map(|q| txn.queue_id(&q.name))
                .find_map(|q| txn.find_unique(q, u))
                .and_then(|id| txn.job(id))
        };
        let (known, running, (num, den), clients) = match found {
            None => (0, 0, (0, 0), 0),
            Some(j) => {
                let tracked = reg.tracked(j.id);
                let clients = txn.watcher_count(j.id);
                if j.state == JobState::Reserved {
                    (1, 1, tracked.map_or((0, 0), |t| t.progress), clients)
                } else {
                    (1, 0, (0, 0), clients)
                }
            }
        };
        let (num, den, clients) = (num.to_string(), den.to_string(), clients.to_string());
        put_response(
            out,
            kind::STATUS_RES_UNIQUE,
            &[
                u,
                num_str(known),
                num_str(running),
                num.as_bytes(),
                den.as_bytes(),
                clients.as_bytes(),
            ],
        );
    }
}

fn num_str(n: u8) -> &'static [u8] {
    if n == 0 {
        b"0"
    } else {
        b"1"
    }
}

impl jobyard_net::Session for Session {
    type Request = Frame;

    fn execute(&mut self, frame: Frame, out: &mut BytesMut) -> Step {
        self.frame(frame, out)
    }

    fn notice(&mut self, notice: NoticeKind, out: &mut BytesMut) -> Step {
        self.on_notice(notice, out);
        Step::Done(0)
    }

    fn close(self) {
        self.end();
    }
}
