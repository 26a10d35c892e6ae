//! One connection's protocol state and the execution of its commands.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use bytes::{BufMut, Bytes, BytesMut};
use jobyard_broker::{Broker, ProtocolMetrics, Txn};
use jobyard_engine::{ConnId, Job, JobState, Lease, NoticeKind, QueueId, ReserveOutcome, WaitMode};
use jobyard_net::Step;

use crate::command::Command;
use crate::decode::Request;
use crate::stats::{job_yaml, list_yaml, tube_yaml, Counted, LogStats};
use crate::Server;

/// What the connection loop must do after a command.
type Outcome = Step;

/// The tubes a connection uses and watches, and what it has done so far.
pub struct Session {
    pub conn: ConnId,
    server: Arc<Server>,
    using: QueueId,
    /// Watch list in beanstalkd's order: removing a tube moves the last one into its slot.
    watching: Vec<QueueId>,
    producer: bool,
    worker: bool,
    /// When the blocking reserve in progress gives up (`None`: never).
    wait_until: Option<u64>,
    /// Whether a blocking reserve is in progress.
    waiting: bool,
}

impl Session {
    /// Starts a session using and watching `default`.
    pub fn new(server: Arc<Server>, conn: ConnId) -> Session {
        let mut txn = server.broker.lock();
        let default = txn.queue_id_or_create(b"default");
        txn.add_producer(default);
        txn.add_consumer(default);
        drop(txn);
        Session {
            conn,
            server,
            using: default,
            watching: vec![default],
            producer: false,
            worker: false,
            wait_until: None,
            waiting: false,
        }
    }

    /// Ends the session: tube references are dropped (the connection layer then forgets
    /// the connection in the broker, which makes its jobs ready again).
    fn end(self) {
        let broker = &self.server.broker;
        let mut txn = broker.lock();
        txn.remove_producer(self.using);
        for &q in &self.watching {
            txn.remove_consumer(q);
        }
        drop(txn);
        let stats = &self.server.stats;
        if self.producer {
            stats.current_producers.fetch_sub(1, Ordering::Relaxed);
        }
        if self.worker {
            stats.current_workers.fetch_sub(1, Ordering::Relaxed);
        }
    }

    fn count(&self, c: Counted) {
        self.server.metrics.count(c as usize);
    }

    fn became_worker(&mut self) {
        if !self.worker {
            self.worker = true;
            self.server
                .stats
                .current_workers
                .fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Runs one request and writes its reply (unless it must wait) into `out`.
    fn run(&mut self, req: Request, out: &mut BytesMut) -> Outcome {
        match req {
            Request::Command(c) => self.command(c, out),
            Request::Put {
                pri,
                delay,
                ttr,
                body,
            } => self.put(pri, delay, ttr, body, out),
            Request::PutRejected(reply) => {
                self.count(Counted::Put);
                out.put_slice(reply);
                Outcome::Done(0)
            }
            Request::Invalid(e) => {
                out.put_slice(e.reply());
                Outcome::Done(0)
            }
        }
    }

    fn put(&mut self, pri: u32, delay: u32, ttr: u32, body: Bytes, out: &mut BytesMut) -> Outcome {
        self.count(Counted::Put);
        if !self.producer {
            self.producer = true;
            self.server
                .stats
                .current_producers
                .fetch_add(1, Ordering::Relaxed);
        }
        let broker = &self.server.broker;
        if broker.draining() {
            out.put_slice(b"DRAINING\r\n");
            return Outcome::Done(0);
        }
        if broker
            .log()
            .is_some_and(|log| !log.has_room(body.len() + 64))
        {
            out.put_slice(crate::decode::OUT_OF_MEMORY); // the disk has no room for it
            return Outcome::Done(0);
        }
        let mut txn = broker.lock();
        let put = txn.put(
            self.using,
            pri,
            delay,
            ttr.max(1),
            body,
            true,
            Broker::now(),
        );
        let lsn = txn.commit();
        ProtocolMetrics::inc(&self.server.metrics.jobs_created);
        reply_num(out, b"INSERTED ", put.id);
        Outcome::Done(lsn)
    }

    fn command(&mut self, c: Command, out: &mut BytesMut) -> Outcome {
        let now = Broker::now();
        let server = self.server.clone();
        let mut txn = server.broker.lock();
        let reply: &[u8] = match c {
            Command::Put { .. } => unreachable!("the decoder turns put lines into Request::Put"),
            Command::Use(name) => {
                self.count(Counted::Use);
                let q = txn.queue_id_or_create(&name);
                if q != self.using {
                    txn.add_producer(q);
                    txn.remove_producer(self.using);
                    self.using = q;
                }
                out.put_slice(b"USING ");
                out.put_slice(&name);
                b"\r\n"
            }
            Command::Reserve | Command::ReserveWithTimeout(_) => {
                let timeout = match c {
                    Command::ReserveWithTimeout(s) => {
                        self.count(Counted::ReserveWithTimeout);
                        Some(s as u64 * 1000)
                    }
                    _ => {
                        self.count(Counted::Reserve);
                        None
                    }
                };
                self.became_worker();
                self.wait_until = timeout.map(|t| now + t);
                match self.try_reserve(&mut txn, timeout, now, out) {
                    Some(reply) => reply,
                    None => {
                        self.waiting = true;
                        return Outcome::Wait;
                    }
                }
            }
            Command::ReserveJob(id) => {
                self.became_worker();
                if txn.reserve_job(self.conn, id, Lease::JobTtr, now) {
                    write_job(out, b"RESERVED ", &txn, txn.job(id).expect("just reserved"));
                    b""
                } else {
                    b"NOT_FOUND\r\n"
                }
            }
            Command::Delete(id) => {
                self.count(Counted::Delete);
                found(txn.delete(self.conn, id), b"DELETED\r\n")
            }
            Command::Release { id, pri, delay } => {
                self.count(Counted::Release);
                found(txn.release(self.conn, id, pri, delay, now), b"RELEASED\r\n")
            }
            Command::Bury { id, pri } => {
                self.count(Counted::Bury);
                found(txn.bury(self.conn, id, pri), b"BURIED\r\n")
            }
            Command::Touch(id) => {
                self.count(Counted::Touch);
                found(txn.touch(self.conn, id, now), b"TOUCHED\r\n")
            }
            Command::Watch(name) => {
                self.count(Counted::Watch);
                let q = txn.queue_id_or_create(&name);
                if !self.watching.contains(&q) {
                    txn.add_consumer(q);
                    self.watching.push(q);
                }
                reply_num(out, b"WATCHING ", self.watching.len() as u64);
                b""
            }
            Command::Ignore(name) => {
                self.count(Counted::Ignore);
                self.ignore(&mut txn, &name, out)
            }
            Command::Peek(id) => {
                self.count(Counted::Peek);
                peek(out, &txn, txn.job(id))
            }
            Command::PeekReady => {
                self.count(Counted::PeekReady);
                peek(out, &txn, txn.peek_ready(self.using))
            }
            Command::PeekDelayed => {
                self.count(Counted::PeekDelayed);
                peek(out, &txn, txn.peek_delayed(self.using))
            }
            Command::PeekBuried => {
                self.count(Counted::PeekBuried);
                peek(out, &txn, txn.peek_buried(self.using))
            }
            Command::Kick(bound) => {
                self.count(Counted::Kick);
                let n = txn.kick(self.using, bound as u64, now);
                reply_num(out, b"KICKED ", n);
                b""
            }
            Command::KickJob(id) => found(txn.kick_job(id, now), b"KICKED\r\n"),
            Command::StatsJob(id) => {
                self.count(Counted::StatsJob);
                match txn.job(id) {
                    Some(job) => yaml(out, &job_yaml(&txn, job, now)),
                    None => b"NOT_FOUND\r\n",
                }
            }
            Command::StatsTube(name) => {
                self.count(Counted::StatsTube);
                match txn.queue_id(&name) {
                    Some(q) => yaml(out, &tube_yaml(&txn, q, now)),
                    None => b"NOT_FOUND\r\n",
                }
            }
            Command::Stats => {
                self.count(Counted::Stats);
                let y = self.server.stats.server_yaml(
                    &txn,
                    &self.server.metrics,
                    self.server.config.max_job_size,
                    self.log_stats(),
                    server.broker.draining(),
                );
                yaml(out, &y)
            }
            Command::ListTubes => {
                self.count(Counted::ListTubes);
                yaml(out, &list_yaml(txn.queues().map(|q| &q.name[..])))
            }
            Command::ListTubeUsed => {
                self.count(Counted::ListTubeUsed);
                out.put_slice(b"USING ");
                out.put_slice(&txn.queue(self.using).name);
                b"\r\n"
            }
            Command::ListTubesWatched => {
                self.count(Counted::ListTubesWatched);
                let names = self.watching.iter().map(|&q| &txn.queue(q).name[..]);
                yaml(out, &list_yaml(names))
            }
            Command::PauseTube(name, secs) => {
                self.count(Counted::PauseTube);
                match txn.queue_id(&name) {
                    Some(q) => {
                        txn.pause(q, secs, now);
                        b"PAUSED\r\n"
                    }
                    None => b"NOT_FOUND\r\n",
                }
            }
            Command::Quit => return Outcome::Close,
        };
        out.put_slice(reply);
        Outcome::Done(txn.commit())
    }

    /// Reserves a job into `out`, or returns the reply for why not, or `None` when the
    /// connection now waits.
    fn try_reserve(
        &self,
        txn: &mut Txn<'_>,
        timeout: Option<u64>,
        now: u64,
        out: &mut BytesMut,
    ) -> Option<&'static [u8]> {
        let outcome = txn.reserve(
            self.conn,
            &self.watching,
            WaitMode::Best,
            Lease::JobTtr,
            timeout,
            true,
            now,
        );
        match outcome {
            ReserveOutcome::Reserved(id) => {
                write_job(out, b"RESERVED ", txn, txn.job(id).expect("just reserved"));
                Some(b"")
            }
            ReserveOutcome::DeadlineSoon => Some(b"DEADLINE_SOON\r\n"),
            ReserveOutcome::TimedOut => Some(b"TIMED_OUT\r\n"),
            ReserveOutcome::Waiting => None,
            ReserveOutcome::Available => unreachable!("only for WakeOnly waits"),
        }
    }

    fn ignore(&mut self, txn: &mut Txn<'_>, name: &[u8], out: &mut BytesMut) -> &'static [u8] {
        let pos = txn
            .queue_id(name)
            .and_then(|q| self.watching.iter().position(|&w| w == q));
        if let Some(pos) = pos {
            if self.watching.len() == 1 {
                return b"NOT_IGNORED\r\n";
            }
            let q = self.watching.swap_remove(pos);
            txn.remove_consumer(q);
        }
        reply_num(out, b"WATCHING ", self.watching.len() as u64);
        b""
    }

    fn log_stats(&self) -> LogStats {
        match self.server.broker.log() {
            Some(log) => LogStats {
                oldest_index: log.oldest_segment(),
                current_index: log.current_segment(),
                records_written: log.records_written(),
                max_size: self.server.config.segment_bytes,
            },
            None => LogStats {
                max_size: self.server.config.segment_bytes,
                ..LogStats::default()
            },
        }
    }

    /// Finishes a blocking reserve that the engine served with `id`. Returns false if the
    /// job is no longer this connection's (it then must reserve again).
    fn deliver(&self, id: u64, out: &mut BytesMut) -> bool {
        let txn = self.server.broker.lock();
        match txn.job(id) {
            Some(job) if job.state == JobState::Reserved && job.owner == self.conn => {
                write_job(out, b"RESERVED ", &txn, job);
                true
            }
            _ => false,
        }
    }

    /// Retries a blocking reserve whose delivered job was lost in between (its lease ran
    /// out first), keeping what is left of the original timeout and counting nothing again.
    fn reserve_again(&mut self, out: &mut BytesMut) -> Outcome {
        let now = Broker::now();
        let timeout = self.wait_until.map(|at| at.saturating_sub(now));
        let mut txn = self.server.broker.lock();
        match self.try_reserve(&mut txn, timeout, now, out) {
            Some(reply) => {
                out.put_slice(reply);
                Outcome::Done(txn.commit())
            }
            None => Outcome::Wait,
        }
    }

    /// Ends a blocking reserve (the client half-closed, or the server stops).
    fn cancel_wait(&mut self) {
        self.waiting = false;
        self.server.broker.lock().cancel_wait(self.conn);
    }

    /// What a notice means while a blocking reserve waits for it.
    fn answer_wait(&mut self, notice: NoticeKind, out: &mut BytesMut) -> Outcome {
        match notice {
            NoticeKind::Reserved(id) => {
                if self.deliver(id, out) {
                    return Outcome::Done(0);
                }
                self.reserve_again(out)
            }
            NoticeKind::TimedOut => {
                out.put_slice(b"TIMED_OUT\r\n");
                Outcome::Done(0)
            }
            NoticeKind::DeadlineSoon => {
                out.put_slice(b"DEADLINE_SOON\r\n");
                Outcome::Done(0)
            }
            NoticeKind::Wake
            | NoticeKind::LeaseExpired(_)
            | NoticeKind::Ended(..)
            | NoticeKind::Update(..) => Outcome::Wait,
        }
    }
}

impl jobyard_net::Session for Session {
    type Request = Request;

    fn execute(&mut self, req: Request, out: &mut BytesMut) -> Step {
        self.run(req, out)
    }

    fn notices_while_idle(&self) -> bool {
        false
    }

    fn notice(&mut self, notice: NoticeKind, out: &mut BytesMut) -> Step {
        if !self.waiting {
            // Lease-expiry notices matter only to a blocked reserve.
            return Step::Done(0);
        }
        let step = self.answer_wait(notice, out);
        self.waiting = step == Step::Wait;
        step
    }

    fn half_closed(&mut self, out: &mut BytesMut) {
        // As beanstalkd: a client that half-closes while blocked gets TIMED_OUT.
        self.cancel_wait();
        out.put_slice(b"TIMED_OUT\r\n");
    }

    fn stop_waiting(&mut self) {
        // Close without a reply; a job served meanwhile is made ready by the disconnect.
        self.cancel_wait();
    }

    fn close(self) {
        self.end();
    }
}

fn found(ok: bool, reply: &'static [u8]) -> &'static [u8] {
    if ok {
        reply
    } else {
        b"NOT_FOUND\r\n"
    }
}

fn reply_num(out: &mut BytesMut, word: &[u8], n: u64) {
    out.put_slice(word);
    put_num(out, n);
    out.put_slice(b"\r\n");
}

/// A number in decimal, formatted on the stack: replies carry one or two per job.
fn put_num(out: &mut BytesMut, n: u64) {
    out.put_slice(itoa::Buffer::new().format(n).as_bytes());
}

/// Writes a job with its body; a body the log cannot give back gets `INTERNAL_ERROR`
/// (logged) rather than a wrong body.
fn write_job(out: &mut BytesMut, word: &[u8], txn: &Txn<'_>, job: &Job) {
    let body = match txn.body(job) {
        Ok(body) => body,
        Err(e) => {
            tracing::error!("cannot read job {}'s body back from the log: {e}", job.id);
            out.put_slice(b"INTERNAL_ERROR\r\n");
            return;
        }
    };
    out.reserve(body.len() + 48);
    out.put_slice(word);
    put_num(out, job.id);
    out.put_u8(b' ');
    put_num(out, body.len() as u64);
    out.put_slice(b"\r\n");
    out.put_slice(&body);
    out.put_slice(b"\r\n");
}

fn peek(out: &mut BytesMut, txn: &Txn<'_>, job: Option<&Job>) -> &'static [u8] {
    match job {
        Some(job) => {
            write_job(out, b"FOUND ", txn, job);
            b""
        }
        None => b"NOT_FOUND\r\n",
    }
}

fn yaml(out: &mut BytesMut, y: &str) -> &'static [u8] {
    out.put_slice(b"OK ");
    put_num(out, y.len() as u64);
    out.put_slice(b"\r\n");
    out.put_slice(y.as_bytes());
    b"\r\n"
}
