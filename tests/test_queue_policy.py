"""A queue's policy with real clients: a rate limit declared in the config file holds for
beanstalkd (greenstalk) and HTTP takers together, and a pause and a rate limit survive a
kill -9 restart (both are logged; beanstalkd forgets pauses).

Rates are checked by counting jobs handed out in a window with generous slack, never by
timing single hand-outs: a loaded 2-core machine delays clients, not the bucket.
"""

from __future__ import annotations

import threading
import time
from typing import List

import greenstalk
import pytest
import requests

from jobyard_testlib import HOST, free_port

RATE = 10  # jobs per second in the config below
WINDOW = 3.0  # seconds of counting


@pytest.fixture
def policy_server(start_server, tmp_path):
    """A server with HTTP on a free port and a config file declaring `limited`'s rate."""
    config = tmp_path / "jobyard.toml"
    config.write_text(f'[queues.limited]\nrate_limit = "{RATE}/s"\n')
    hport = free_port()
    srv = start_server(extra_args=("--http-listen", f"{HOST}:{hport}", "--config", str(config)))
    srv.http = f"http://{HOST}:{hport}"
    return srv


def stats_tube(address, tube):
    with greenstalk.Client(address, use=tube) as c:
        return c.stats_tube(tube)


class Taker(threading.Thread):
    """Takes and finishes jobs of `limited` until `stop`, recording when each came."""

    def __init__(self, take, stop: threading.Event):
        super().__init__(daemon=True)
        self.take = take
        self.stop = stop
        self.times: List[float] = []
        self.error = None

    def run(self):
        try:
            while not self.stop.is_set():
                if self.take():
                    self.times.append(time.monotonic())
        except Exception as e:  # reported by the test, not lost in a thread
            self.error = e


def beanstalk_taker(address, stop):
    client = greenstalk.Client(address, watch="limited")

    def take():
        try:
            job = client.reserve(timeout=1)
        except greenstalk.TimedOutError:
            return False
        client.delete(job)
        return True

    return Taker(take, stop)


def http_taker(base, stop):
    session = requests.Session()
    worker = session.post(f"{base}/v1/workers", timeout=10).json()["worker"]

    def take():
        r = session.post(f"{base}/v1/lease", timeout=10,
                         json={"queues": ["limited"], "worker": worker, "wait_ms": 1000})
        job = r.json()["job"]
        if job is None:
            return False
        done = session.post(f"{base}/v1/jobs/{job['id']}/complete", timeout=10,
                            json={"worker": worker, "token": job["token"]})
        assert done.status_code == 200, done.text
        return True

    return Taker(take, stop)


def test_a_configured_rate_limit_holds_for_beanstalkd_and_http_takers(policy_server):
    srv = policy_server
    with greenstalk.Client(srv.address, use="limited") as c:
        for i in range(300):
            c.put(f"job {i}".encode())
    policy = requests.get(f"{srv.http}/v1/queues/limited/policy", timeout=10).json()
    assert policy["rate_limit"] == f"{RATE}/s"
    stats = stats_tube(srv.address, "limited")
    assert stats["rate-limit"] == f"{RATE}/s"
    assert list(stats)[:14][-1] == "pause-time-left", "beanstalkd's keys come first"

    stop = threading.Event()
    takers = [beanstalk_taker(srv.address, stop), http_taker(srv.http, stop)]
    start = time.monotonic()
    for t in takers:
        t.start()
    time.sleep(WINDOW + 1.5)
    stop.set()
    for t in takers:
        t.join(timeout=15)
        assert t.error is None, t.error
    in_window = [[x for x in t.times if x <= start + WINDOW] for t in takers]
    total = sum(len(x) for x in in_window)
    # A full bucket (one burst of RATE), then RATE a second: a little slack for the clock.
    most = RATE + RATE * WINDOW + 3
    assert total <= most, f"{total} jobs in {WINDOW}s at {RATE}/s ({[len(x) for x in in_window]})"
    assert total >= RATE * WINDOW / 2, f"only {total} jobs in {WINDOW}s: the limit starved takers"
    assert all(len(x) >= 2 for x in in_window), [len(x) for x in in_window]
    remaining = stats_tube(srv.address, "limited")["current-jobs-ready"]
    assert remaining >= 300 - (RATE + RATE * (WINDOW + 1.5) + 3 + 2)


def test_a_pause_and_a_rate_limit_survive_kill9(policy_server):
    srv = policy_server
    set_rate = requests.patch(f"{srv.http}/v1/queues/slow/policy", timeout=10,
                              json={"rate_limit": "2/m", "lease_limit": 5})
    assert set_rate.status_code == 200, set_rate.text
    with greenstalk.Client(srv.address, use="paused") as c:
        c.put(b"waits for the pause")
        c.pause_tube("paused", 3600)
        c.use("slow")
        for i in range(3):
            c.put(f"slow {i}".encode())

    srv.restart(crash=True)

    stats = stats_tube(srv.address, "paused")
    assert stats["pause"] == 3600
    assert 3500 < stats["pause-time-left"] <= 3600
    with greenstalk.Client(srv.address, watch="paused") as c:
        with pytest.raises(greenstalk.TimedOutError):
            c.reserve(timeout=0)

    policy = requests.get(f"{srv.http}/v1/queues/slow/policy", timeout=10).json()
    assert (policy["rate_limit"], policy["lease_limit"]) == ("2/m", 5)
    with greenstalk.Client(srv.address, watch="slow") as c:
        # A restarted bucket is empty (the jobs handed out just before the crash are not
        # known): the first token comes 30 s after the restart, not a burst at once.
        with pytest.raises(greenstalk.TimedOutError):
            c.reserve(timeout=1)

    resumed = requests.patch(f"{srv.http}/v1/queues/paused/policy", timeout=10,
                             json={"paused": False})
    assert resumed.json()["paused"] is False
    srv.restart(crash=True)
    with greenstalk.Client(srv.address, watch="paused") as c:
        assert c.reserve(timeout=5).body == "waits for the pause"
