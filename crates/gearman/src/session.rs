//! One Gearman connection's state and the execution of its binary requests.
//!
//! A connection may act as a client (`client`: submits, status queries, the exceptions
//! option) and as a worker (`worker`: abilities, sleeping, grabbing and reporting jobs),
//! even both at once; this module keeps what they share (the connection's life, its
//! notices, the packets either side sends) and routes every packet to the side that
//! sends it.
//!
//! Every request runs under the broker lock (then the registry lock), so what it causes on
//! other connections (results for watched jobs, NOOPs) is queued in their mailboxes before
//! its own reply is written, as in gearmand's single processing thread.

mod client;
mod worker;

use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use jobyard_broker::{Broker, Txn};
use jobyard_engine::{ConnId, JobId, JobState, Millis, NoticeKind};
use jobyard_net::Step;

use crate::decode::Frame;
use crate::jobs::fail_job;
use crate::packet::{kind, put_error, put_response, request_fields, split_fields};
use crate::registry::{ConnInfo, Registry};
use crate::Server;

use self::worker::Ability;

/// What the connection loop does after a frame.
pub(crate) type Outcome = Step;

/// The per-connection protocol state.
pub struct Session {
    pub conn: ConnId,
    pub(crate) server: Arc<Server>,
    /// Oldest first; grabs walk it newest first, as gearmand does.
    abilities: Vec<Ability>,
    /// Whether WORK_EXCEPTION is passed on as is (else as WORK_FAIL).
    exceptions: bool,
}

/// Who sends a packet type: it decides which half of the session handles it.
enum Sender {
    Client,
    Worker,
    /// Either side (ECHO_REQ, SET_CLIENT_ID).
    Either,
}

impl Sender {
    /// The sender of a request type the server serves; `None` for the ones it does not
    /// (ALL_YOURS, SUBMIT_JOB_SCHED, which gearmand refuses too).
    fn of(t: u32) -> Option<Sender> {
        match t {
            kind::SUBMIT_JOB
            | kind::SUBMIT_JOB_BG
            | kind::SUBMIT_JOB_HIGH
            | kind::SUBMIT_JOB_HIGH_BG
            | kind::SUBMIT_JOB_LOW
            | kind::SUBMIT_JOB_LOW_BG
            | kind::SUBMIT_JOB_EPOCH
            | kind::SUBMIT_REDUCE_JOB
            | kind::SUBMIT_REDUCE_JOB_BACKGROUND
            | kind::GET_STATUS
            | kind::GET_STATUS_UNIQUE
            | kind::OPTION_REQ => Some(Sender::Client),
            kind::CAN_DO
            | kind::CAN_DO_TIMEOUT
            | kind::CANT_DO
            | kind::RESET_ABILITIES
            | kind::PRE_SLEEP
            | kind::GRAB_JOB
            | kind::GRAB_JOB_UNIQ
            | kind::GRAB_JOB_ALL
            | kind::WORK_STATUS
            | kind::WORK_COMPLETE
            | kind::WORK_FAIL
            | kind::WORK_EXCEPTION
            | kind::WORK_DATA
            | kind::WORK_WARNING => Some(Sender::Worker),
            kind::ECHO_REQ | kind::SET_CLIENT_ID => Some(Sender::Either),
            _ => None,
        }
    }
}

/// The reply to a request packet the server does not serve (or not from this side).
fn not_expected(out: &mut BytesMut) -> Outcome {
    put_error(out, "INVALID_COMMAND", "Command not expected");
    Outcome::Done(0)
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
    /// Under a queue's retry policy the engine decides instead (a failed attempt).
    fn requeue(&self, txn: &mut Txn<'_>, reg: &mut Registry, id: JobId, now: Millis) {
        if txn.abandon(self.conn, id, now) {
            reg.reset_progress(id);
            return;
        }
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
            NoticeKind::Update(id, update) => self.job_updated(id, &update, out),
            NoticeKind::LeaseExpired(id) => self.lease_expired(id),
            NoticeKind::Reserved(_) | NoticeKind::TimedOut | NoticeKind::DeadlineSoon => {}
        }
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

    /// Checks a request packet's fields and hands it to the side that sends it.
    fn packet(&mut self, t: u32, body: Bytes, out: &mut BytesMut) -> Outcome {
        let Some(n) = request_fields(t) else {
            return not_expected(out);
        };
        let Some(fields) = split_fields(&body, n) else {
            put_error(
                out,
                "INVALID_PACKET",
                "Packet has too few arguments for its type",
            );
            return Outcome::Done(0);
        };
        let now = Broker::now();
        match Sender::of(t) {
            Some(Sender::Client) => self.client_packet(t, fields, now, out),
            Some(Sender::Worker) => self.worker_packet(t, &fields, now, out),
            Some(Sender::Either) => self.either_packet(t, &body, &fields, out),
            None => not_expected(out),
        }
    }

    /// A packet either side sends: ECHO_REQ or SET_CLIENT_ID.
    fn either_packet(&mut self, t: u32, body: &Bytes, f: &[Bytes], out: &mut BytesMut) -> Outcome {
        match t {
            kind::ECHO_REQ => put_response(out, kind::ECHO_RES, &[body]),
            kind::SET_CLIENT_ID => {
                let id = f[0].slice(..f[0].len().min(127));
                if let Some(c) = self.server.registry().conns.get_mut(&self.conn) {
                    c.client_id = id;
                }
            }
            _ => return not_expected(out),
        }
        Outcome::Done(0)
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
