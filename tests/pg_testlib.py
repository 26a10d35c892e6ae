"""A real PostgreSQL for the tests: a cluster made with initdb in a temp dir, on a free
loopback port, with fsync on, run as the `postgres` system user that Debian's package makes
(PostgreSQL refuses to run as root, and the tests and CI are root).

The superuser `postgres` needs a password over TCP (scram-sha-256), which the tests give
jobyard through PGPASSWORD; over the cluster's own unix socket (in the temp dir) it is
trusted, which `sql()` uses. `stop()` is a fast shutdown; `start()` again keeps the data and
the port, so a test can take PostgreSQL away and bring it back.
"""

from __future__ import annotations

import glob
import os
import secrets
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from typing import List, Optional

from jobyard_testlib import HOST, free_port

PG_USER = "postgres"


def pg_bin(name: str) -> str:
    """A PostgreSQL server program (initdb, postgres): the newest installed version's."""
    found = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"), key=_version)
    if found:
        return found[-1]
    path = shutil.which(name)
    if path is None:
        raise RuntimeError(f"{name} not found (scripts/setup.sh installs postgresql)")
    return path


def _version(path: str) -> int:
    try:
        return int(Path(path).parts[-3])
    except ValueError:
        return 0


def _as_postgres() -> dict:
    """Popen arguments that run a program as the postgres user when we are root
    (PostgreSQL refuses root). Not through runuser: signals must reach the postmaster."""
    if os.geteuid() == 0:
        return {"user": PG_USER, "group": PG_USER}
    return {}


class Postgres:
    """One PostgreSQL cluster in its own temp dir; see the module's doc."""

    def __init__(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="jobyard-pg-"))
        # Not under pytest's tmp dir: its parents are root's and closed to other users.
        os.chmod(self.root, 0o755)
        if os.geteuid() == 0:
            shutil.chown(self.root, user=PG_USER)
        self.data = self.root / "data"
        self.socket_dir = self.root
        self.port = free_port()
        self.password = "pw-" + secrets.token_hex(8)
        self.proc: Optional[subprocess.Popen] = None
        pwfile = self.root / "pwfile"
        pwfile.write_text(self.password + "\n")
        if os.geteuid() == 0:
            shutil.chown(pwfile, user=PG_USER)
        subprocess.run(
            [
                pg_bin("initdb"), "-D", str(self.data), "-U", PG_USER, "--no-sync",
                "--auth-local=trust", "--auth-host=scram-sha-256", f"--pwfile={pwfile}",
                "--encoding=UTF8", "--locale=C",
            ],
            check=True, capture_output=True, timeout=120, cwd=self.root, **_as_postgres(),
        )
        pwfile.unlink()

    @property
    def log_path(self) -> Path:
        return self.root / "postgres.log"

    def url(self, db: str = "postgres", password: bool = False) -> str:
        """postgres://postgres@127.0.0.1:PORT/DB, with the password in it if asked."""
        secret = f":{self.password}" if password else ""
        return f"postgres://{PG_USER}{secret}@{HOST}:{self.port}/{db}"

    def start(self) -> "Postgres":
        assert self.proc is None or self.proc.poll() is not None, "already running"
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            [
                pg_bin("postgres"), "-D", str(self.data), "-p", str(self.port),
                "-k", str(self.socket_dir), "-c", f"listen_addresses={HOST}",
                "-c", "fsync=on", "-c", "max_connections=50",
            ],
            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, cwd=self.root,
            **_as_postgres(),
        )
        log.close()
        deadline = time.monotonic() + 60
        while True:
            ready = subprocess.run(
                [pg_bin("pg_isready"), "-h", str(self.socket_dir), "-p", str(self.port),
                 "-U", PG_USER, "-q"],
                capture_output=True,
            )
            if ready.returncode == 0:
                return self
            if time.monotonic() > deadline or self.proc.poll() is not None:
                raise RuntimeError(f"postgres did not start:\n{self.log_tail()}")
            time.sleep(0.1)

    def sql(self, query: str, db: str = "postgres") -> List[List[str]]:
        """Runs SQL over the trusted unix socket; rows as lists of strings."""
        out = subprocess.run(
            [pg_bin("psql"), "-h", str(self.socket_dir), "-p", str(self.port), "-U", PG_USER,
             "-d", db, "-X", "-A", "-t", "-F", "\t", "-v", "ON_ERROR_STOP=1", "-c", query],
            capture_output=True, text=True, timeout=60,
        )
        if out.returncode != 0:
            raise RuntimeError(f"psql failed: {out.stderr}")
        return [line.split("\t") for line in out.stdout.splitlines() if line]

    def create_database(self, name: str) -> str:
        """A fresh database; returns its name."""
        self.sql(f"CREATE DATABASE {name}")
        return name

    def stop(self) -> None:
        """Fast shutdown (SIGINT to the postmaster): sessions end, the data stays."""
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGINT)
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def destroy(self) -> None:
        """Stops the cluster and removes its directory."""
        self.stop()
        shutil.rmtree(self.root, ignore_errors=True)

    def log_tail(self, lines: int = 30) -> str:
        if not self.log_path.exists():
            return "(no log)"
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])


class Standby:
    """A `jobyard serve` started while another node leads the same storage: it does not
    answer until it takes over, so it is started on a thread. `took_over(timeout)` waits
    for that; `waiting()` says whether it is a standby yet (its log says so)."""

    def __init__(self, server) -> None:
        import threading

        self.server = server
        self.error: Optional[BaseException] = None
        self.led_at: Optional[float] = None
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            self.server.start()
            self.led_at = time.monotonic()
        except BaseException as e:  # reported by took_over()
            self.error = e

    def waiting(self, timeout: float = 30.0) -> bool:
        """Waits until the node's log says it is a standby."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            path = self.server.log_path
            if path is not None and path.exists() and "standby:" in path.read_text(errors="replace"):
                return True
            time.sleep(0.05)
        return False

    def took_over(self, timeout: float) -> bool:
        """Waits up to `timeout` s for the node to lead and answer; re-raises its start's error."""
        self._thread.join(timeout)
        if self.error is not None:
            raise self.error
        return self.led_at is not None
