"""Load of real clients through failovers, and the ledger that judges it.

Clients of each protocol (greenstalk, the gearman3 Python client, HTTP through `requests`)
run as threads against a cluster of nodes (pg_testlib's `Cluster`). Each knows every node's
address and, whenever its connection breaks, tries them in turn until one answers: the
leader, or a standby that forwards to it. Every job body is unique, and every client writes
what happened to it into one `Ledger`:

* a put **acknowledged** (INSERTED, JOB_CREATED, 201), **refused** (an explicit error
  reply: the job must never exist) or **unanswered** (the connection broke: it may exist);
* a job **taken** by a consumer (reserved, leased, handed to a Gearman worker);
* an end (delete, complete) **acknowledged** (DELETED, 200) or **unanswered** (the connection
  broke, or the protocol never answers one: Gearman's WORK_COMPLETE).

After the load, `drain()` takes every job left, and `Ledger.verdict()` counts:

* **lost**: an acknowledged put that was neither ended (acknowledged or not) nor left;
* **resurrected**: a job whose end was acknowledged and that was handed out again or left;
* **duplicated**: a job handed out more than once whose end was never acknowledged in
  between (at-least-once delivery across a failover: allowed, and reported);
* **phantom**: a job left or handed out that no client ever sent, or whose put was refused.

Used by tests/postgres/test_pg_failover_clients.py, test_pg_restart.py and
scripts/soak_failover.py.
"""

from __future__ import annotations

import socket
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, List, Optional, Sequence, Set

import greenstalk
import requests

sys.path.insert(0, str(Path(__file__).resolve().parent / "gearman"))

# Generous: bounds how long a broken server can hang a client, never how fast a good one is.
REPLY_TIMEOUT = 30.0
RECONNECT_PAUSE = 0.05


@dataclass
class Verdict:
    """What `Ledger.verdict()` found; `ok` when nothing was lost, resurrected or made up."""

    acked_puts: int
    acked_ends: int
    left: int
    lost: List[bytes]
    resurrected: List[bytes]
    duplicated: int
    phantom: List[bytes]
    refused_puts: int
    unanswered_puts: int

    @property
    def ok(self) -> bool:
        return not (self.lost or self.resurrected or self.phantom)

    def line(self) -> str:
        return (f"lost={len(self.lost)} resurrected={len(self.resurrected)} "
                f"duplicated={self.duplicated} phantom={len(self.phantom)} "
                f"(acknowledged puts={self.acked_puts} ends={self.acked_ends} left={self.left}; "
                f"unanswered puts={self.unanswered_puts} refused={self.refused_puts})")

    def details(self, limit: int = 10) -> str:
        return (f"{self.line()}\nlost: {self.lost[:limit]}\nresurrected: "
                f"{self.resurrected[:limit]}\nphantom: {self.phantom[:limit]}")


class Ledger:
    """Every client's record of what the servers acknowledged (see the module's doc)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.acked_puts: Set[bytes] = set()
        self.unanswered_puts: Set[bytes] = set()
        self.refused_puts: Set[bytes] = set()
        self.acked_ends: Set[bytes] = set()
        self.unanswered_ends: Set[bytes] = set()
        self.taken: Counter = Counter()
        self.resurrected: Set[bytes] = set()
        self.steps_left: Set[tuple] = set()
        self.refusals: List[str] = []
        self.errors: List[str] = []

    def put_acked(self, body: bytes) -> None:
        with self.lock:
            self.acked_puts.add(body)

    def put_unanswered(self, body: bytes) -> None:
        with self.lock:
            self.unanswered_puts.add(body)

    def put_refused(self, body: bytes, why: str) -> None:
        with self.lock:
            self.refused_puts.add(body)
            if len(self.refusals) < 10:  # the first few reasons, for the report
                self.refusals.append(why)

    def took(self, body: bytes) -> None:
        with self.lock:
            self.taken[body] += 1
            if body in self.acked_ends:
                self.resurrected.add(body)

    def end_acked(self, body: bytes) -> None:
        with self.lock:
            self.acked_ends.add(body)

    def step_acked(self, body: bytes, step: str) -> None:
        """A job acknowledged to have left `step` (a flow stage other than its last)."""
        with self.lock:
            self.steps_left.add((body, step))

    def step_taken(self, body: bytes, step: str) -> None:
        """A job handed out at `step`: resurrected if it was acknowledged to have left it."""
        with self.lock:
            if (body, step) in self.steps_left:
                self.resurrected.add(body)

    def end_unanswered(self, body: bytes) -> None:
        with self.lock:
            self.unanswered_ends.add(body)

    def error(self, text: str) -> None:
        with self.lock:
            self.errors.append(text)

    def acks(self) -> int:
        with self.lock:
            return len(self.acked_puts)

    def verdict(self, left: Counter) -> Verdict:
        """Judges the run, given every job left at the end (body -> how many)."""
        with self.lock:
            ended = self.acked_ends | self.unanswered_ends
            lost = sorted(b for b in self.acked_puts if b not in ended and b not in left)
            resurrected = set(self.resurrected) | {b for b in left if b in self.acked_ends}
            known = self.acked_puts | self.unanswered_puts
            phantom = {b for b in left if b not in known}
            phantom |= {b for b in self.taken if b not in known}
            phantom |= {b for b in left if b in self.refused_puts}
            phantom |= {b for b in self.taken if b in self.refused_puts}
            seen = Counter(self.taken)
            seen.update(left)
            duplicated = sum(n - 1 for b, n in seen.items() if n > 1 and b not in resurrected)
            return Verdict(
                acked_puts=len(self.acked_puts), acked_ends=len(self.acked_ends),
                left=sum(left.values()), lost=lost, resurrected=sorted(resurrected),
                duplicated=duplicated, phantom=sorted(phantom),
                refused_puts=len(self.refused_puts),
                unanswered_puts=len(self.unanswered_puts - self.acked_puts),
            )


# -- connecting to whichever node answers ---------------------------------------------------


def first_answering(addresses: Sequence, start: int, stop: threading.Event):
    """The index of the first address, from `start` round, that accepts a TCP connection;
    waits (trying them all again) until one does or `stop` is set (then None)."""
    n = len(addresses)
    while not stop.is_set():
        for k in range(n):
            i = (start + k) % n
            host, port = addresses[i] if isinstance(addresses[i], tuple) else _split(addresses[i])
            try:
                socket.create_connection((host, port), timeout=2).close()
                return i
            except OSError:
                continue
        time.sleep(RECONNECT_PAUSE)
    return None


def _split(address: str):
    """("127.0.0.1", 4730) from "127.0.0.1:4730" or "http://127.0.0.1:8080"."""
    host, port = address.split("://", 1)[-1].rsplit(":", 1)
    return host, int(port)


class Client(threading.Thread):
    """A load thread: `session()` runs on one connection until it breaks; the thread then
    finds an answering node and starts another session, until `stop` is set."""

    def __init__(self, name: str, ledger: Ledger, addresses: Sequence, stop: threading.Event):
        super().__init__(name=name, daemon=True)
        self.ledger, self.addresses, self.stop = ledger, list(addresses), stop
        self.n = 0
        self.reconnects = 0
        self.where = 0

    def body(self) -> bytes:
        self.n += 1
        return f"{self.name}-{self.n}".encode()

    def run(self) -> None:
        while not self.stop.is_set():
            i = first_answering(self.addresses, self.where, self.stop)
            if i is None:
                return
            self.where = i
            try:
                self.session(self.addresses[i])
            except Exception as e:  # a broken connection: try the nodes again
                self.reconnects += 1
                self.last_error = f"{type(e).__name__}: {e}"
                self.where = i + 1
                time.sleep(RECONNECT_PAUSE)

    def session(self, address) -> None:
        raise NotImplementedError


# -- beanstalkd (greenstalk) ----------------------------------------------------------------


def beanstalk_client(address, timeout: float = REPLY_TIMEOUT, use=None, watch=None):
    """A greenstalk client whose socket has `timeout` from the start: its constructor's own
    `use`/`watch` commands must not wait forever on a node that never answers (a paused
    leader, or a standby's door forwarding to one)."""
    sock = socket.create_connection(address, timeout=timeout)
    kw = {"use": use} if use else {}
    if watch:
        kw["watch"] = watch
    return greenstalk.Client(sock, encoding=None, **kw)


def is_refusal(e: Exception) -> bool:
    """A greenstalk exception that is the server's explicit error reply (not a broken
    connection or a reply cut short)."""
    return isinstance(e, greenstalk.Error) and not isinstance(e, (OSError, AssertionError))


class BeanstalkProducer(Client):
    """Puts unique bodies into `tube`, one at a time, as fast as they are acknowledged."""

    def __init__(self, name, ledger, addresses, stop, tube: str, pause: float = 0.0):
        super().__init__(name, ledger, addresses, stop)
        self.tube, self.pause = tube, pause

    def session(self, address) -> None:
        with beanstalk_client(address, use=self.tube) as c:
            while not self.stop.is_set():
                body = self.body()
                try:
                    c.put(body, ttr=60)
                except Exception as e:
                    if is_refusal(e):
                        self.ledger.put_refused(body, repr(e))
                        time.sleep(RECONNECT_PAUSE)
                        continue
                    self.ledger.put_unanswered(body)
                    raise
                self.ledger.put_acked(body)
                if self.pause:
                    time.sleep(self.pause)


class BeanstalkConsumer(Client):
    """Reserves from `tube` and deletes what it reserved."""

    def __init__(self, name, ledger, addresses, stop, tube: str):
        super().__init__(name, ledger, addresses, stop)
        self.tube = tube

    def session(self, address) -> None:
        with beanstalk_client(address, watch=self.tube) as c:
            while not self.stop.is_set():
                try:
                    job = c.reserve(timeout=1)
                except greenstalk.TimedOutError:
                    continue
                self.ledger.took(job.body)
                try:
                    c.delete(job)
                except Exception:
                    self.ledger.end_unanswered(job.body)
                    raise
                self.ledger.end_acked(job.body)


# -- Gearman (gearman3) ---------------------------------------------------------------------


def _gearman():
    from gearman_py3 import gearman  # the patched gearman3 of tests/gearman

    return gearman


class GearmanSubmitter(Client):
    """Submits background jobs of `function`; JOB_CREATED acknowledges each."""

    def __init__(self, name, ledger, addresses, stop, function: str):
        super().__init__(name, ledger, addresses, stop)
        self.function = function

    def session(self, address) -> None:
        client = _gearman().GearmanClient([address])
        try:
            while not self.stop.is_set():
                body = self.body()
                try:
                    req = client.submit_job(self.function, body, background=True,
                                            wait_until_complete=False,
                                            poll_timeout=REPLY_TIMEOUT)
                except Exception:
                    self.ledger.put_unanswered(body)
                    raise
                if not req.job.handle:
                    self.ledger.put_unanswered(body)
                    raise ConnectionError(f"no JOB_CREATED for {body!r} ({req.state})")
                self.ledger.put_acked(body)
        finally:
            client.shutdown()


class GearmanWorker(Client):
    """Takes jobs of `function` and completes them. WORK_COMPLETE has no reply, so no end of
    a Gearman job is ever acknowledged: a job may come back after a failover."""

    def __init__(self, name, ledger, addresses, stop, function: str):
        super().__init__(name, ledger, addresses, stop)
        self.function = function

    def session(self, address) -> None:
        outer = self
        gearman = _gearman()

        class Worker(gearman.GearmanWorker):
            def after_poll(self, any_activity):
                return not outer.stop.is_set()

        def complete(worker, job):
            outer.ledger.took(job.data)
            outer.ledger.end_unanswered(job.data)
            return b"done"

        w = Worker([address])
        try:
            w.set_client_id(self.name)
            w.register_task(self.function.encode(), complete)
            w.work(poll_timeout=0.2)
        finally:
            w.shutdown()
        if not self.stop.is_set():
            raise ConnectionError("the Gearman worker's server went away")


# -- HTTP (requests) ------------------------------------------------------------------------


class HttpProducer(Client):
    """Puts jobs with `POST /v1/queues/{queue}/jobs`; 201 acknowledges each."""

    def __init__(self, name, ledger, addresses, stop, queue: str):
        super().__init__(name, ledger, addresses, stop)
        self.queue = queue

    def session(self, base) -> None:
        with requests.Session() as s:
            while not self.stop.is_set():
                body = self.body()
                try:
                    r = s.post(f"{base}/v1/queues/{self.queue}/jobs",
                               json={"body": body.decode()}, timeout=REPLY_TIMEOUT)
                except requests.RequestException:
                    self.ledger.put_unanswered(body)
                    raise
                if r.status_code == 201:
                    self.ledger.put_acked(body)
                else:
                    self.ledger.put_refused(body, f"{r.status_code} {r.text}")
                    time.sleep(RECONNECT_PAUSE)


class HttpWorker(Client):
    """Leases jobs of `queue` (`POST /v1/lease`) and completes them; the complete's 200
    acknowledges the end. A worker session lives on one leader: after a failover the old
    session is unknown, and a new one is made."""

    def __init__(self, name, ledger, addresses, stop, queue: str):
        super().__init__(name, ledger, addresses, stop)
        self.queue = queue

    def session(self, base) -> None:
        worker = None
        with requests.Session() as s:
            try:
                while not self.stop.is_set():
                    ask = {"queues": [self.queue], "wait_ms": 500, "lease_ms": 10000}
                    if worker:
                        ask["worker"] = worker
                    r = s.post(f"{base}/v1/lease", json=ask, timeout=REPLY_TIMEOUT)
                    if r.status_code != 200:
                        raise ConnectionError(f"lease: {r.status_code} {r.text}")
                    reply = r.json()
                    worker, job = reply["worker"], reply["job"]
                    if job is None:
                        continue
                    body = job["body"].encode()
                    self.ledger.took(body)
                    try:
                        r = s.post(f"{base}/v1/jobs/{job['id']}/complete",
                                   json={"worker": worker, "token": job["token"]},
                                   timeout=REPLY_TIMEOUT)
                    except requests.RequestException:
                        self.ledger.end_unanswered(body)
                        raise
                    if r.status_code != 200:
                        self.ledger.end_unanswered(body)
                        raise ConnectionError(f"complete: {r.status_code} {r.text}")
                    self.ledger.end_acked(body)
            finally:
                if worker:
                    try:  # hands back whatever the session holds
                        s.delete(f"{base}/v1/workers/{worker}", timeout=5)
                    except requests.RequestException:
                        pass


# -- HTTP flows ------------------------------------------------------------------------------

FLOW = "soak-flow"
FLOW_STAGES = ("soak-first", "soak-last")


def declare_flow(base: str) -> None:
    """The two-stage flow the flow clients use; each job's `tag` (its unique body) is handed
    to the workers with every lease."""
    # A flow lease is in the log with its deadline: one held by a worker of a node that
    # died comes back when its lease runs out (as after a restart), not at the takeover.
    # 10 s instead of the default 180 s keeps the final drain inside its wait.
    stages = [{"name": FLOW_STAGES[0], "next": FLOW_STAGES[1], "attributesToGet": ["tag"],
               "maxRetries": 1000, "leaseMs": 10_000},
              {"name": FLOW_STAGES[1], "attributesToGet": ["tag"], "maxRetries": 1000,
               "leaseMs": 10_000}]
    r = requests.post(f"{base}/v1/flows", json={"name": FLOW, "stages": stages}, timeout=30)
    assert r.status_code in (200, 201), r.text


class FlowCreator(Client):
    """Creates jobs of the flow (`POST /v1/flows/{flow}/jobs`); 201 acknowledges each. The
    queue argument is unused: flow jobs live in the stage queues."""

    def __init__(self, name, ledger, addresses, stop, queue: str = FLOW):
        super().__init__(name, ledger, addresses, stop)

    def session(self, base) -> None:
        with requests.Session() as s:
            while not self.stop.is_set():
                body = self.body()
                try:
                    r = s.post(f"{base}/v1/flows/{FLOW}/jobs",
                               json={"params": {"tag": body.decode()}}, timeout=REPLY_TIMEOUT)
                except requests.RequestException:
                    self.ledger.put_unanswered(body)
                    raise
                if r.status_code == 201:
                    self.ledger.put_acked(body)
                else:
                    self.ledger.put_refused(body, f"{r.status_code} {r.text}")
                    time.sleep(RECONNECT_PAUSE)


class FlowWorker(Client):
    """Leases the flow's jobs at one stage and completes them. A job handed out at a stage
    it was acknowledged to have left counts as resurrected; the last stage's complete is
    the job's end."""

    def __init__(self, name, ledger, addresses, stop, queue: str = FLOW_STAGES[0]):
        super().__init__(name, ledger, addresses, stop)
        self.stage = queue
        self.last = queue == FLOW_STAGES[-1]

    def session(self, base) -> None:
        worker = None
        with requests.Session() as s:
            try:
                while not self.stop.is_set():
                    ask = {"wait_ms": 500}
                    if worker:
                        ask["worker"] = worker
                    r = s.post(f"{base}/v1/stages/{self.stage}/lease", json=ask,
                               timeout=REPLY_TIMEOUT)
                    if r.status_code != 200:
                        raise ConnectionError(f"lease: {r.status_code} {r.text}")
                    reply = r.json()
                    worker, job = reply["worker"], reply["job"]
                    if job is None:
                        continue
                    tag = job["input"]["tag"].encode()
                    self.took(tag)
                    try:
                        r = s.post(f"{base}/v1/flow-jobs/{job['id']}/complete",
                                   json={"worker": worker, "token": job["token"],
                                         "result": {self.stage: True}},
                                   timeout=REPLY_TIMEOUT)
                    except requests.RequestException:
                        self.ended(tag, acked=False)
                        raise
                    if r.status_code != 200:
                        self.ended(tag, acked=False)
                        raise ConnectionError(f"complete: {r.status_code} {r.text}")
                    self.ended(tag, acked=True)
            finally:
                if worker:
                    try:
                        s.delete(f"{base}/v1/workers/{worker}", timeout=5)
                    except requests.RequestException:
                        pass

    def took(self, tag: bytes) -> None:
        if self.last:
            self.ledger.took(tag)
        else:
            self.ledger.step_taken(tag, self.stage)

    def ended(self, tag: bytes, acked: bool) -> None:
        if self.last:
            (self.ledger.end_acked if acked else self.ledger.end_unanswered)(tag)
        elif acked:
            self.ledger.step_acked(tag, self.stage)


def drain_flow(base: str, timeout: float = 60.0) -> Counter:
    """Takes every job of the flow still in a stage through the stages to its end; returns
    their tags (tag -> 1). Waits for leases still held (by sessions that ended with a node
    are gone with it) to come back first."""
    deadline = time.monotonic() + timeout
    while True:
        r = requests.get(f"{base}/v1/flows/{FLOW}", timeout=REPLY_TIMEOUT)
        assert r.status_code == 200, r.text
        leased = sum(st["leased"] for st in r.json()["stages"])
        if leased == 0:
            break
        assert time.monotonic() < deadline, f"{leased} flow jobs still leased"
        time.sleep(0.2)
    left: Counter = Counter()
    ask: dict = {"wait_ms": 0}
    with requests.Session() as s:
        for stage in FLOW_STAGES:
            while True:
                r = s.post(f"{base}/v1/stages/{stage}/lease", json=ask, timeout=REPLY_TIMEOUT)
                assert r.status_code == 200, r.text
                reply = r.json()
                ask["worker"] = reply["worker"]
                job = reply["job"]
                if job is None:
                    break
                left[job["input"]["tag"].encode()] = 1
                r = s.post(f"{base}/v1/flow-jobs/{job['id']}/complete", timeout=REPLY_TIMEOUT,
                           json={"worker": reply["worker"], "token": job["token"]})
                assert r.status_code == 200, r.text
    return left


# -- running and judging --------------------------------------------------------------------


class Load:
    """A set of client threads sharing one ledger and one stop event."""

    def __init__(self, ledger: Optional[Ledger] = None) -> None:
        self.ledger = ledger or Ledger()
        self.stop = threading.Event()
        self.clients: List[Client] = []
        self.queues: Set[str] = set()

    def add(self, kind: Callable, name: str, addresses: Sequence, queue: str, **kw) -> None:
        self.queues.add(queue)
        self.clients.append(kind(name, self.ledger, addresses, self.stop, queue, **kw))

    def start(self) -> "Load":
        for c in self.clients:
            c.start()
        return self

    def finish(self, timeout: float = 60.0) -> None:
        """Stops every client and waits for them; a client stuck past `timeout` is a hang."""
        self.stop.set()
        deadline = time.monotonic() + timeout
        stuck = []
        for c in self.clients:
            c.join(max(0.1, deadline - time.monotonic()))
            if c.is_alive():
                stuck.append(c.name)
        assert not stuck, f"clients stuck after the load stopped: {stuck}"

    def summary(self) -> str:
        """Each client's count of bodies made and of reconnections."""
        return ", ".join(f"{c.name}: {c.n} made, {c.reconnects} reconnects" for c in self.clients)

    def wait_for_acks(self, more: int, timeout: float = 30.0) -> None:
        """Waits until `more` further puts were acknowledged (progress through a failover)."""
        target = self.ledger.acks() + more
        deadline = time.monotonic() + timeout
        while self.ledger.acks() < target:
            assert time.monotonic() < deadline, (
                f"no progress: {self.ledger.acks()} of {target} puts acknowledged after "
                f"{timeout} s; clients: {[getattr(c, 'last_error', None) for c in self.clients]}")
            time.sleep(0.05)


def drain(address, queues, timeout: float = 60.0) -> Counter:
    """Takes (reserves and deletes) every job of `queues` on the node at `address` until
    none is ready, reserved or delayed; returns the bodies taken (body -> how many)."""
    left: Counter = Counter()
    deadline = time.monotonic() + timeout
    with beanstalk_client(address, watch=list(queues)) as c:
        while True:
            try:
                job = c.reserve(timeout=0)
            except greenstalk.TimedOutError:
                busy = sum(_pending(c, q) for q in queues)
                if busy == 0:
                    return left
                assert time.monotonic() < deadline, f"{busy} jobs still reserved or delayed"
                time.sleep(0.2)
                continue
            left[job.body] += 1
            c.delete(job)


def _pending(c: greenstalk.Client, tube: str) -> int:
    try:
        st = c.stats_tube(tube)
    except greenstalk.NotFoundError:
        return 0
    return sum(int(st[k]) for k in ("current-jobs-ready", "current-jobs-reserved",
                                    "current-jobs-delayed"))
