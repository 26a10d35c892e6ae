//! Shared harness for the black-box tests: start the real `jobyard` binary on a free port,
//! talk raw beanstalkd to it over TCP, and stop it.
//!
//! Everything here uses blocking `std::net` sockets with read timeouts. Timeouts are
//! generous (the tests run while other builds load the machine): they only bound how long a
//! broken server can hang a test, never how fast a correct one must be.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// How long a reply may take before the test fails.
pub const REPLY_TIMEOUT: Duration = Duration::from_secs(15);
/// How long a server may take to start accepting or to exit.
pub const START_TIMEOUT: Duration = Duration::from_secs(60);

pub fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_jobyard")
}

/// A `Command` for the binary with a clean, predictable environment.
pub fn command() -> Command {
    command_for(Path::new(bin()))
}

/// As [`command`], for the binary under another name (a symlink named `beanstalkd`).
pub fn command_for(program: &Path) -> Command {
    let mut cmd = Command::new(program);
    for (key, _) in std::env::vars_os() {
        if key.to_string_lossy().starts_with("JOBYARD_") {
            cmd.env_remove(key);
        }
    }
    cmd.env("JOBYARD_LOG", "info");
    // Other protocols' listeners have fixed default ports, which parallel servers would
    // fight over: these tests only speak beanstalkd.
    cmd.env("JOBYARD_GEARMAN_LISTEN", "off");
    cmd.env("JOBYARD_HTTP_LISTEN", "off");
    cmd.stdin(Stdio::null());
    cmd
}

/// A port that was free a moment ago. The server may still lose it to someone else; then
/// it exits with 111 and [`Server::start`] tries another one.
pub fn free_port() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
    l.local_addr().expect("local addr").port()
}

/// Runs the binary to completion (it must exit by itself) and returns its exit status,
/// stdout and stderr.
pub fn run_to_exit(args: &[&str]) -> (ExitStatus, String, String) {
    let logs = tempfile::tempdir().expect("tempdir");
    let out_path = logs.path().join("stdout");
    let err_path = logs.path().join("stderr");
    let mut child = command()
        .args(args)
        .stdout(File::create(&out_path).expect("stdout file"))
        .stderr(File::create(&err_path).expect("stderr file"))
        .spawn()
        .expect("spawn jobyard");
    let status = wait_exit(&mut child, START_TIMEOUT).unwrap_or_else(|| {
        let _ = child.kill();
        let _ = child.wait();
        panic!(
            "jobyard {args:?} did not exit within {START_TIMEOUT:?}; stderr:\n{}",
            std::fs::read_to_string(&err_path).unwrap_or_default()
        )
    });
    let out = std::fs::read_to_string(&out_path).unwrap_or_default();
    let err = std::fs::read_to_string(&err_path).unwrap_or_default();
    (status, out, err)
}

/// Waits for a child to exit, up to `timeout`.
pub fn wait_exit(child: &mut Child, timeout: Duration) -> Option<ExitStatus> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            return Some(status);
        }
        if Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Sends a signal (by name, e.g. "TERM", "USR1") to a process with `kill(1)`.
pub fn send_signal(pid: u32, sig: &str) {
    let status = Command::new("kill")
        .arg(format!("-{sig}"))
        .arg(pid.to_string())
        .status()
        .expect("run kill");
    assert!(status.success(), "kill -{sig} {pid} failed");
}

/// A running server. Killed (SIGKILL) when dropped, unless it was stopped already.
pub struct Server {
    child: Option<Child>,
    pub addr: SocketAddr,
    pub port: u16,
    log_path: PathBuf,
    _logs: tempfile::TempDir,
}

impl Server {
    /// `jobyard serve --data-dir <dir> --beanstalk-listen 127.0.0.1:<port> <extra...>`.
    pub fn serve(data_dir: &Path, extra: &[&str]) -> Server {
        let dir = data_dir.to_str().expect("utf-8 path").to_string();
        let extra: Vec<String> = extra.iter().map(|s| s.to_string()).collect();
        Server::start(move |port| {
            let mut args = vec![
                "serve".to_string(),
                "--data-dir".into(),
                dir.clone(),
                "--beanstalk-listen".into(),
                format!("127.0.0.1:{port}"),
            ];
            args.extend(extra.iter().cloned());
            args
        })
    }

    /// `jobyard beanstalkd -l 127.0.0.1 -p <port> [-b <dir>] <extra...>`.
    pub fn beanstalkd(binlog: Option<&Path>, extra: &[&str]) -> Server {
        let dir = binlog.map(|d| d.to_str().expect("utf-8 path").to_string());
        let extra: Vec<String> = extra.iter().map(|s| s.to_string()).collect();
        Server::start(move |port| {
            let mut args = vec![
                "beanstalkd".to_string(),
                "-l".into(),
                "127.0.0.1".into(),
                "-p".into(),
                port.to_string(),
            ];
            if let Some(dir) = &dir {
                args.push("-b".into());
                args.push(dir.clone());
            }
            args.extend(extra.iter().cloned());
            args
        })
    }

    /// Starts the binary with the arguments `args(port)` and waits until it answers on
    /// that port. Tries other ports if the chosen one turns out to be taken.
    pub fn start(args: impl Fn(u16) -> Vec<String>) -> Server {
        Server::start_program(Path::new(bin()), args)
    }

    /// As [`Server::start`], running `program` (the binary under another name).
    pub fn start_program(program: &Path, args: impl Fn(u16) -> Vec<String>) -> Server {
        let mut last_log = String::new();
        for _attempt in 0..5 {
            let port = free_port();
            let logs = tempfile::tempdir().expect("tempdir");
            let log_path = logs.path().join("server.log");
            let child = command_for(program)
                .args(args(port))
                .stdout(Stdio::null())
                .stderr(File::create(&log_path).expect("log file"))
                .spawn()
                .expect("spawn jobyard");
            let mut server = Server {
                child: Some(child),
                addr: SocketAddr::from(([127, 0, 0, 1], port)),
                port,
                log_path,
                _logs: logs,
            };
            match server.wait_ready() {
                Ok(()) => return server,
                Err(Some(status)) if status.code() == Some(111) => {
                    last_log = server.log();
                    continue;
                }
                Err(status) => panic!(
                    "server did not start (exit status {status:?}); log:\n{}",
                    server.log()
                ),
            }
        }
        panic!("server could not bind a free port in 5 attempts; last log:\n{last_log}");
    }

    /// Waits until the port answers `stats` with this process's pid (so a server that
    /// lost the port race cannot be mistaken for ours). Err(exit status) if it exited.
    fn wait_ready(&mut self) -> Result<(), Option<ExitStatus>> {
        let deadline = Instant::now() + START_TIMEOUT;
        let pid = self.pid();
        while Instant::now() < deadline {
            if let Some(status) = self
                .child
                .as_mut()
                .expect("child")
                .try_wait()
                .expect("try_wait")
            {
                return Err(Some(status));
            }
            if let Ok(stream) = TcpStream::connect_timeout(&self.addr, Duration::from_secs(1)) {
                let mut c = Client::from_stream(stream);
                c.timeout = Duration::from_secs(5);
                if let Some(stats) = c.try_yaml("stats") {
                    if stats.get("pid").map(String::as_str) == Some(pid.to_string().as_str()) {
                        return Ok(());
                    }
                }
            }
            std::thread::sleep(Duration::from_millis(25));
        }
        Err(None)
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("server is running").id()
    }

    /// A new client connection.
    pub fn client(&self) -> Client {
        Client::connect(self.addr)
    }

    /// The server's stderr so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log_path).unwrap_or_default()
    }

    pub fn signal(&self, sig: &str) {
        send_signal(self.pid(), sig);
    }

    /// Waits for the server to exit by itself (after a signal) and returns its status.
    pub fn wait(&mut self) -> ExitStatus {
        let mut child = self.child.take().expect("server is running");
        match wait_exit(&mut child, START_TIMEOUT) {
            Some(status) => status,
            None => {
                let _ = child.kill();
                let _ = child.wait();
                panic!(
                    "server did not exit within {START_TIMEOUT:?}; log:\n{}",
                    self.log()
                )
            }
        }
    }

    /// SIGTERM, then waits for the exit; asserts a clean exit (status 0).
    pub fn stop(mut self) -> String {
        self.signal("TERM");
        let status = self.wait();
        let log = self.log();
        assert_eq!(status.code(), Some(0), "exit after SIGTERM; log:\n{log}");
        log
    }

    /// SIGKILL, as in a crash.
    pub fn kill(mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        if std::thread::panicking() {
            eprintln!(
                "---- server log ----\n{}\n---- end of server log ----",
                self.log()
            );
        }
    }
}

/// A raw beanstalkd connection.
pub struct Client {
    stream: TcpStream,
    buf: Vec<u8>,
    /// How long each expected reply may take.
    pub timeout: Duration,
}

/// What a read that must not block forever found.
enum Got {
    Data,
    Eof,
    Timeout,
}

impl Client {
    pub fn connect(addr: SocketAddr) -> Client {
        let deadline = Instant::now() + REPLY_TIMEOUT;
        loop {
            match TcpStream::connect_timeout(&addr, Duration::from_secs(5)) {
                Ok(stream) => return Client::from_stream(stream),
                Err(e) if Instant::now() < deadline => {
                    let _ = e;
                    std::thread::sleep(Duration::from_millis(50));
                }
                Err(e) => panic!("cannot connect to {addr}: {e}"),
            }
        }
    }

    pub fn from_stream(stream: TcpStream) -> Client {
        stream.set_nodelay(true).expect("nodelay");
        Client {
            stream,
            buf: Vec::new(),
            timeout: REPLY_TIMEOUT,
        }
    }

    /// Writes raw bytes.
    pub fn send(&mut self, bytes: impl AsRef<[u8]>) {
        self.stream
            .write_all(bytes.as_ref())
            .expect("write to server");
    }

    /// Writes raw bytes, reporting failure instead of panicking.
    pub fn try_send(&mut self, bytes: impl AsRef<[u8]>) -> std::io::Result<()> {
        self.stream.write_all(bytes.as_ref())
    }

    /// Writes one command line (CRLF added).
    pub fn cmd(&mut self, line: &str) {
        self.send(format!("{line}\r\n"));
    }

    /// Closes our sending side (the server sees EOF).
    pub fn shutdown_write(&mut self) {
        self.stream
            .shutdown(Shutdown::Write)
            .expect("shutdown(Write)");
    }

    /// Reads more bytes into the buffer, waiting at most until `deadline`.
    fn fill(&mut self, deadline: Instant) -> Got {
        let now = Instant::now();
        if now >= deadline {
            return Got::Timeout;
        }
        let wait = (deadline - now).max(Duration::from_millis(1));
        self.stream
            .set_read_timeout(Some(wait))
            .expect("set timeout");
        let mut chunk = [0u8; 64 * 1024];
        match self.stream.read(&mut chunk) {
            Ok(0) => Got::Eof,
            Ok(n) => {
                self.buf.extend_from_slice(&chunk[..n]);
                Got::Data
            }
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                Got::Timeout
            }
            Err(e) if e.kind() == ErrorKind::Interrupted => Got::Data,
            Err(e)
                if matches!(
                    e.kind(),
                    ErrorKind::ConnectionReset | ErrorKind::ConnectionAborted
                ) =>
            {
                Got::Eof
            }
            Err(e) => panic!("read from server: {e}"),
        }
    }

    fn try_read_line(&mut self, deadline: Instant) -> Result<String, String> {
        loop {
            if let Some(i) = self.buf.windows(2).position(|w| w == b"\r\n") {
                let line: Vec<u8> = self.buf.drain(..i + 2).take(i).collect();
                return Ok(String::from_utf8_lossy(&line).into_owned());
            }
            match self.fill(deadline) {
                Got::Data => {}
                Got::Eof => return Err(format!("connection closed; pending {:?}", self.pending())),
                Got::Timeout => return Err(format!("timed out; pending {:?}", self.pending())),
            }
        }
    }

    fn pending(&self) -> String {
        String::from_utf8_lossy(&self.buf).into_owned()
    }

    /// Reads one reply line, or None if the connection closes or nothing comes in time.
    pub fn try_line(&mut self) -> Option<String> {
        let deadline = Instant::now() + self.timeout;
        self.try_read_line(deadline).ok()
    }

    /// Reads one reply line (without its CRLF).
    pub fn read_line(&mut self) -> String {
        let deadline = Instant::now() + self.timeout;
        self.try_read_line(deadline)
            .unwrap_or_else(|e| panic!("waiting for a reply line: {e}"))
    }

    /// Reads exactly `n` bytes.
    pub fn read_bytes(&mut self, n: usize) -> Vec<u8> {
        let deadline = Instant::now() + self.timeout;
        while self.buf.len() < n {
            match self.fill(deadline) {
                Got::Data => {}
                Got::Eof => panic!("connection closed while reading {n} bytes"),
                Got::Timeout => panic!("timed out reading {n} bytes ({} so far)", self.buf.len()),
            }
        }
        self.buf.drain(..n).collect()
    }

    /// Reads a body of `n` bytes and its CRLF.
    pub fn read_body(&mut self, n: usize) -> Vec<u8> {
        let mut body = self.read_bytes(n + 2);
        assert_eq!(&body[n..], b"\r\n", "body must end in CRLF");
        body.truncate(n);
        body
    }

    /// Reads one reply line and checks it.
    pub fn expect(&mut self, want: &str) {
        let got = self.read_line();
        assert_eq!(got, want, "unexpected reply");
    }

    /// Sends a command and returns its reply line.
    pub fn call(&mut self, line: &str) -> String {
        self.cmd(line);
        self.read_line()
    }

    /// Sends a command and checks its one-line reply.
    pub fn check(&mut self, line: &str, want: &str) {
        self.cmd(line);
        let got = self.read_line();
        assert_eq!(got, want, "reply to {line:?}");
    }

    /// Puts a job into the used tube and returns its id.
    pub fn put(&mut self, pri: u32, delay: u32, ttr: u32, body: &[u8]) -> u64 {
        self.send_put(pri, delay, ttr, body);
        let reply = self.read_line();
        reply
            .strip_prefix("INSERTED ")
            .and_then(|id| id.parse().ok())
            .unwrap_or_else(|| panic!("put: expected INSERTED <id>, got {reply:?}"))
    }

    /// Writes a put command with its body, without reading the reply.
    pub fn send_put(&mut self, pri: u32, delay: u32, ttr: u32, body: &[u8]) {
        let mut msg = format!("put {pri} {delay} {ttr} {}\r\n", body.len()).into_bytes();
        msg.extend_from_slice(body);
        msg.extend_from_slice(b"\r\n");
        self.send(msg);
    }

    /// Reads a `<word> <id> <bytes>` reply and its body.
    pub fn read_job(&mut self, word: &str) -> (u64, Vec<u8>) {
        let line = self.read_line();
        self.job_after(&line, word)
    }

    /// Sends a peek command: `Some((id, body))` for `FOUND`, `None` for `NOT_FOUND`.
    pub fn peek(&mut self, line: &str) -> Option<(u64, Vec<u8>)> {
        self.cmd(line);
        let head = self.read_line();
        if head == "NOT_FOUND" {
            return None;
        }
        Some(self.job_after(&head, "FOUND"))
    }

    /// The id of the job a peek command finds (panics on `NOT_FOUND`).
    pub fn peek_id(&mut self, line: &str) -> u64 {
        self.peek(line)
            .unwrap_or_else(|| panic!("{line}: expected FOUND, got NOT_FOUND"))
            .0
    }

    /// Reads the body that follows an already read `<word> <id> <bytes>` line.
    pub fn job_after(&mut self, line: &str, word: &str) -> (u64, Vec<u8>) {
        let parts: Vec<&str> = line.split(' ').collect();
        assert!(
            parts.len() == 3 && parts[0] == word,
            "expected {word} <id> <bytes>, got {line:?}"
        );
        let id = parts[1].parse().expect("job id");
        let n: usize = parts[2].parse().expect("byte count");
        (id, self.read_body(n))
    }

    /// `reserve` (or any reserve command) and the job it returns.
    pub fn reserve_with(&mut self, line: &str) -> (u64, Vec<u8>) {
        self.cmd(line);
        self.read_job("RESERVED")
    }

    pub fn reserve(&mut self) -> (u64, Vec<u8>) {
        self.reserve_with("reserve")
    }

    /// Reads an `OK <n>` reply and returns the YAML text.
    pub fn read_ok(&mut self) -> String {
        let line = self.read_line();
        let n: usize = line
            .strip_prefix("OK ")
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("expected OK <bytes>, got {line:?}"));
        String::from_utf8(self.read_body(n)).expect("YAML is UTF-8")
    }

    /// Sends a command answered with `OK <n>` and returns the YAML text.
    pub fn raw_yaml(&mut self, line: &str) -> String {
        self.cmd(line);
        self.read_ok()
    }

    /// Sends a stats command and returns its `key: value` pairs in order.
    pub fn yaml_pairs(&mut self, line: &str) -> Vec<(String, String)> {
        parse_dict(&self.raw_yaml(line))
    }

    /// Sends a stats command and returns its `key: value` pairs.
    pub fn yaml(&mut self, line: &str) -> BTreeMap<String, String> {
        self.yaml_pairs(line).into_iter().collect()
    }

    /// As [`Client::yaml`], but None instead of a panic on any failure (used while the
    /// server starts up).
    pub fn try_yaml(&mut self, line: &str) -> Option<BTreeMap<String, String>> {
        self.try_send(format!("{line}\r\n")).ok()?;
        let deadline = Instant::now() + self.timeout;
        let head = self.try_read_line(deadline).ok()?;
        let n: usize = head.strip_prefix("OK ")?.parse().ok()?;
        while self.buf.len() < n + 2 {
            if !matches!(self.fill(deadline), Got::Data) {
                return None;
            }
        }
        let body: Vec<u8> = self.buf.drain(..n + 2).take(n).collect();
        Some(
            parse_dict(&String::from_utf8(body).ok()?)
                .into_iter()
                .collect(),
        )
    }

    /// One value of `stats`.
    pub fn stat(&mut self, key: &str) -> String {
        self.yaml("stats")
            .remove(key)
            .unwrap_or_else(|| panic!("stats has no {key}"))
    }

    /// One number of `stats`.
    pub fn stat_n(&mut self, key: &str) -> u64 {
        self.stat(key).parse().expect("numeric stat")
    }

    /// One value of `stats-job <id>`.
    pub fn job_stat(&mut self, id: u64, key: &str) -> String {
        self.yaml(&format!("stats-job {id}"))
            .remove(key)
            .unwrap_or_else(|| panic!("stats-job has no {key}"))
    }

    /// One value of `stats-tube <name>`.
    pub fn tube_stat(&mut self, tube: &str, key: &str) -> String {
        self.yaml(&format!("stats-tube {tube}"))
            .remove(key)
            .unwrap_or_else(|| panic!("stats-tube has no {key}"))
    }

    /// Sends a list command and returns the names.
    pub fn list(&mut self, line: &str) -> Vec<String> {
        parse_list(&self.raw_yaml(line))
    }

    /// Asserts that nothing arrives for `dur` (a reply that must not come yet).
    pub fn expect_silence(&mut self, dur: Duration) {
        let deadline = Instant::now() + dur;
        loop {
            if !self.buf.is_empty() {
                panic!("expected no reply, got {:?}", self.pending());
            }
            match self.fill(deadline) {
                Got::Timeout => return,
                Got::Data => {}
                Got::Eof => panic!("expected no reply, but the connection closed"),
            }
        }
    }

    /// Asserts that the server closes the connection (EOF or reset) without sending more.
    pub fn expect_closed(&mut self) {
        let deadline = Instant::now() + self.timeout;
        loop {
            match self.fill(deadline) {
                Got::Eof => break,
                Got::Data => {}
                Got::Timeout => panic!("connection still open; pending {:?}", self.pending()),
            }
        }
        assert!(
            self.buf.is_empty(),
            "unexpected data before close: {:?}",
            self.pending()
        );
    }

    /// Waits until the server closes the connection, ignoring any data sent before.
    /// Returns whether it did within the timeout.
    pub fn closed_within(&mut self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        loop {
            match self.fill(deadline) {
                Got::Eof => return true,
                Got::Data => self.buf.clear(),
                Got::Timeout => return false,
            }
        }
    }
}

/// Parses `---\nkey: value\n...` into ordered pairs.
pub fn parse_dict(yaml: &str) -> Vec<(String, String)> {
    let body = yaml
        .strip_prefix("---\n")
        .unwrap_or_else(|| panic!("YAML must start with ---: {yaml:?}"));
    assert!(
        body.is_empty() || body.ends_with('\n'),
        "YAML must end in a newline"
    );
    body.lines()
        .map(|l| {
            let (k, v) = l
                .split_once(": ")
                .unwrap_or_else(|| panic!("bad YAML line {l:?}"));
            (k.to_string(), v.to_string())
        })
        .collect()
}

/// Parses `---\n- a\n- b\n` into names.
pub fn parse_list(yaml: &str) -> Vec<String> {
    let body = yaml
        .strip_prefix("---\n")
        .unwrap_or_else(|| panic!("YAML must start with ---: {yaml:?}"));
    body.lines()
        .map(|l| {
            l.strip_prefix("- ")
                .unwrap_or_else(|| panic!("bad YAML list line {l:?}"))
                .to_string()
        })
        .collect()
}

/// Polls `f` until it returns true, for up to `timeout`. Returns whether it did.
pub fn eventually(timeout: Duration, mut f: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if f() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(25));
    }
}

/// A fresh data directory and a `jobyard serve` on it.
pub fn serve() -> (Server, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::serve(dir.path(), &[]);
    (server, dir)
}

/// Waits until `stats` shows `key: want` (connection counts settle asynchronously).
pub fn wait_stat(c: &mut Client, key: &str, want: &str) {
    let mut last = String::new();
    let ok = eventually(REPLY_TIMEOUT, || {
        last = c.stat(key);
        last == want
    });
    assert!(ok, "stats {key}: want {want}, last saw {last}");
}
