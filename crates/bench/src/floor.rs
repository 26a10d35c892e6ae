//! The floor: the least a beanstalkd-protocol server can cost on this machine.
//!
//! One thread, one epoll, non-blocking sockets, and just enough of the protocol for the
//! load generator's workloads (`use`, `watch`, `ignore`, `put`, `reserve-with-timeout`,
//! `delete`, `stats`):
//! jobs are bodies in one FIFO, ids are a counter, nothing is durable, nothing is checked
//! that the workloads do not need. What it costs per job is the kernel's loopback and
//! syscall cost plus a few hundred nanoseconds; benchmarks report real servers as a ratio
//! to it, measured in the same run (`bench/compare.sh`).

use std::collections::{HashMap, VecDeque};
use std::io::{self, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::fd::{AsRawFd, RawFd};
use std::time::{Duration, Instant};

/// A connection and its buffers.
struct Peer {
    stream: TcpStream,
    rbuf: Vec<u8>,
    wbuf: Vec<u8>,
    /// A `reserve-with-timeout` waiting for a job, until this time.
    waiting_until: Option<Instant>,
}

/// Serves `listener` until the process is killed. Prints the bound address first.
pub fn run(listener: TcpListener) -> io::Result<()> {
    listener.set_nonblocking(true)?;
    let epoll = Epoll::new()?;
    let lfd = listener.as_raw_fd();
    epoll.add(lfd)?;
    let mut peers: HashMap<RawFd, Peer> = HashMap::new();
    let mut jobs: VecDeque<(u64, Vec<u8>)> = VecDeque::new();
    let mut waiters: VecDeque<RawFd> = VecDeque::new();
    let mut next_id = 1u64;
    let mut events = vec![libc::epoll_event { events: 0, u64: 0 }; 256];
    loop {
        let timeout_ms = if waiters.is_empty() { -1 } else { 50 };
        let n = epoll.wait(&mut events, timeout_ms)?;
        for ev in &events[..n] {
            let fd = ev.u64 as RawFd;
            if fd == lfd {
                while let Ok((s, _)) = listener.accept() {
                    s.set_nonblocking(true)?;
                    s.set_nodelay(true)?;
                    let sfd = s.as_raw_fd();
                    epoll.add(sfd)?;
                    peers.insert(
                        sfd,
                        Peer {
                            stream: s,
                            rbuf: Vec::with_capacity(16 << 10),
                            wbuf: Vec::with_capacity(16 << 10),
                            waiting_until: None,
                        },
                    );
                }
                continue;
            }
            let Some(peer) = peers.get_mut(&fd) else {
                continue;
            };
            if !read_all(peer) {
                peers.remove(&fd);
                waiters.retain(|&w| w != fd);
                continue;
            }
            handle(peer, fd, &mut jobs, &mut waiters, &mut next_id);
            flush(peer);
        }
        serve_waiters(&mut peers, &mut jobs, &mut waiters, &mut next_id);
    }
}

/// Reads what is there; false when the peer closed.
fn read_all(peer: &mut Peer) -> bool {
    let mut chunk = [0u8; 64 << 10];
    loop {
        match peer.stream.read(&mut chunk) {
            Ok(0) => return false,
            Ok(n) => peer.rbuf.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return true,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => return false,
        }
    }
}

fn flush(peer: &mut Peer) {
    if !peer.wbuf.is_empty() {
        // Replies are small and the client reads them; a short write is retried once the
        // next request arrives (good enough for a floor).
        if let Ok(n) = peer.stream.write(&peer.wbuf) {
            peer.wbuf.drain(..n);
        }
    }
}

/// Runs every complete request in the peer's buffer.
fn handle(
    peer: &mut Peer,
    fd: RawFd,
    jobs: &mut VecDeque<(u64, Vec<u8>)>,
    waiters: &mut VecDeque<RawFd>,
    next_id: &mut u64,
) {
    let mut at = 0;
    while peer.waiting_until.is_none() {
        let rest = &peer.rbuf[at..];
        let Some(eol) = rest.windows(2).position(|w| w == b"\r\n") else {
            break;
        };
        let line = &rest[..eol];
        if let Some(args) = line.strip_prefix(b"put ") {
            let len = put_body_len(args);
            if rest.len() < eol + 2 + len + 2 {
                break;
            }
            let body = rest[eol + 2..eol + 2 + len].to_vec();
            let id = *next_id;
            *next_id += 1;
            jobs.push_back((id, body));
            peer.wbuf
                .extend_from_slice(format!("INSERTED {id}\r\n").as_bytes());
            at += eol + 2 + len + 2;
            continue;
        }
        at += eol + 2;
        if line.starts_with(b"reserve") {
            let secs: u64 = line
                .strip_prefix(b"reserve-with-timeout ")
                .and_then(|s| std::str::from_utf8(s).ok()?.parse().ok())
                .unwrap_or(u64::MAX / 4);
            match jobs.pop_front() {
                Some((id, body)) => reply_job(&mut peer.wbuf, id, &body),
                None if secs == 0 => peer.wbuf.extend_from_slice(b"TIMED_OUT\r\n"),
                None => {
                    peer.waiting_until = Some(Instant::now() + Duration::from_secs(secs));
                    waiters.push_back(fd);
                }
            }
        } else if line.starts_with(b"delete ") {
            peer.wbuf.extend_from_slice(b"DELETED\r\n");
        } else if line.starts_with(b"watch ") || line.starts_with(b"ignore ") {
            peer.wbuf.extend_from_slice(b"WATCHING 1\r\n");
        } else if let Some(name) = line.strip_prefix(b"use ") {
            peer.wbuf.extend_from_slice(b"USING ");
            peer.wbuf.extend_from_slice(name);
            peer.wbuf.extend_from_slice(b"\r\n");
        } else if line == b"stats" {
            let yaml = format!("---\ncurrent-jobs-ready: {}\n", jobs.len());
            peer.wbuf
                .extend_from_slice(format!("OK {}\r\n{yaml}\r\n", yaml.len()).as_bytes());
        } else {
            peer.wbuf.extend_from_slice(b"UNKNOWN_COMMAND\r\n");
        }
    }
    peer.rbuf.drain(..at);
}

/// The body length a `put` line announces (its last argument); 0 if it is not a number.
pub(crate) fn put_body_len(args: &[u8]) -> usize {
    std::str::from_utf8(args)
        .ok()
        .and_then(|a| a.rsplit(' ').next()?.parse().ok())
        .unwrap_or(0)
}

pub(crate) fn reply_job(out: &mut Vec<u8>, id: u64, body: &[u8]) {
    out.extend_from_slice(format!("RESERVED {id} {}\r\n", body.len()).as_bytes());
    out.extend_from_slice(body);
    out.extend_from_slice(b"\r\n");
}

/// Hands queued jobs to waiting reserves, oldest first, and times out the expired ones.
fn serve_waiters(
    peers: &mut HashMap<RawFd, Peer>,
    jobs: &mut VecDeque<(u64, Vec<u8>)>,
    waiters: &mut VecDeque<RawFd>,
    next_id: &mut u64,
) {
    let now = Instant::now();
    let mut still = VecDeque::with_capacity(waiters.len());
    while let Some(fd) = waiters.pop_front() {
        let Some(peer) = peers.get_mut(&fd) else {
            continue;
        };
        if let Some((id, body)) = jobs.pop_front() {
            reply_job(&mut peer.wbuf, id, &body);
        } else if peer.waiting_until.is_some_and(|t| t <= now) {
            peer.wbuf.extend_from_slice(b"TIMED_OUT\r\n");
        } else {
            still.push_back(fd);
            continue;
        }
        peer.waiting_until = None;
        // Pipelined requests behind the reserve run now (a reserve among them may wait).
        handle(peer, fd, jobs, &mut still, next_id);
        flush(peer);
    }
    *waiters = still;
}

/// A minimal epoll wrapper (level-triggered reads).
struct Epoll(RawFd);

impl Epoll {
    fn new() -> io::Result<Epoll> {
        // SAFETY: plain syscall; the descriptor is owned by the returned value.
        let fd = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(Epoll(fd))
    }

    fn add(&self, fd: RawFd) -> io::Result<()> {
        let mut ev = libc::epoll_event {
            events: libc::EPOLLIN as u32,
            u64: fd as u64,
        };
        // SAFETY: `ev` lives across the call; both descriptors are open.
        let rc = unsafe { libc::epoll_ctl(self.0, libc::EPOLL_CTL_ADD, fd, &mut ev) };
        if rc < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    fn wait(&self, events: &mut [libc::epoll_event], timeout_ms: i32) -> io::Result<usize> {
        loop {
            // SAFETY: `events` is a valid buffer of the length passed.
            let n = unsafe {
                libc::epoll_wait(self.0, events.as_mut_ptr(), events.len() as i32, timeout_ms)
            };
            if n >= 0 {
                return Ok(n as usize);
            }
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::Interrupted {
                return Err(e);
            }
        }
    }
}

impl Drop for Epoll {
    fn drop(&mut self) {
        // SAFETY: closing the descriptor this value owns.
        unsafe { libc::close(self.0) };
    }
}
