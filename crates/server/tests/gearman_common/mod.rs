//! Harness for the Gearman black-box tests: start the real binary with both listeners on
//! free ports, speak raw Gearman packets and admin lines to it, restart or kill it.
//!
//! Blocking sockets with generous read timeouts: they bound how long a broken server can
//! hang a test, never how fast a correct one must be. "Nothing else arrived" is proven with
//! an ECHO round trip (the server sends what other connections caused before replying).

#![allow(dead_code)]

use std::io::{ErrorKind, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub const REPLY_TIMEOUT: Duration = Duration::from_secs(15);
pub const START_TIMEOUT: Duration = Duration::from_secs(60);

pub mod t {
    pub const CAN_DO: u32 = 1;
    pub const CANT_DO: u32 = 2;
    pub const RESET_ABILITIES: u32 = 3;
    pub const PRE_SLEEP: u32 = 4;
    pub const UNUSED: u32 = 5;
    pub const NOOP: u32 = 6;
    pub const SUBMIT_JOB: u32 = 7;
    pub const JOB_CREATED: u32 = 8;
    pub const GRAB_JOB: u32 = 9;
    pub const NO_JOB: u32 = 10;
    pub const JOB_ASSIGN: u32 = 11;
    pub const WORK_STATUS: u32 = 12;
    pub const WORK_COMPLETE: u32 = 13;
    pub const WORK_FAIL: u32 = 14;
    pub const GET_STATUS: u32 = 15;
    pub const ECHO_REQ: u32 = 16;
    pub const ECHO_RES: u32 = 17;
    pub const SUBMIT_JOB_BG: u32 = 18;
    pub const ERROR: u32 = 19;
    pub const STATUS_RES: u32 = 20;
    pub const SUBMIT_JOB_HIGH: u32 = 21;
    pub const SET_CLIENT_ID: u32 = 22;
    pub const CAN_DO_TIMEOUT: u32 = 23;
    pub const ALL_YOURS: u32 = 24;
    pub const WORK_EXCEPTION: u32 = 25;
    pub const OPTION_REQ: u32 = 26;
    pub const OPTION_RES: u32 = 27;
    pub const WORK_DATA: u32 = 28;
    pub const WORK_WARNING: u32 = 29;
    pub const GRAB_JOB_UNIQ: u32 = 30;
    pub const JOB_ASSIGN_UNIQ: u32 = 31;
    pub const SUBMIT_JOB_HIGH_BG: u32 = 32;
    pub const SUBMIT_JOB_LOW: u32 = 33;
    pub const SUBMIT_JOB_LOW_BG: u32 = 34;
    pub const SUBMIT_JOB_SCHED: u32 = 35;
    pub const SUBMIT_JOB_EPOCH: u32 = 36;
    pub const SUBMIT_REDUCE_JOB: u32 = 37;
    pub const SUBMIT_REDUCE_JOB_BACKGROUND: u32 = 38;
    pub const GRAB_JOB_ALL: u32 = 39;
    pub const JOB_ASSIGN_ALL: u32 = 40;
    pub const GET_STATUS_UNIQUE: u32 = 41;
    pub const STATUS_RES_UNIQUE: u32 = 42;
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("addr")
        .port()
}

/// A running jobyard with a Gearman and a beanstalkd listener. SIGKILLed when dropped.
pub struct GServer {
    child: Option<Child>,
    pub gport: u16,
    pub bport: u16,
    pub data: PathBuf,
    extra: Vec<String>,
    log: PathBuf,
    _tmp: Option<tempfile::TempDir>,
}

impl GServer {
    /// A server on a fresh data directory with `extra` flags for `jobyard serve`.
    pub fn start(extra: &[&str]) -> GServer {
        let tmp = tempfile::tempdir().expect("tempdir");
        let mut s = GServer::on(tmp.path().join("data"), extra);
        s._tmp = Some(tmp);
        s
    }

    /// A server on `data` (reused across restarts).
    pub fn on(data: PathBuf, extra: &[&str]) -> GServer {
        let log = data.with_extension("log");
        let mut s = GServer {
            child: None,
            gport: 0,
            bport: 0,
            data,
            extra: extra.iter().map(|s| s.to_string()).collect(),
            log,
            _tmp: None,
        };
        s.launch();
        s
    }

    fn launch(&mut self) {
        for _attempt in 0..10 {
            let (gport, bport) = (free_port(), free_port());
            let mut cmd = Command::new(env!("CARGO_BIN_EXE_jobyard"));
            for (key, _) in std::env::vars_os() {
                if key.to_string_lossy().starts_with("JOBYARD_") {
                    cmd.env_remove(key);
                }
            }
            let log = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&self.log)
                .expect("log file");
            cmd.arg("serve")
                .arg("--data-dir")
                .arg(&self.data)
                .arg("--gearman-listen")
                .arg(format!("127.0.0.1:{gport}"))
                .arg("--beanstalk-listen")
                .arg(format!("127.0.0.1:{bport}"))
                .args(&self.extra)
                .env("JOBYARD_LOG", "info")
                .env("JOBYARD_HTTP_LISTEN", "off")
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(log);
            let mut child = cmd.spawn().expect("spawn jobyard");
            let deadline = Instant::now() + START_TIMEOUT;
            loop {
                if let Some(status) = child.try_wait().expect("try_wait") {
                    if status.code() == Some(111) {
                        break; // port lost to someone else: try other ports
                    }
                    panic!("jobyard exited with {status}; log:\n{}", self.log_text());
                }
                if TcpStream::connect(("127.0.0.1", gport)).is_ok()
                    && TcpStream::connect(("127.0.0.1", bport)).is_ok()
                {
                    self.child = Some(child);
                    self.gport = gport;
                    self.bport = bport;
                    return;
                }
                if Instant::now() > deadline {
                    let _ = child.kill();
                    panic!("jobyard did not start; log:\n{}", self.log_text());
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        panic!("no free ports after 10 attempts");
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// SIGKILL, then start again on the same data directory (new ports).
    pub fn kill_and_restart(&mut self) {
        self.kill();
        self.launch();
    }

    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Waits for the process to exit by itself; its exit code.
    pub fn wait_exit(&mut self) -> Option<i32> {
        let mut c = self.child.take()?;
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if let Some(st) = c.try_wait().expect("try_wait") {
                return st.code();
            }
            if Instant::now() > deadline {
                let _ = c.kill();
                panic!("server did not exit");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn gear(&self) -> Gear {
        Gear::connect(self.gport)
    }

    pub fn beanstalk(&self) -> Line {
        Line::connect(self.bport)
    }

    /// The server's process id.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("running").id()
    }

    pub fn data_dir(&self) -> &Path {
        &self.data
    }
}

impl Drop for GServer {
    fn drop(&mut self) {
        self.kill();
    }
}

/// One received packet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pkt {
    pub kind: u32,
    pub body: Vec<u8>,
}

impl Pkt {
    /// The body split on every `\0`.
    pub fn fields(&self) -> Vec<String> {
        self.body
            .split(|&b| b == 0)
            .map(|f| String::from_utf8_lossy(f).into_owned())
            .collect()
    }
}

pub fn packet(magic: &[u8; 4], kind: u32, fields: &[&[u8]]) -> Vec<u8> {
    let body: Vec<u8> = fields.join(&0u8);
    let mut v = magic.to_vec();
    v.extend_from_slice(&kind.to_be_bytes());
    v.extend_from_slice(&(body.len() as u32).to_be_bytes());
    v.extend_from_slice(&body);
    v
}

/// A raw Gearman connection.
pub struct Gear {
    pub s: TcpStream,
    buf: Vec<u8>,
}

impl Gear {
    pub fn connect(port: u16) -> Gear {
        let s = TcpStream::connect(("127.0.0.1", port)).expect("connect gearman");
        s.set_read_timeout(Some(REPLY_TIMEOUT)).unwrap();
        s.set_nodelay(true).unwrap();
        Gear { s, buf: Vec::new() }
    }

    pub fn send(&mut self, kind: u32, fields: &[&[u8]]) {
        self.raw(&packet(b"\0REQ", kind, fields));
    }

    pub fn raw(&mut self, bytes: &[u8]) {
        self.s.write_all(bytes).expect("write");
    }

    fn fill(&mut self, need: usize) -> bool {
        while self.buf.len() < need {
            let mut chunk = [0u8; 65536];
            match self.s.read(&mut chunk) {
                Ok(0) => return false,
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) if e.kind() == ErrorKind::ConnectionReset => return false,
                Err(e) => panic!("read: {e} (buffered {:?})", self.buf),
            }
        }
        true
    }

    /// The next packet (panics on EOF, timeout or a text reply).
    pub fn recv(&mut self) -> Pkt {
        assert!(self.fill(12), "connection closed; buffered {:?}", self.buf);
        assert_eq!(&self.buf[..4], b"\0RES", "not a response: {:?}", self.buf);
        let kind = u32::from_be_bytes(self.buf[4..8].try_into().unwrap());
        let size = u32::from_be_bytes(self.buf[8..12].try_into().unwrap()) as usize;
        assert!(self.fill(12 + size), "closed mid-packet");
        let body = self.buf[12..12 + size].to_vec();
        self.buf.drain(..12 + size);
        Pkt { kind, body }
    }

    /// The next packet, which must be of this type; its fields.
    pub fn expect(&mut self, kind: u32) -> Vec<String> {
        let p = self.recv();
        assert_eq!(p.kind, kind, "expected type {kind}, got {p:?}");
        p.fields()
    }

    /// Asserts the next packet is ERROR with this code.
    pub fn expect_error(&mut self, code: &str) -> String {
        let f = self.expect(t::ERROR);
        assert_eq!(f[0], code, "{f:?}");
        f[1].clone()
    }

    /// Round trip that proves nothing else was queued for this connection before it.
    pub fn barrier(&mut self) {
        self.send(t::ECHO_REQ, &[b"barrier"]);
        let p = self.recv();
        assert_eq!(
            (p.kind, &p.body[..]),
            (t::ECHO_RES, &b"barrier"[..]),
            "unexpected {p:?}"
        );
    }

    /// Submits and returns the handle.
    pub fn submit(&mut self, kind: u32, func: &str, unique: &str, data: &[u8]) -> String {
        self.send(kind, &[func.as_bytes(), unique.as_bytes(), data]);
        self.expect(t::JOB_CREATED).remove(0)
    }

    pub fn can_do(&mut self, func: &str) {
        self.send(t::CAN_DO, &[func.as_bytes()]);
    }

    /// GRAB_JOB; `Some(fields of JOB_ASSIGN)` or `None` for NO_JOB.
    pub fn grab(&mut self) -> Option<Vec<String>> {
        self.send(t::GRAB_JOB, &[]);
        let p = self.recv();
        match p.kind {
            t::NO_JOB => None,
            t::JOB_ASSIGN => Some(p.fields()),
            _ => panic!("grab got {p:?}"),
        }
    }

    /// Reads one admin text line (without `\n`).
    pub fn line(&mut self) -> String {
        loop {
            if let Some(nl) = self.buf.iter().position(|&b| b == b'\n') {
                let l: Vec<u8> = self.buf.drain(..=nl).collect();
                return String::from_utf8_lossy(&l[..l.len() - 1]).into_owned();
            }
            let have = self.buf.len();
            assert!(self.fill(have + 1), "closed while reading a line");
        }
    }

    /// Sends an admin line and reads a one-line reply (line ending kept off, `\r` kept).
    pub fn admin(&mut self, cmd: &str) -> String {
        self.raw(format!("{cmd}\n").as_bytes());
        self.line()
    }

    /// Sends an admin list command and reads lines up to the `.` terminator.
    pub fn admin_list(&mut self, cmd: &str) -> Vec<String> {
        self.raw(format!("{cmd}\n").as_bytes());
        let mut out = Vec::new();
        loop {
            let l = self.line();
            if l == "." {
                return out;
            }
            out.push(l);
        }
    }

    /// Whether the server closed the connection (EOF or reset) with nothing else sent.
    pub fn is_closed(&mut self) -> bool {
        !self.fill(self.buf.len() + 1)
    }
}

/// A beanstalkd text connection.
pub struct Line {
    s: TcpStream,
    buf: Vec<u8>,
}

impl Line {
    pub fn connect(port: u16) -> Line {
        let s = TcpStream::connect(("127.0.0.1", port)).expect("connect beanstalk");
        s.set_read_timeout(Some(REPLY_TIMEOUT)).unwrap();
        Line { s, buf: Vec::new() }
    }

    pub fn send(&mut self, bytes: &[u8]) {
        self.s.write_all(bytes).expect("write");
    }

    pub fn line(&mut self) -> String {
        loop {
            if let Some(p) = self.buf.windows(2).position(|w| w == b"\r\n") {
                let l: Vec<u8> = self.buf.drain(..p + 2).collect();
                return String::from_utf8_lossy(&l[..p]).into_owned();
            }
            let mut chunk = [0u8; 65536];
            let n = self.s.read(&mut chunk).expect("read");
            assert!(n > 0, "beanstalk connection closed");
            self.buf.extend_from_slice(&chunk[..n]);
        }
    }

    /// Reads exactly `n` bytes plus `\r\n`.
    pub fn body(&mut self, n: usize) -> Vec<u8> {
        while self.buf.len() < n + 2 {
            let mut chunk = [0u8; 65536];
            let k = self.s.read(&mut chunk).expect("read");
            assert!(k > 0, "closed");
            self.buf.extend_from_slice(&chunk[..k]);
        }
        let b: Vec<u8> = self.buf.drain(..n + 2).collect();
        b[..n].to_vec()
    }

    pub fn cmd(&mut self, c: &str) -> String {
        self.send(format!("{c}\r\n").as_bytes());
        self.line()
    }
}
