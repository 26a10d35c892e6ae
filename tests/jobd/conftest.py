"""Fixtures for the jobd drop-in tests: a real MariaDB in a temp dir on a loopback port,
a fresh database with the README's jobs table per test, and the real jobyard binary run as
`jobyard jobd` / `jobyard jobd-master` with jobd-style ini configs."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from jobyard_testlib import free_port  # noqa: E402

SCHEMA = """CREATE TABLE `jobs` (
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
) ENGINE=InnoDB DEFAULT CHARSET=utf8"""


def _which(name: str) -> str:
    for d in ("/usr/sbin", "/usr/bin", "/usr/local/sbin", "/usr/local/bin"):
        p = Path(d) / name
        if p.exists():
            return str(p)
    found = shutil.which(name)
    if not found:
        pytest.fail(f"{name} not found (scripts/setup.sh installs mariadb-server)", pytrace=False)
    return found


class Mariadb:
    def __init__(self, root: Path):
        self.root = root
        self.port = free_port()
        root_flag = ["--user=root"] if os.geteuid() == 0 else []
        subprocess.run(
            [_which("mariadb-install-db"), "--no-defaults", *root_flag, "--skip-test-db",
             f"--datadir={root / 'data'}"],
            check=True, capture_output=True, timeout=120,
        )
        self.proc = subprocess.Popen(
            [_which("mariadbd"), "--no-defaults", *root_flag, f"--datadir={root / 'data'}",
             f"--socket={root / 'sock'}", f"--pid-file={root / 'pid'}", f"--port={self.port}",
             "--bind-address=127.0.0.1", "--skip-grant-tables", "--skip-name-resolve",
             "--innodb-buffer-pool-size=32M"],
            stdout=subprocess.DEVNULL, stderr=open(root / "err.log", "wb"),
        )
        deadline = time.time() + 60
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                break
            except OSError:
                if time.time() > deadline or self.proc.poll() is not None:
                    raise RuntimeError(f"mariadbd did not start: {(root / 'err.log').read_text()}")
                time.sleep(0.05)

    def sql(self, query: str, db: str | None = None) -> list[list[str]]:
        args = [_which("mariadb"), "-h", "127.0.0.1", "-P", str(self.port), "-u", "root",
                "--batch", "--skip-column-names", "--raw"]
        if db:
            args.append(db)
        out = subprocess.run(args, input=query, capture_output=True, text=True, timeout=60, check=True)
        return [line.split("\t") for line in out.stdout.splitlines()]

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture(scope="session")
def mariadb(tmp_path_factory):
    m = Mariadb(tmp_path_factory.mktemp("mariadb"))
    yield m
    m.stop()


class JobsDb:
    """One test's database."""

    counter = 0

    def __init__(self, m: Mariadb):
        JobsDb.counter += 1
        self.m = m
        self.name = f"py{os.getpid()}_{JobsDb.counter}"
        m.sql(f"CREATE DATABASE {self.name}")
        m.sql(SCHEMA, self.name)

    def sql(self, q: str):
        return self.m.sql(q, self.name)

    def insert(self, target: str, status: str = "waiting") -> int:
        rows = self.sql(
            f"INSERT INTO jobs (target, time_created, status) VALUES ('{target}', UNIX_TIMESTAMP(), '{status}');"
            " SELECT LAST_INSERT_ID();"
        )
        return int(rows[-1][0])

    def row(self, job_id: int) -> dict | None:
        rows = self.sql(
            "SELECT status, IFNULL(result,'NULL'), IFNULL(return_code,'NULL'), IFNULL(sig,'NULL'),"
            f" IFNULL(stdout,'NULL'), IFNULL(stderr,'NULL') FROM jobs WHERE id={job_id}"
        )
        if not rows:
            return None
        s, r, c, g, o, e = (rows[0] + [""] * 6)[:6]
        return {"status": s, "result": r, "return_code": c, "sig": g, "stdout": o, "stderr": e}

    def wait_status(self, job_id: int, status: str, timeout: float = 30) -> dict:
        deadline = time.time() + timeout
        while True:
            r = self.row(job_id)
            if r and r["status"] == status:
                return r
            if time.time() > deadline:
                raise AssertionError(f"job {job_id} never reached {status}: {r}")
            time.sleep(0.02)


@pytest.fixture
def jobs_db(mariadb):
    return JobsDb(mariadb)


class Daemon:
    """`jobyard jobd|jobd-master --config F` as a real process."""

    def __init__(self, binary: Path, mode: str, config: Path, port: int):
        self.binary, self.mode, self.config, self.port = binary, mode, config, port
        self.proc = None
        self.start()

    def start(self):
        self.proc = subprocess.Popen(
            [str(self.binary), self.mode, "--config", str(self.config)],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        )
        deadline = time.time() + 60
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return
            except OSError:
                if self.proc.poll() is not None:
                    raise RuntimeError(self.proc.stderr.read().decode())
                if time.time() > deadline:
                    raise RuntimeError(f"{self.mode} did not start")
                time.sleep(0.05)

    def kill9(self):
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                return self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        return self.proc.wait()


@pytest.fixture
def jobd(jobyard_bin, jobs_db, tmp_path):
    """`start(targets, extra)`: a `jobyard jobd` on a free port for this test's database;
    the launcher runs `job-<id>.sh` from tmp_path when present, else prints `id=<id>`."""
    daemons = []
    run = tmp_path / "run.sh"
    run.write_text('d=$(dirname "$0")\nif [ -f "$d/job-$1.sh" ]; then . "$d/job-$1.sh"; else echo "id=$1"; fi\n')

    def start(targets="t1 = 1", extra="", name="w", port=None, master_port=None) -> Daemon:
        port = port or free_port()
        cfg = tmp_path / f"jobd-{port}.conf"
        master = f"master_host = 127.0.0.1\nmaster_port = {master_port}\nmaster_reconnect_timeout = 1\n" if master_port else ""
        cfg.write_text(
            f"host = 127.0.0.1\nport = {port}\nname = {name}\n{master}"
            f"mysql_host = 127.0.0.1\nmysql_port = {jobs_db.m.port}\nmysql_user = root\n"
            f"mysql_password = \"\"\nmysql_database = {jobs_db.name}\nmysql_table = jobs\n"
            f"launcher = /bin/sh {run} {{id}}\nshutdown_timeout = 5\n{extra}\n[targets]\n{targets}\n"
        )
        d = Daemon(jobyard_bin, "jobd", cfg, port)
        daemons.append(d)
        return d

    yield start
    for d in daemons:
        d.stop()


@pytest.fixture
def jobd_master(jobyard_bin, tmp_path):
    daemons = []

    def start(extra="") -> Daemon:
        port = free_port()
        cfg = tmp_path / f"master-{port}.conf"
        cfg.write_text(f"host = 127.0.0.1\nport = {port}\npoke_throttle_interval = 0.05\n{extra}\n")
        d = Daemon(jobyard_bin, "jobd-master", cfg, port)
        daemons.append(d)
        return d

    yield start
    for d in daemons:
        d.stop()
