"""Helpers for the HTTP API tests: the real jobyard binary with all three listeners on free
loopback ports, and `requests` (a real HTTP client) to talk to it.

No conftest.py here on purpose: tests/gearman imports its conftest by name, and a third
module of that name would make that import ambiguous. Test modules import the fixtures
from this file instead.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from jobyard_testlib import binary_path, free_port  # noqa: E402

START_TIMEOUT = 60.0
# Generous: bounds how long a broken server can hang a test, never how fast a correct one is.
TIMEOUT = 30.0


class HttpServer:
    """One `jobyard serve` with beanstalkd, Gearman and HTTP on free ports; restartable on
    the same data directory, killable with SIGKILL."""

    def __init__(self, data_dir: Path, log_path: Path, extra=(), token=None, ca=None):
        self.data_dir = Path(data_dir)
        self.log_path = Path(log_path)
        self.extra = list(extra)
        self.proc = None
        # With a token, every request of this server's session sends it; with a CA file,
        # the listener speaks TLS and requests trust that CA (passed per request: requests
        # lets REQUESTS_CA_BUNDLE override a session's own `verify`).
        self.token = token
        self.ca = ca
        self.session = self._new_session()

    def _new_session(self) -> requests.Session:
        session = requests.Session()
        if self.token:
            session.headers["Authorization"] = f"Bearer {self.token}"
        return session

    def start(self) -> "HttpServer":
        last = ""
        for _ in range(5):
            self.bport, self.gport, self.hport = free_port(), free_port(), free_port()
            env = {k: v for k, v in os.environ.items() if not k.startswith("JOBYARD_")}
            env["JOBYARD_LOG"] = "info"
            with open(self.log_path, "ab") as log:
                self.proc = subprocess.Popen(
                    [str(binary_path()), "serve", "--data-dir", str(self.data_dir),
                     "--beanstalk-listen", f"127.0.0.1:{self.bport}",
                     "--gearman-listen", f"127.0.0.1:{self.gport}",
                     "--http-listen", f"127.0.0.1:{self.hport}", *self.extra],
                    stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=env)
            deadline = time.monotonic() + START_TIMEOUT
            while time.monotonic() < deadline and self.proc.poll() is None:
                try:
                    # A connection of its own, closed at once: a kept-alive one would hold
                    # a place under --max-connections.
                    headers = {**self.session.headers, "Connection": "close"}
                    with requests.get(self.url("/v1/health"), timeout=2, headers=headers,
                                      verify=str(self.ca) if self.ca else True) as probe:
                        answered = probe.status_code == 200
                    if answered:
                        return self
                except requests.RequestException:
                    time.sleep(0.05)
            if self.proc.poll() is None:
                self.kill9()
                raise AssertionError(f"jobyard did not answer HTTP in time:\n{self.log()}")
            last = self.log()
            if self.proc.returncode != 111:  # 111: a port was taken meanwhile; try others
                break
        raise AssertionError(f"jobyard did not start:\n{last}")

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-4000:]
        except FileNotFoundError:
            return ""

    @property
    def pid(self) -> int:
        return self.proc.pid

    def url(self, path: str) -> str:
        scheme = "https" if self.ca else "http"
        return f"{scheme}://127.0.0.1:{self.hport}{path}"

    @property
    def beanstalk(self):
        return ("127.0.0.1", self.bport)

    def request(self, method: str, path: str, **kw) -> requests.Response:
        kw.setdefault("timeout", TIMEOUT)
        if self.ca:
            kw.setdefault("verify", str(self.ca))
        return self.session.request(method, self.url(path), **kw)

    def get(self, path, **kw):
        return self.request("GET", path, **kw)

    def post(self, path, json=None, **kw):
        return self.request("POST", path, json=json, **kw)

    def delete(self, path, **kw):
        return self.request("DELETE", path, **kw)

    def put_job(self, queue: str, **fields) -> int:
        r = self.post(f"/v1/queues/{queue}/jobs", json=fields)
        assert r.status_code == 201, r.text
        return r.json()["id"]

    def lease(self, *queues: str, **fields) -> dict:
        r = self.post("/v1/lease", json={"queues": list(queues), **fields})
        assert r.status_code == 200, r.text
        return r.json()

    def kill9(self):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(timeout=30)
        self.session.close()
        self.session = self._new_session()

    def stop(self) -> int:
        if self.proc is None:
            return 0
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.kill9()
        self.session.close()
        return self.proc.returncode


def error_code(r: requests.Response) -> str:
    """The stable code of a refusal (and checks that the refusal is JSON)."""
    assert r.headers.get("content-type", "").startswith("application/json"), r.text
    return r.json()["error"]["code"]


@pytest.fixture
def start_http(tmp_path):
    """Starts servers (extra flags optional); every one is stopped at teardown."""
    if not binary_path().is_file():
        pytest.fail(f"build the binary first: {binary_path()}", pytrace=False)
    servers = []

    def start(extra=(), data_dir=None, **options) -> HttpServer:
        n = len(servers)
        srv = HttpServer(data_dir or tmp_path / f"data{n}", tmp_path / f"jobyard{n}.log", extra,
                         **options)
        servers.append(srv)
        return srv.start()

    yield start
    for srv in servers:
        code = srv.stop()
        print(f"--- jobyard log, exit {code}:\n{srv.log()}")


@pytest.fixture
def http(start_http) -> HttpServer:
    return start_http()
