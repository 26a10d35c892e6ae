"""Retry policies and dead letters with real clients: a queue declared with the issue's
`[queues.NAME]` retry keys retries failed HTTP attempts with its backoff and moves the job
to its dead-letter queue after the last one, with the history of failures; a Gearman
background job failed by its worker (WORK_FAIL, WORK_EXCEPTION) does the same; beanstalkd
takers (greenstalk) whose TTR runs out count as failed attempts only under a policy; the
attempt count and the history survive kill -9; dead letters are retried or discarded in
bulk over the HTTP API.
"""

from __future__ import annotations

import socket
import struct
import time

import greenstalk
import pytest
import requests

from jobyard_testlib import HOST, free_port

CONFIG = """
[queues.emails]
max_attempts = 3               # after the third failed attempt: dead letter
backoff = "exponential"        # or "fixed"
backoff_ms = 200               # first delay; doubles, with jitter, up to backoff_max_ms
backoff_max_ms = 400
dead_letter = "emails-dead"    # absent: bury
rate_limit = "100/s"
lease_limit = 4

[queues.ttr]
max_attempts = 2
backoff = "fixed"
backoff_ms = 100
dead_letter = "ttr-dead"

[queues.resize]
max_attempts = 2
backoff_ms = 50
dead_letter = "resize-dead"
"""


@pytest.fixture
def retry_server(start_server, tmp_path):
    """A server with HTTP on a free port and the retry policies above."""
    config = tmp_path / "jobyard.toml"
    config.write_text(CONFIG)
    hport, gport = free_port(), free_port()
    srv = start_server(extra_args=("--http-listen", f"{HOST}:{hport}",
                                   "--gearman-listen", f"{HOST}:{gport}",
                                   "--config", str(config)))
    srv.http = f"http://{HOST}:{hport}"
    srv.gearman = (HOST, gport)
    return srv


class Gearman:
    """Gearman's binary protocol, just enough for a client that submits background jobs
    and a worker that fails them."""

    CAN_DO, GRAB_JOB, NO_JOB, JOB_ASSIGN, WORK_FAIL = 1, 9, 10, 11, 14
    JOB_CREATED, SUBMIT_JOB_BG, WORK_EXCEPTION = 8, 18, 25

    def __init__(self, address):
        self.sock = socket.create_connection(address, timeout=10)

    def send(self, kind, *args):
        data = b"\0".join(args)
        self.sock.sendall(b"\0REQ" + struct.pack(">II", kind, len(data)) + data)

    def recv(self):
        head = self.exactly(12)
        assert head[:4] == b"\0RES", head
        kind, size = struct.unpack(">II", head[4:])
        return kind, self.exactly(size).split(b"\0")

    def exactly(self, n):
        buf = b""
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            assert chunk, "connection closed"
            buf += chunk
        return buf

    def submit_background(self, function, data):
        self.send(self.SUBMIT_JOB_BG, function, b"", data)
        kind, args = self.recv()
        assert kind == self.JOB_CREATED, (kind, args)
        return args[0]

    def grab(self, wait=5.0):
        """The next job's handle, polling until one comes."""
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            self.send(self.GRAB_JOB)
            kind, args = self.recv()
            if kind == self.JOB_ASSIGN:
                return args[0]
            assert kind == self.NO_JOB, (kind, args)
            time.sleep(0.05)
        raise AssertionError("no job to grab")


class HttpWorker:
    """An HTTP API worker that fails every job it leases."""

    def __init__(self, base):
        self.base = base
        self.session = requests.Session()
        self.worker = self.session.post(f"{base}/v1/workers", timeout=10).json()["worker"]

    def fail_next(self, queue, error, wait_ms=5000):
        r = self.session.post(f"{self.base}/v1/lease", timeout=10,
                              json={"queues": [queue], "worker": self.worker, "wait_ms": wait_ms})
        job = r.json()["job"]
        assert job is not None, f"nothing to lease from {queue}"
        failed = self.session.post(f"{self.base}/v1/jobs/{job['id']}/fail", timeout=10,
                                   json={"worker": self.worker, "token": job["token"],
                                         "error": error})
        assert failed.status_code == 200, failed.text
        return job["id"], time.monotonic()


def dead_letters(srv, queue):
    r = requests.get(f"{srv.http}/v1/queues/{queue}/dead-letters", timeout=10)
    assert r.status_code == 200, r.text
    return r.json()["dead_letters"]


def await_dead_letters(srv, queue, count=1, wait=5.0):
    """The queue's dead letters once there are `count` (a Gearman worker's report has no
    reply to wait for)."""
    deadline = time.monotonic() + wait
    while True:
        found = dead_letters(srv, queue)
        if len(found) >= count or time.monotonic() > deadline:
            return found
        time.sleep(0.05)


def put_http(srv, queue, body):
    r = requests.post(f"{srv.http}/v1/queues/{queue}/jobs", timeout=10, json={"body": body})
    assert r.status_code in (200, 201), r.text
    return r.json()["id"]


def test_the_issues_table_loads_and_shows_on_the_policy_route(retry_server):
    policy = requests.get(f"{retry_server.http}/v1/queues/emails/policy", timeout=10).json()
    assert policy["retry"] == {"max_attempts": 3, "backoff": "exponential", "backoff_ms": 200,
                               "backoff_max_ms": 400, "dead_letter": "emails-dead"}
    assert (policy["rate_limit"], policy["lease_limit"]) == ("100/s", 4)


def test_failed_http_attempts_back_off_then_dead_letter_with_history_across_kill9(retry_server):
    srv = retry_server
    job = put_http(srv, "emails", "to: someone")
    worker = HttpWorker(srv.http)
    got, failed_at = worker.fail_next("emails", "smtp 421 try later")
    assert got == job
    # The backoff holds the job back (at least 4/5 of the first 200 ms delay).
    got, again_at = worker.fail_next("emails", "smtp 450 mailbox busy")
    assert got == job and again_at - failed_at >= 0.15

    srv.restart(crash=True)  # two failures logged: the third attempt is the last

    worker = HttpWorker(srv.http)
    got, _ = worker.fail_next("emails", "smtp 550 no such user")
    assert got == job
    [dead] = dead_letters(srv, "emails-dead")
    assert dead["id"] == job and dead["origin"] == "emails"
    assert dead["failed_attempts"] == 3
    errors = [f["error"] for f in dead["failures"]]
    assert errors == ["smtp 421 try later", "smtp 450 mailbox busy", "smtp 550 no such user"]
    assert all(f["how"] == "failed" and f["at_ms"] > 0 for f in dead["failures"])

    srv.restart(crash=True)  # the dead letter and its history are in the log
    [dead_again] = dead_letters(srv, "emails-dead")
    assert dead_again == dead

    retried = requests.post(f"{srv.http}/v1/queues/emails-dead/dead-letters/retry",
                            timeout=10, json={"ids": [job]}).json()
    assert retried["ids"] == [job]
    assert dead_letters(srv, "emails-dead") == []
    # Back in its queue with no failures counted: three attempts again.
    worker = HttpWorker(srv.http)  # the restart ended the last worker's session
    for n in range(3):
        got, _ = worker.fail_next("emails", f"again {n}")
        assert got == job
    assert [d["id"] for d in dead_letters(srv, "emails-dead")] == [job]
    discarded = requests.post(f"{srv.http}/v1/queues/emails-dead/dead-letters/discard",
                              timeout=10).json()
    assert discarded["ids"] == [job]
    assert requests.get(f"{srv.http}/v1/jobs/{job}", timeout=10).status_code == 404


def test_an_expired_ttr_counts_only_under_a_policy(retry_server):
    srv = retry_server
    with greenstalk.Client(srv.address, use="plain") as c:
        plain = c.put(b"no policy", ttr=1)
        c.use("ttr")
        job = c.put(b"under a policy", ttr=1)
    with greenstalk.Client(srv.address, watch=["plain", "ttr"]) as c:
        for expected in (plain, job):
            got = c.reserve(timeout=5)
            assert got.id == expected
        time.sleep(2.5)  # both leases run out
        # Without a policy the job is simply ready again, as with beanstalkd.
        again = c.reserve(timeout=5)
        assert again.id == plain
        c.delete(again)
        # Under the policy: one failure, then the last attempt.
        c.watch("ttr")
        c.ignore("plain")
        last = c.reserve(timeout=5)
        assert last.id == job
        assert c.stats_job(last)["reserves"] == 2
        time.sleep(2.5)  # held until its TTR runs out: closing first would be a disconnect
    [dead] = dead_letters(srv, "ttr-dead")
    assert dead["id"] == job and dead["failed_attempts"] == 2
    assert [f["how"] for f in dead["failures"]] == ["lease expired", "lease expired"]
    with greenstalk.Client(srv.address, use="ttr-dead") as c:
        assert c.stats_job(job)["state"] == "buried"
    srv.restart(crash=True)
    assert [d["id"] for d in dead_letters(srv, "ttr-dead")] == [job]
    with greenstalk.Client(srv.address, use="ttr-dead") as c:
        assert c.stats_job(job)["tube"] == "ttr-dead"


def test_a_beanstalkd_release_is_not_a_failure(retry_server):
    srv = retry_server
    with greenstalk.Client(srv.address, use="ttr", watch="ttr") as c:
        job = c.put(b"released", ttr=30)
        for _ in range(4):
            got = c.reserve(timeout=5)
            assert got.id == job
            c.release(got)
        c.delete(c.reserve(timeout=5))
    assert dead_letters(srv, "ttr-dead") == []


def test_a_gearman_background_job_failed_by_its_worker_is_dead_lettered(retry_server):
    srv = retry_server
    handle = Gearman(srv.gearman).submit_background(b"resize", b"cat.png")
    job = int(handle.rsplit(b":", 1)[1])
    worker = Gearman(srv.gearman)
    worker.send(Gearman.CAN_DO, b"resize")
    assert worker.grab() == handle
    worker.send(Gearman.WORK_EXCEPTION, handle, b"out of memory")
    # WORK_EXCEPTION has no reply: wait until the server took it before killing it.
    deadline = time.monotonic() + 5
    while requests.get(f"{srv.http}/v1/jobs/{job}", timeout=10).json()["state"] == "reserved":
        assert time.monotonic() < deadline, "the failure was not taken"
        time.sleep(0.05)
    time.sleep(0.3)  # and until the log has it on disk
    srv.restart(crash=True)  # the failure is logged: one attempt left
    worker = Gearman(srv.gearman)
    worker.send(Gearman.CAN_DO, b"resize")
    assert worker.grab() == handle
    worker.send(Gearman.WORK_FAIL, handle)
    [dead] = await_dead_letters(srv, "resize-dead")
    assert dead["id"] == job and dead["origin"] == "resize"
    assert [f["error"] for f in dead["failures"]] == ["out of memory", None]
    with greenstalk.Client(srv.address, use="resize-dead") as c:
        assert c.stats_job(job)["state"] == "buried"
