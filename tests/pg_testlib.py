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
    """A `jobyard serve` started while another node leads the same storage: it forwards
    its clients to the leader until it takes over, and is started on a thread.
    `took_over(timeout)` waits for it to lead (its log says it is ready); `waiting()` says
    whether it is a standby yet (its log says so)."""

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
            # A standby's front door answers (forwarding to the leader) long before the
            # node leads: it leads once its log says the server is ready.
            while "ready (storage:" not in self.server.log_path.read_text(errors="replace"):
                if not self.server.running():
                    raise AssertionError("the standby exited:\n" + self.server.log_tail())
                time.sleep(0.02)
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


# -- a supervised cluster: nodes restarted when they exit, as systemd's Restart=on-failure --

STEP_DOWN_EXIT = 75
# systemd's default RestartSec.
RESTART_DELAY = 0.1
# A node that exits this many times in a row within CRASH_LOOP_WINDOW s of starting is given
# up on (systemd's StartLimitBurst), so a node that cannot start never spins a test forever.
CRASH_LOOP_BURST = 5
CRASH_LOOP_WINDOW = 2.0


class SupervisedNode:
    """One `jobyard serve --storage URL` node on fixed loopback ports (beanstalkd, Gearman,
    HTTP), restarted by a supervisor thread whenever it exits other than cleanly, as
    systemd's `Restart=on-failure` does: after `kill -9`, and after stepping down (exit 75),
    when it comes back as a standby. The ports stay the same across restarts, so a client
    that knows every node's address always finds the one that leads. `stop()` is a clean
    SIGTERM, after which the node stays down. Every run appends to one log file."""

    def __init__(self, binary, url: str, name: str, log_dir: Path, extra_args=(), env=None):
        from jobyard_testlib import other_listeners_off

        self.binary = str(binary)
        self.url = url
        self.name = name
        self.beanstalk_port = free_port()
        self.gearman_port = free_port()
        self.http_port = free_port()
        self.log_path = Path(log_dir) / f"node-{name}.log"
        self.extra_args = list(extra_args)
        self.env = dict(os.environ if env is None else env)
        self.env.setdefault("JOBYARD_LOG", "info")
        self._listen = {
            "--beanstalk-listen": f"{HOST}:{self.beanstalk_port}",
            "--gearman-listen": f"{HOST}:{self.gearman_port}",
            "--http-listen": f"{HOST}:{self.http_port}",
        }
        self._others_off = [
            arg
            for flag, off in zip(*[iter(other_listeners_off(self.binary))] * 2)
            if flag not in self._listen and flag not in self.extra_args
            for arg in (flag, off)
        ]
        self.proc: Optional[subprocess.Popen] = None
        self.exits: List[int] = []  # every exit code seen, in order (-9: killed)
        self.gave_up = False
        self._stopping = False
        self._thread = None
        import threading

        self._lock = threading.Lock()
        # Cleared while a killed node is held down (a lost machine); set lets it restart.
        self._may_restart = threading.Event()
        self._may_restart.set()

    # -- addresses -----------------------------------------------------------------------

    @property
    def beanstalk_address(self):
        return (HOST, self.beanstalk_port)

    @property
    def gearman_address(self) -> str:
        return f"{HOST}:{self.gearman_port}"

    @property
    def http_base(self) -> str:
        return f"http://{HOST}:{self.http_port}"

    # -- lifecycle -----------------------------------------------------------------------

    def start(self) -> "SupervisedNode":
        """Launches the node and its supervisor; returns at once (a standby does not answer
        until it leads: see `Cluster.leader()`)."""
        import threading

        self._stopping = False
        self._spawn()
        self._thread = threading.Thread(target=self._supervise, name=f"supervise-{self.name}",
                                        daemon=True)
        self._thread.start()
        return self

    def _spawn(self) -> None:
        cmd = [
            self.binary, "serve", "--storage", self.url, "--node-name", self.name,
            *(x for kv in self._listen.items() for x in kv), *self._others_off,
            *self.extra_args,
        ]
        with open(self.log_path, "ab") as log:
            with self._lock:
                self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log,
                                             stderr=subprocess.STDOUT, env=self.env)
        self.started_at = time.monotonic()

    def _supervise(self) -> None:
        quick_exits = 0
        while True:
            code = self.proc.wait()
            self.exits.append(code)
            if self._stopping or code == 0:
                return
            quick_exits = quick_exits + 1 if time.monotonic() - self.started_at < CRASH_LOOP_WINDOW else 0
            if quick_exits >= CRASH_LOOP_BURST:
                self.gave_up = True
                self._note(f"supervisor: exit {code}, {quick_exits} quick exits in a row: giving up")
                return
            self._note(f"supervisor: exit {code}; restarting")
            time.sleep(RESTART_DELAY)
            while not self._may_restart.wait(0.1):
                if self._stopping:
                    return
            if self._stopping:
                return
            self._spawn()

    def _note(self, line: str) -> None:
        with open(self.log_path, "ab") as log:
            log.write(f"--- {line} ---\n".encode())

    def running(self) -> bool:
        with self._lock:
            return self.proc is not None and self.proc.poll() is None

    def kill9(self, hold: bool = False) -> None:
        """SIGKILL the current process; the supervisor starts it again, at once or (`hold`)
        once `release()` is called: a machine lost for a while rather than a crash."""
        if hold:
            self._may_restart.clear()
        with self._lock:
            if self.proc is not None and self.proc.poll() is None:
                self.proc.send_signal(signal.SIGKILL)

    def release(self) -> None:
        """Lets a node killed with `hold` restart."""
        self._may_restart.set()

    def pid(self) -> Optional[int]:
        with self._lock:
            return None if self.proc is None else self.proc.pid

    def restarts(self) -> int:
        return len(self.exits)

    def stop(self) -> None:
        """A clean stop (SIGTERM, SIGKILL after 20 s), not restarted."""
        self._stopping = True
        self._may_restart.set()
        with self._lock:
            proc = self.proc
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGCONT)  # should a test have stopped it
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if self._thread is not None:
            self._thread.join(5)

    # -- what it says about itself -------------------------------------------------------

    def cluster(self, timeout: float = 2.0) -> Optional[dict]:
        """`GET /v1/cluster` on this node, or None when it does not answer."""
        import json
        import urllib.request

        try:
            with urllib.request.urlopen(f"{self.http_base}/v1/cluster", timeout=timeout) as r:
                return json.load(r)
        except (OSError, ValueError):
            return None

    def leads(self) -> bool:
        """Whether this node answers as the leader (its own document, not one forwarded)."""
        doc = self.cluster()
        return bool(doc) and doc.get("role") == "leader" and doc.get("node") == self.name

    def log_tail(self, lines: int = 40) -> str:
        if not self.log_path.exists():
            return "(no log)"
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])


class Cluster:
    """N supervised nodes on one storage (see `SupervisedNode`): `leader()` waits for the
    node that leads, `kill_leader()` kills it -9 and waits for another to take over."""

    def __init__(self, binary, url: str, log_dir: Path, size: int = 2, extra_args=(),
                 env=None, names=None):
        names = names or [f"n{i + 1}" for i in range(size)]
        self.nodes = [SupervisedNode(binary, url, name, log_dir, extra_args, env)
                      for name in names]
        self.failovers: List[float] = []  # seconds from each kill to the next leader's answer

    def start(self, timeout: float = 60.0) -> "Cluster":
        """Starts the first node, waits until it leads, then the others (as standbys)."""
        self.nodes[0].start()
        self.leader(timeout)
        for node in self.nodes[1:]:
            node.start()
        return self

    def leader(self, timeout: float = 30.0, not_pid=None) -> SupervisedNode:
        """The node that leads, waiting up to `timeout` s for one (whose process is not
        `not_pid`: a killed leader's node may come back and lead again)."""
        deadline = time.monotonic() + timeout
        while True:
            for node in self.nodes:
                if node.running() and node.pid() != not_pid and node.leads():
                    return node
            if time.monotonic() > deadline:
                tails = "\n".join(f"== {n.name}:\n{n.log_tail(15)}" for n in self.nodes)
                raise AssertionError(f"no node leads after {timeout} s:\n{tails}")
            time.sleep(0.05)

    def kill_leader(self, timeout: float = 30.0, hold: bool = True) -> SupervisedNode:
        """kill -9 of the leader; returns the node that then leads (once it answers).
        With `hold` (a lost machine) the killed node restarts only after another node
        leads, so a standby takes over; without it (a crash) it restarts at once, and may
        itself lead again."""
        old = self.leader(timeout)
        pid = old.pid()
        old.kill9(hold=hold)
        killed = time.monotonic()
        try:
            new = self.leader(timeout, not_pid=pid)
        finally:
            old.release()
        self.failovers.append(time.monotonic() - killed)
        return new

    def pause_leader(self, timeout: float = 30.0) -> SupervisedNode:
        """SIGSTOP of the leader until another node leads, then SIGCONT: the old leader,
        fenced, must step down (exit 75; the supervisor restarts it). Returns the new one."""
        old = self.leader(timeout)
        pid = old.pid()
        os.kill(pid, signal.SIGSTOP)
        stopped = time.monotonic()
        try:
            new = self.leader(timeout, not_pid=pid)
        finally:
            os.kill(pid, signal.SIGCONT)
        self.failovers.append(time.monotonic() - stopped)
        deadline = time.monotonic() + timeout
        while old.pid() == pid:
            assert time.monotonic() < deadline, f"the paused leader {old.name} did not step down"
            time.sleep(0.05)
        return new

    def beanstalk_addresses(self):
        return [n.beanstalk_address for n in self.nodes]

    def gearman_addresses(self) -> List[str]:
        return [n.gearman_address for n in self.nodes]

    def http_bases(self) -> List[str]:
        return [n.http_base for n in self.nodes]

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()

    def logs(self, lines: int = 30) -> str:
        return "\n".join(f"== node {n.name} (exits {n.exits}):\n{n.log_tail(lines)}"
                         for n in self.nodes)
