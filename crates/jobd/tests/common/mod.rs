//! Test harness: a real MariaDB started in a temp dir on a loopback port (one per test
//! binary, a fresh database per test), a raw protocol client, and job launcher scripts.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use jobyard_jobd::config::JobdConfig;
use jobyard_jobd::protocol::{Decoder, Incoming, EOT};
use serde_json::Value;
use sqlx::mysql::{MySqlConnectOptions, MySqlPool, MySqlPoolOptions};
use sqlx::Row;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// The README's table, with `utf8` (3-byte) text as jobd's README creates it.
pub const SCHEMA: &str = "CREATE TABLE `jobs` (
  `id` int(10) UNSIGNED NOT NULL AUTO_INCREMENT,
  `target` char(16) NOT NULL,
  `time_created` int(10) UNSIGNED NOT NULL,
  `time_started` int(10) UNSIGNED NOT NULL DEFAULT 0,
  `time_finished` int(10) UNSIGNED NOT NULL DEFAULT 0,
  `status` enum('waiting','manual','accepted','running','done','ignored') NOT NULL DEFAULT 'waiting',
  `result` enum('ok','fail') DEFAULT NULL,
  `return_code` tinyint(3) UNSIGNED DEFAULT NULL,
  `sig` char(10) DEFAULT NULL,
  `stdout` mediumtext DEFAULT NULL,
  `stderr` mediumtext DEFAULT NULL,
  PRIMARY KEY (`id`),
  KEY `status_target_idx` (`status`, `target`, `id`)
) ENGINE=InnoDB DEFAULT CHARSET=utf8";

/// A MariaDB server owned by this test process.
pub struct Mariadb {
    pub port: u16,
    pub dir: PathBuf,
}

fn find(bin: &str) -> String {
    for d in ["/usr/sbin", "/usr/bin", "/usr/local/sbin", "/usr/local/bin"] {
        let p = format!("{d}/{bin}");
        if Path::new(&p).exists() {
            return p;
        }
    }
    bin.to_string()
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn install(dir: &Path) {
    let data = dir.join("data");
    let user = if unsafe { libc::geteuid() } == 0 {
        "--user=root"
    } else {
        "--no-defaults"
    };
    let st = Command::new(find("mariadb-install-db"))
        .args([
            "--no-defaults",
            user,
            "--skip-test-db",
            "--auth-root-authentication-method=normal",
        ])
        .arg(format!("--datadir={}", data.display()))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .expect("mariadb-install-db (scripts/setup.sh installs mariadb-server)");
    assert!(st.success(), "mariadb-install-db failed");
}

/// `mariadbd` on `dir`'s data directory and `port`, dying with the spawning thread.
fn server_command(dir: &Path, port: u16) -> Command {
    use std::os::unix::process::CommandExt;
    let mut cmd = Command::new(find("mariadbd"));
    cmd.arg("--no-defaults");
    if unsafe { libc::geteuid() } == 0 {
        cmd.arg("--user=root");
    }
    cmd.arg(format!("--datadir={}", dir.join("data").display()))
        .arg(format!("--socket={}", dir.join("sock").display()))
        .arg(format!("--pid-file={}", dir.join("pid").display()))
        .arg(format!("--port={port}"))
        .args([
            "--bind-address=127.0.0.1",
            "--skip-grant-tables",
            "--skip-name-resolve",
        ])
        .args([
            "--innodb-buffer-pool-size=32M",
            "--innodb-log-file-size=16M",
            "--max-connections=500",
        ])
        .stdout(Stdio::null())
        .stderr(
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(dir.join("err.log"))
                .unwrap(),
        );
    unsafe {
        cmd.pre_exec(|| {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            Ok(())
        });
    }
    cmd
}

fn wait_port(port: u16, dir: &Path) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            Instant::now() < deadline,
            "mariadbd did not start; see {}",
            dir.display()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A MariaDB of one test's own, which the test may stop and start again (same port).
pub struct PrivateMariadb {
    pub port: u16,
    pub dir: tempfile::TempDir,
    child: Option<std::process::Child>,
}

impl PrivateMariadb {
    pub fn start() -> PrivateMariadb {
        let dir = tempfile::Builder::new()
            .prefix("jobd-mariadb-own-")
            .tempdir()
            .unwrap();
        install(dir.path());
        let mut m = PrivateMariadb {
            port: free_port(),
            dir,
            child: None,
        };
        m.resume();
        m
    }

    /// Stops the server (SIGTERM, waited for).
    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            unsafe { libc::kill(c.id() as i32, libc::SIGTERM) };
            let _ = c.wait();
        }
    }

    /// Starts it again on the same port and data.
    pub fn resume(&mut self) {
        self.child = Some(
            server_command(self.dir.path(), self.port)
                .spawn()
                .expect("mariadbd"),
        );
        wait_port(self.port, self.dir.path());
    }

    /// A database with the jobs table on this server.
    pub async fn test_db(&self) -> TestDb {
        db_on(self.port, "own".into()).await
    }
}

impl Drop for PrivateMariadb {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Deletes data directories of shared servers whose test process has exited.
fn remove_stale_servers() {
    let Ok(entries) = std::fs::read_dir(std::env::temp_dir()) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(rest) = name.strip_prefix("jobd-mariadb-") else {
            continue;
        };
        let Some(pid) = rest.split('-').next().and_then(|p| p.parse::<i32>().ok()) else {
            continue;
        };
        if !Path::new(&format!("/proc/{pid}")).exists() {
            let _ = std::fs::remove_dir_all(e.path());
        }
    }
}

/// The shared server, started on first use. It runs with a parent-death signal set from
/// a thread that never ends, so it stops when the test process exits.
pub fn mariadb() -> &'static Mariadb {
    static DB: OnceLock<Mariadb> = OnceLock::new();
    DB.get_or_init(|| {
        remove_stale_servers();
        // Kept (the server outlives every test); named after this process so a later run
        // can remove it once this process is gone.
        let dir = tempfile::Builder::new()
            .prefix(&format!("jobd-mariadb-{}-", std::process::id()))
            .tempdir()
            .unwrap()
            .keep();
        install(&dir);
        let port = free_port();
        let (tx, rx) = std::sync::mpsc::channel();
        let d2 = dir.clone();
        std::thread::spawn(move || {
            let mut child = server_command(&d2, port).spawn().expect("mariadbd");
            tx.send(()).unwrap();
            // This thread lives as long as the server: its end would trigger the
            // parent-death signal.
            let _ = child.wait();
        });
        rx.recv().unwrap();
        wait_port(port, &dir);
        Mariadb { port, dir }
    })
}

/// A fresh database with the jobs table, for one test.
pub struct TestDb {
    pub name: String,
    pub pool: MySqlPool,
    pub port: u16,
}

pub async fn test_db() -> TestDb {
    let m = mariadb();
    static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let name = format!(
        "t{}_{}",
        std::process::id(),
        N.fetch_add(1, std::sync::atomic::Ordering::SeqCst)
    );
    db_on(m.port, name).await
}

async fn db_on(port: u16, name: String) -> TestDb {
    let opts = MySqlConnectOptions::new()
        .host("127.0.0.1")
        .port(port)
        .username("root");
    let admin = MySqlPoolOptions::new()
        .max_connections(1)
        .connect_with(opts.clone())
        .await
        .unwrap();
    sqlx::query(&format!("CREATE DATABASE `{name}`"))
        .execute(&admin)
        .await
        .unwrap();
    admin.close().await;
    let pool = MySqlPoolOptions::new()
        .max_connections(4)
        .connect_with(opts.database(&name))
        .await
        .unwrap();
    sqlx::query(SCHEMA).execute(&pool).await.unwrap();
    TestDb { name, pool, port }
}

/// A row as the tests read it back.
#[derive(Debug, Clone)]
pub struct JobRow {
    pub id: u64,
    pub target: String,
    pub status: String,
    pub result: Option<String>,
    pub return_code: Option<u8>,
    pub sig: Option<String>,
    pub stdout: Option<String>,
    pub stderr: Option<String>,
    pub time_started: u32,
    pub time_finished: u32,
}

impl TestDb {
    /// INSERTs a row as the PHP app does; returns its id.
    pub async fn insert(&self, target: &str, status: &str) -> u64 {
        let r = sqlx::query(
            "INSERT INTO jobs (target, time_created, status) VALUES (?, UNIX_TIMESTAMP(), ?)",
        )
        .bind(target)
        .bind(status)
        .execute(&self.pool)
        .await
        .unwrap();
        r.last_insert_id()
    }

    pub async fn row(&self, id: u64) -> Option<JobRow> {
        let r = sqlx::query("SELECT id, target, status, result, return_code, sig, stdout, stderr, time_started, time_finished FROM jobs WHERE id=?")
            .bind(id)
            .fetch_optional(&self.pool)
            .await
            .unwrap()?;
        Some(JobRow {
            id: r.get::<u32, _>("id").into(),
            target: r.get("target"),
            status: r.get("status"),
            result: r.get("result"),
            return_code: r.get("return_code"),
            sig: r.get("sig"),
            stdout: r.get("stdout"),
            stderr: r.get("stderr"),
            time_started: r.get("time_started"),
            time_finished: r.get("time_finished"),
        })
    }

    pub async fn count(&self, status: &str) -> i64 {
        sqlx::query("SELECT COUNT(*) AS n FROM jobs WHERE status=?")
            .bind(status)
            .fetch_one(&self.pool)
            .await
            .unwrap()
            .get("n")
    }

    pub async fn exec(&self, sql: &str) {
        sqlx::query(sql).execute(&self.pool).await.unwrap();
    }

    /// Waits (bounded, so a bug fails instead of hanging) until row `id` has `status`.
    pub async fn wait_status(&self, id: u64, status: &str) -> JobRow {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(r) = self.row(id).await {
                if r.status == status {
                    return r;
                }
            }
            assert!(
                Instant::now() < deadline,
                "job {id} never reached {status}: {:?}",
                self.row(id).await
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// A directory with the launcher script: job N runs `job-N.sh` if the test wrote one,
/// else prints `id=N`.
pub struct Jobs {
    pub dir: tempfile::TempDir,
}

impl Jobs {
    pub fn new() -> Jobs {
        let dir = tempfile::tempdir().unwrap();
        let run = dir.path().join("run.sh");
        std::fs::write(
            &run,
            "d=$(dirname \"$0\")\nif [ -f \"$d/job-$1.sh\" ]; then . \"$d/job-$1.sh\"; else echo \"id=$1\"; fi\n",
        )
        .unwrap();
        Jobs { dir }
    }

    pub fn launcher(&self) -> String {
        format!("/bin/sh {}/run.sh {{id}}", self.dir.path().display())
    }

    /// Sets what job `id` does (a shell snippet; `$1` is the id, `$d` the directory).
    pub fn script(&self, id: u64, body: &str) {
        std::fs::write(self.dir.path().join(format!("job-{id}.sh")), body).unwrap();
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// Waits (bounded) until a file the job creates exists.
    pub async fn wait_file(&self, name: &str) {
        let p = self.path(name);
        let deadline = Instant::now() + Duration::from_secs(30);
        while !p.exists() {
            assert!(Instant::now() < deadline, "{name} never appeared");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

/// A worker config for `db`, listening on a free loopback port.
pub fn worker_config(db: &TestDb, jobs: &Jobs, targets: &str, extra: &str) -> JobdConfig {
    let text = format!(
        "host = 127.0.0.1\nport = 0\nname = w\nmysql_host = 127.0.0.1\nmysql_port = {}\n\
         mysql_user = root\nmysql_password = \"\"\nmysql_database = {}\nmysql_table = jobs\n\
         launcher = {}\nlauncher.env.JOBD_TEST = yes\n{extra}\n[targets]\n{targets}\n",
        db.port,
        db.name,
        jobs.launcher()
    );
    JobdConfig::parse(&text).unwrap()
}

/// A raw jobd protocol client.
pub struct Client {
    pub stream: TcpStream,
    buf: BytesMut,
    decoder: Decoder,
    no: i64,
}

impl Client {
    pub async fn connect(addr: SocketAddr) -> Client {
        Client {
            stream: TcpStream::connect(addr).await.unwrap(),
            buf: BytesMut::new(),
            decoder: Decoder::new(1 << 30),
            no: 100,
        }
    }

    /// A client on an already connected stream (e.g. one a fake master accepted).
    pub fn from_stream(stream: TcpStream) -> Client {
        Client {
            stream,
            buf: BytesMut::new(),
            decoder: Decoder::new(1 << 30),
            no: 100,
        }
    }

    pub async fn send_raw(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).await.unwrap();
    }

    /// The next whole frame's text (without EOT); `None` on EOF.
    pub async fn read_frame(&mut self) -> Option<String> {
        loop {
            if let Some(pos) = self.buf.iter().position(|&b| b == EOT) {
                let f = self.buf.split_to(pos + 1);
                return Some(String::from_utf8(f[..pos].to_vec()).unwrap());
            }
            let n =
                tokio::time::timeout(Duration::from_secs(60), self.stream.read_buf(&mut self.buf))
                    .await
                    .expect("no reply within 60 s")
                    .unwrap();
            if n == 0 {
                return None;
            }
        }
    }

    /// The next frame as JSON.
    pub async fn read_json(&mut self) -> Value {
        let f = self.read_frame().await.expect("connection closed");
        serde_json::from_str(&f).unwrap()
    }

    /// Sends a request and returns the `[1,{…}]` reply's object.
    pub async fn request(&mut self, kind: &str, data: Value) -> Value {
        self.no += 1;
        let msg = serde_json::json!([0, {"no": self.no, "type": kind, "data": data}]);
        let mut b = serde_json::to_vec(&msg).unwrap();
        b.push(EOT);
        self.send_raw(&b).await;
        let reply = self.read_json().await;
        assert_eq!(reply[0], 1, "{reply}");
        assert_eq!(reply[1]["no"], self.no, "{reply}");
        reply[1].clone()
    }

    /// `data` of a successful reply (panics on an error reply).
    pub async fn ok(&mut self, kind: &str, data: Value) -> Value {
        let r = self.request(kind, data).await;
        assert!(r.get("error").is_none(), "{kind}: {r}");
        r["data"].clone()
    }

    /// `error` of a failed reply.
    pub async fn err(&mut self, kind: &str, data: Value) -> String {
        let r = self.request(kind, data).await;
        r["error"]
            .as_str()
            .unwrap_or_else(|| panic!("{kind} did not fail: {r}"))
            .to_string()
    }
}

/// Feeds `decoder` once (used to check the harness's own decoding in passing).
pub fn decode_all(bytes: &[u8]) -> Vec<Incoming> {
    let mut d = Decoder::new(1 << 20);
    let mut b = BytesMut::from(bytes);
    let mut out = Vec::new();
    while let Some(m) = d.decode(&mut b) {
        out.push(m);
    }
    out
}
