"""Durability over HTTP: what the API acknowledged survives `kill -9` of the real server.

Producer threads put jobs over HTTP as fast as they are acknowledged, and delete or
complete some of their own; the server is killed with SIGKILL mid-stream and restarted on
the same data directory. Every acknowledged put must be there with its body, queue,
priority and attributes, every acknowledged delete or complete must have stuck, and an
operation in flight at the kill may have happened or not. Fencing tokens are never handed
out twice, across the restart too.
"""

from __future__ import annotations

import random
import signal
import threading
import time

import requests

from http_testlib import error_code, http, start_http  # noqa: F401  (fixtures)


class Producer(threading.Thread):
    def __init__(self, srv, n: int, killed: threading.Event):
        super().__init__(daemon=True)
        self.srv, self.n, self.killed = srv, n, killed
        self.rng = random.Random(n)
        self.live = {}  # id -> (body, priority): acknowledged and not ended
        self.ended = set()  # ids whose delete/complete was acknowledged
        self.unsure = set()  # ids with an operation in flight at the kill
        self.acks = 0
        self.error = None

    def run(self):
        s = requests.Session()
        queue = f"crash{self.n}"
        try:
            while True:
                body = f"p{self.n}-{self.acks}-" + "x" * self.rng.randrange(64)
                pri = self.rng.randrange(1, 2000)
                try:
                    r = s.post(self.srv.url(f"/v1/queues/{queue}/jobs"), timeout=60,
                               json={"body": body, "priority": pri, "attributes": {"n": self.n}})
                except requests.RequestException:
                    return  # the kill: this put may or may not have happened
                assert r.status_code == 201, r.text
                self.live[r.json()["id"]] = (queue, body, pri)
                self.acks += 1
                if self.live and self.rng.random() < 0.3:
                    self.end_one(s, queue)
        except Exception as e:  # a reply the server should not have sent
            if not self.killed.is_set():
                self.error = repr(e)

    def end_one(self, s, queue):
        victim = self.rng.choice(sorted(self.live))
        self.unsure.add(victim)
        if self.rng.random() < 0.5:
            r = s.delete(self.srv.url(f"/v1/jobs/{victim}"), timeout=60)
            assert r.status_code == 200, r.text
        else:
            # Lease the most urgent job of the queue and complete it.
            r = s.post(self.srv.url("/v1/lease"), json={"queues": [queue]}, timeout=60)
            lease = r.json()
            job = lease["job"]
            self.unsure.discard(victim)
            victim = job["id"]
            self.unsure.add(victim)
            r = s.post(self.srv.url(f"/v1/jobs/{victim}/complete"), timeout=60,
                       json={"worker": lease["worker"], "token": job["token"]})
            assert r.status_code == 200, r.text
            s.delete(self.srv.url(f"/v1/workers/{lease['worker']}"), timeout=60)
        del self.live[victim]
        self.ended.add(victim)
        self.unsure.discard(victim)


def test_acknowledged_http_changes_survive_kill_9(start_http):
    srv = start_http(["--fsync", "always"])
    killed = threading.Event()
    producers = [Producer(srv, n, killed) for n in range(3)]
    for p in producers:
        p.start()
    deadline = time.monotonic() + 60
    while sum(p.acks for p in producers) < 150 and time.monotonic() < deadline:
        time.sleep(0.02)
    killed.set()
    srv.proc.send_signal(signal.SIGKILL)
    srv.proc.wait(timeout=30)
    for p in producers:
        p.join(60)
        assert p.error is None, p.error
    assert sum(p.acks for p in producers) >= 150, "the server acknowledged too little"
    srv.kill9()
    srv.start()
    checked = 0
    for p in producers:
        for id_, (queue, body, pri) in p.live.items():
            r = srv.get(f"/v1/jobs/{id_}")
            if id_ in p.unsure and r.status_code == 404:
                continue
            assert r.status_code == 200, (id_, r.text)
            job = r.json()
            assert (job["queue"], job["body_preview"], job["priority"]) == (queue, body, pri)
            assert job["attributes"] == {"n": p.n} and job["state"] == "ready"
            checked += 1
        for id_ in p.ended:
            r = srv.get(f"/v1/jobs/{id_}")
            assert r.status_code == 404 and error_code(r) == "not_found", id_
    assert checked > 0
    # New ids continue above every old one.
    top = max(max(p.live | {i: 0 for i in p.ended}) for p in producers)
    assert srv.put_job("after", body="x") > top


def test_a_fencing_token_is_never_handed_out_twice_across_a_crash(http):
    id_ = http.put_job("fenced", body="x")
    first = http.lease("fenced", lease_ms=60_000)["job"]
    assert first["token"] == 1
    http.kill9()
    http.start()
    job = http.get(f"/v1/jobs/{id_}").json()
    assert job["state"] == "ready" and job["attempts"] == 1, "the lease ended with the process"
    second = http.lease("fenced")
    assert second["job"]["token"] == 2
    r = http.post(f"/v1/jobs/{id_}/complete", json={"worker": second["worker"], "token": 1})
    assert r.status_code == 409 and error_code(r) == "stale_token"
