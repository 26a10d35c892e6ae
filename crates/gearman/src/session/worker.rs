//! What a worker sends and hears: its abilities (CAN_DO, CANT_DO, RESET_ABILITIES),
//! sleeping until a job comes (PRE_SLEEP, then a NOOP), grabbing a job, reporting on it
//! (WORK_*), and what happens when its CAN_DO_TIMEOUT runs out.

use bytes::{Bytes, BytesMut};
use jobyard_broker::{ProtocolMetrics, Txn};
use jobyard_engine::{
    JobEnd, JobId, JobState, JobUpdate, Lease, Millis, QueueId, ReserveOutcome, WaitMode,
};

use super::{not_expected, Outcome, Session};
use crate::admin::atoi;
use crate::functions::ensure_function;
use crate::handle;
use crate::jobs::{fail_job, shown_unique};
use crate::packet::{kind, put_error, put_response, MAX_HANDLE};
use crate::registry::Registry;

/// A function this worker can do, with its CAN_DO_TIMEOUT.
#[derive(Clone, Debug)]
pub(super) struct Ability {
    pub(super) name: Bytes,
    pub(super) q: QueueId,
    timeout: Option<Millis>,
}

/// Which assignment packet a grab asks for.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Grab {
    Plain,
    Uniq,
    All,
}

impl Session {
    /// Runs a packet a worker sends (`f` holds its fields, as many as its type has).
    pub(super) fn worker_packet(
        &mut self,
        t: u32,
        f: &[Bytes],
        now: Millis,
        out: &mut BytesMut,
    ) -> Outcome {
        match t {
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
            | kind::WORK_WARNING => self.work(t, f, out),
            _ => not_expected(out),
        }
    }

    /// CAN_DO_TIMEOUT ran out: the engine made the job ready again. Applies the retry
    /// limit and the abandoned-foreground rule as for any requeue.
    pub(super) fn lease_expired(&self, id: JobId) {
        let mut txn = self.server.broker.lock();
        let mut reg = self.server.registry();
        reg.reset_progress(id);
        let Some(job) = txn.job(id) else { return };
        // Under a retry policy the engine already counted the expiry as a failed attempt.
        if job.state == JobState::Reserved || txn.is_under_retry_policy(id) {
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
            if limit > 0 && job.reserves > limit && !txn.is_under_retry_policy(id) {
                // Handed out `limit` times already and lost each time (e.g. by timeouts);
                // a queue's retry policy counts attempts instead.
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
}
