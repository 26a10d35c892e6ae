//! What a client sends and hears: submits of every kind, status queries, the
//! `exceptions` option, and the WORK_* packets of the jobs it watches.

use bytes::{Bytes, BytesMut};
use jobyard_broker::ProtocolMetrics;
use jobyard_engine::{EndStatus, JobEnd, JobId, JobState, JobUpdate, Millis, NewJob};

use super::{not_expected, Outcome, Session};
use crate::admin::atoi;
use crate::functions::{ensure_function, level, total_jobs};
use crate::jobs::{coalesce_key, DASH_KEY};
use crate::packet::{kind, put_error, put_response, MAX_UNIQUE};
use crate::{handle, GEARMAN_JOB_TTR, PRI_HIGH, PRI_LOW, PRI_NORMAL};

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

impl Submit {
    /// A submit that runs as soon as possible and reduces nothing.
    fn now(fields: Vec<Bytes>, pri: u32, background: bool) -> Submit {
        let [func, unique, data] = <[Bytes; 3]>::try_from(fields).expect("3 fields");
        Submit {
            func,
            unique,
            data,
            pri,
            background,
            ready_at: 0,
            reducer: None,
        }
    }
}

/// The priority and background flag of a plain SUBMIT_JOB* packet type.
fn plain_submit(t: u32) -> Option<(u32, bool)> {
    match t {
        kind::SUBMIT_JOB => Some((PRI_NORMAL, false)),
        kind::SUBMIT_JOB_BG => Some((PRI_NORMAL, true)),
        kind::SUBMIT_JOB_HIGH => Some((PRI_HIGH, false)),
        kind::SUBMIT_JOB_HIGH_BG => Some((PRI_HIGH, true)),
        kind::SUBMIT_JOB_LOW => Some((PRI_LOW, false)),
        kind::SUBMIT_JOB_LOW_BG => Some((PRI_LOW, true)),
        _ => None,
    }
}

impl Session {
    /// Runs a packet a client sends (`f` holds its fields, as many as its type has).
    pub(super) fn client_packet(
        &mut self,
        t: u32,
        f: Vec<Bytes>,
        now: Millis,
        out: &mut BytesMut,
    ) -> Outcome {
        if let Some((pri, background)) = plain_submit(t) {
            return self.submit(Submit::now(f, pri, background), now, out);
        }
        match t {
            kind::SUBMIT_JOB_EPOCH => self.submit_epoch(f, now, out),
            kind::SUBMIT_REDUCE_JOB | kind::SUBMIT_REDUCE_JOB_BACKGROUND => {
                self.submit_reduce(t, f, now, out)
            }
            kind::GET_STATUS => {
                self.get_status(&f[0], out);
                Outcome::Done(0)
            }
            kind::GET_STATUS_UNIQUE => {
                self.get_status_unique(&f[0], out);
                Outcome::Done(0)
            }
            kind::OPTION_REQ => {
                self.option(&f[0], out);
                Outcome::Done(0)
            }
            _ => not_expected(out),
        }
    }

    /// SUBMIT_JOB_EPOCH: a background job that becomes ready at a wall-clock second.
    fn submit_epoch(&mut self, f: Vec<Bytes>, now: Millis, out: &mut BytesMut) -> Outcome {
        let [func, unique, epoch, data] = <[Bytes; 4]>::try_from(f).expect("4 fields");
        let secs = atoi(&epoch).max(0) as u64;
        let Some(ready_at) = secs.checked_mul(1000) else {
            put_error(out, "INVALID_PACKET", "Epoch time out of range");
            return Outcome::Done(0);
        };
        let submit = Submit {
            func,
            unique,
            data,
            pri: PRI_NORMAL,
            background: true,
            ready_at,
            reducer: None,
        };
        self.submit(submit, now, out)
    }

    /// SUBMIT_REDUCE_JOB(_BACKGROUND): a job that names the reducer its worker is told of.
    fn submit_reduce(&mut self, t: u32, f: Vec<Bytes>, now: Millis, out: &mut BytesMut) -> Outcome {
        let [func, unique, reducer, _aggregator, data] =
            <[Bytes; 5]>::try_from(f).expect("5 fields");
        if reducer.len() > MAX_UNIQUE {
            put_error(out, "ARGUMENT_TOO_LARGE", "Reducer name too large");
            return Outcome::Done(0);
        }
        let submit = Submit {
            func,
            unique,
            data,
            pri: PRI_NORMAL,
            background: t == kind::SUBMIT_REDUCE_JOB_BACKGROUND,
            ready_at: 0,
            reducer: Some(reducer),
        };
        self.submit(submit, now, out)
    }

    /// OPTION_REQ: only `exceptions` is known.
    fn option(&mut self, name: &Bytes, out: &mut BytesMut) {
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

    /// The last packet a waiting client gets, whichever protocol ended the job: a job
    /// deleted elsewhere counts as done (deleting is how other protocols say so), and an
    /// exception reaches only clients that asked for exceptions (the others get WORK_FAIL).
    pub(super) fn job_ended(&mut self, id: JobId, end: &JobEnd, out: &mut BytesMut) {
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

    /// What the worker of a watched job published: its progress, data or a warning.
    pub(super) fn job_updated(&self, id: JobId, update: &JobUpdate, out: &mut BytesMut) {
        let h = handle::format(&self.server.config.handle_prefix, id);
        match update {
            JobUpdate::Progress { num, den } => {
                put_response(out, kind::WORK_STATUS, &[&h, num, den])
            }
            JobUpdate::Data(d) => put_response(out, kind::WORK_DATA, &[&h, d]),
            JobUpdate::Warning(d) => put_response(out, kind::WORK_WARNING, &[&h, d]),
        }
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
