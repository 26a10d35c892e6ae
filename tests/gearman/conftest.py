"""Fixtures for the Gearman real-client tests: a jobyard server (target/debug/jobyard or
$JOBYARD_BIN) with its Gearman and beanstalkd listeners on free ports, plus helpers to run
the gearman/gearadmin tools, PHP scripts and Python worker processes against it."""

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
START_TIMEOUT = 60


def jobyard_bin():
    return os.environ.get("JOBYARD_BIN") or str(ROOT / "target" / "debug" / "jobyard")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Jobyard:
    """One server process on a data directory that survives restarts."""

    def __init__(self, data_dir, extra=()):
        self.data_dir = str(data_dir)
        self.extra = list(extra)
        self.proc = None
        self.log = open(os.path.join(os.path.dirname(self.data_dir), "jobyard.log"), "ab")
        self.start()

    def start(self):
        for _ in range(10):
            self.gport, self.bport = free_port(), free_port()
            env = {k: v for k, v in os.environ.items() if not k.startswith("JOBYARD_")}
            env["JOBYARD_LOG"] = "info"
            self.proc = subprocess.Popen(
                [jobyard_bin(), "serve", "--data-dir", self.data_dir,
                 "--gearman-listen", f"127.0.0.1:{self.gport}",
                 "--beanstalk-listen", f"127.0.0.1:{self.bport}",
                 "--http-listen", "off", *self.extra],
                stdin=subprocess.DEVNULL, stdout=self.log, stderr=self.log, env=env)
            deadline = time.time() + START_TIMEOUT
            while time.time() < deadline:
                if self.proc.poll() is not None:
                    break
                try:
                    socket.create_connection(("127.0.0.1", self.gport), 1).close()
                    return
                except OSError:
                    time.sleep(0.02)
            if self.proc.poll() != 111:  # 111: port taken by someone else, try others
                raise RuntimeError(f"jobyard did not start (exit {self.proc.poll()})")
        raise RuntimeError("no free ports")

    @property
    def addr(self):
        return f"127.0.0.1:{self.gport}"

    def kill(self):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()

    def restart(self):
        self.kill()
        self.start()

    def gearman(self, *args, timeout=60, input=None):
        """Runs the `gearman` tool against this server; returns CompletedProcess."""
        return subprocess.run(["gearman", "-h", "127.0.0.1", "-p", str(self.gport), *args],
                              capture_output=True, timeout=timeout, input=input)

    def gearadmin(self, *args):
        out = subprocess.run(["gearadmin", "-h", "127.0.0.1", "-p", str(self.gport), *args],
                             capture_output=True, timeout=60, check=True)
        return out.stdout.decode()

    def status(self):
        """`gearadmin --status` as {function: (total, running, workers)}."""
        rows = {}
        for line in self.gearadmin("--status").splitlines():
            parts = line.split("\t")
            if len(parts) == 4:
                rows[parts[0]] = tuple(int(p) for p in parts[1:])
        return rows

    def wait_for(self, predicate, what):
        """Polls `predicate` (no timing assumption beyond a generous bound)."""
        deadline = time.time() + START_TIMEOUT
        while time.time() < deadline:
            if predicate():
                return
            time.sleep(0.05)
        raise AssertionError(f"timed out waiting for {what}")


def need(tool):
    if shutil.which(tool) is None:
        pytest.skip(f"{tool} not installed (scripts/setup.sh installs it)")


@pytest.fixture
def jobyard(tmp_path):
    if not os.path.exists(jobyard_bin()):
        pytest.skip("build the binary first (cargo build)")
    server = Jobyard(tmp_path / "data", ["--fsync", "always"])
    yield server
    server.kill()


def python_worker(server, *args):
    """Starts tests/gearman/py_worker.py against the server."""
    return subprocess.Popen([sys.executable, str(HERE / "py_worker.py"), server.addr, *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
