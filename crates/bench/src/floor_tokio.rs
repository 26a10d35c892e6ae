//! The floor again, on a tokio current-thread runtime (`floor --tokio`): the same protocol
//! subset and the same FIFO of bodies, but one task per connection, as jobyard's narrow
//! runtime serves them. Measured beside the epoll floor it tells how much of a server's
//! cost at moderate load is the runtime's way of waking and ordering work rather than
//! the server's own (docs/performance.md, "Moderate load").

use std::cell::RefCell;
use std::collections::VecDeque;
use std::io;
use std::rc::Rc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;

use crate::floor::{put_body_len, reply_job};

/// A job: its id and body.
type Job = (u64, Vec<u8>);

/// The queue every connection shares (one thread: no lock).
#[derive(Default)]
struct Queue {
    jobs: VecDeque<Job>,
    waiters: VecDeque<oneshot::Sender<Job>>,
    next_id: u64,
}

impl Queue {
    /// Queues a job, or hands it to the oldest reserve still waiting.
    fn put(&mut self, body: Vec<u8>) -> u64 {
        self.next_id += 1;
        let mut job = (self.next_id, body);
        while let Some(waiter) = self.waiters.pop_front() {
            match waiter.send(job) {
                Ok(()) => return self.next_id,
                Err(back) => job = back,
            }
        }
        self.jobs.push_back(job);
        self.next_id
    }
}

/// Serves `listener` until the process is killed. `work` is busy-waited before each
/// write of answers: it stands for a server's own work per request, to measure what that
/// work costs beyond itself (the switches it brings about).
pub fn run(listener: std::net::TcpListener, work: Duration) -> io::Result<()> {
    listener.set_nonblocking(true)?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let local = tokio::task::LocalSet::new();
    local.block_on(&runtime, async move {
        let listener = TcpListener::from_std(listener)?;
        let queue = Rc::new(RefCell::new(Queue::default()));
        loop {
            let (stream, _) = listener.accept().await?;
            stream.set_nodelay(true)?;
            tokio::task::spawn_local(serve(stream, queue.clone(), work));
        }
    })
}

/// One connection: reads requests, answers each complete one, writes the answers.
async fn serve(mut stream: TcpStream, queue: Rc<RefCell<Queue>>, work: Duration) {
    let mut rbuf: Vec<u8> = Vec::with_capacity(16 << 10);
    let mut wbuf: Vec<u8> = Vec::with_capacity(16 << 10);
    loop {
        let mut at = 0;
        while let Some(used) = answer(&rbuf[at..], &queue, &mut wbuf).await {
            at += used;
        }
        rbuf.drain(..at);
        if !wbuf.is_empty() {
            busy_wait(work);
            if stream.write_all(&wbuf).await.is_err() {
                return;
            }
            wbuf.clear();
        }
        match stream.read_buf(&mut rbuf).await {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
    }
}

/// Keeps the thread running for `time` without giving it up.
fn busy_wait(time: Duration) {
    let started = std::time::Instant::now();
    while started.elapsed() < time {
        std::hint::spin_loop();
    }
}

/// Answers the first complete request in `input` into `out`; returns the bytes it used,
/// or `None` when no whole request is there yet. A reserve with no job waits for one.
async fn answer(input: &[u8], queue: &Rc<RefCell<Queue>>, out: &mut Vec<u8>) -> Option<usize> {
    let eol = input.windows(2).position(|w| w == b"\r\n")?;
    let line = &input[..eol];
    if let Some(args) = line.strip_prefix(b"put ") {
        let len = put_body_len(args);
        let end = eol + 2 + len + 2;
        if input.len() < end {
            return None;
        }
        let id = queue
            .borrow_mut()
            .put(input[eol + 2..eol + 2 + len].to_vec());
        out.extend_from_slice(format!("INSERTED {id}\r\n").as_bytes());
        return Some(end);
    }
    if line.starts_with(b"reserve") {
        let secs: Option<u64> = line
            .strip_prefix(b"reserve-with-timeout ")
            .and_then(|s| std::str::from_utf8(s).ok()?.parse().ok());
        let ready = queue.borrow_mut().jobs.pop_front();
        let job = match (ready, secs) {
            (Some(job), _) => Some(job),
            (None, Some(0)) => None,
            (None, secs) => {
                let (tx, rx) = oneshot::channel();
                queue.borrow_mut().waiters.push_back(tx);
                let wait = Duration::from_secs(secs.unwrap_or(u64::MAX / 4).min(1 << 30));
                tokio::time::timeout(wait, rx)
                    .await
                    .ok()
                    .and_then(Result::ok)
            }
        };
        match job {
            Some((id, body)) => reply_job(out, id, &body),
            None => out.extend_from_slice(b"TIMED_OUT\r\n"),
        }
    } else if line.starts_with(b"delete ") {
        out.extend_from_slice(b"DELETED\r\n");
    } else if line.starts_with(b"watch ") || line.starts_with(b"ignore ") {
        out.extend_from_slice(b"WATCHING 1\r\n");
    } else if let Some(name) = line.strip_prefix(b"use ") {
        out.extend_from_slice(b"USING ");
        out.extend_from_slice(name);
        out.extend_from_slice(b"\r\n");
    } else if line == b"stats" {
        let yaml = format!("---\ncurrent-jobs-ready: {}\n", queue.borrow().jobs.len());
        out.extend_from_slice(format!("OK {}\r\n{yaml}\r\n", yaml.len()).as_bytes());
    } else {
        out.extend_from_slice(b"UNKNOWN_COMMAND\r\n");
    }
    Some(eol + 2)
}
