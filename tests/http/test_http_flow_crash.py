"""Flows survive kill -9 under load: worker threads create flow jobs and drive them through
three stages as fast as the server acknowledges; the server is killed with SIGKILL
mid-stream and restarted on the same data directory. Every acknowledged create must exist,
every acknowledged complete must have stuck (the job is at least as far along, with the
fields that complete merged), and no job is in two stages or in none."""

from __future__ import annotations

import threading
import time

import requests

from http_testlib import start_http  # noqa: F401  (fixtures)

STAGES = ["s1", "s2", "s3"]
FLOW = {"name": "crash", "stages": [{"name": "s1", "next": "s2"}, {"name": "s2", "next": "s3"},
                                    {"name": "s3"}]}


class Driver(threading.Thread):
    """Creates jobs and completes whatever its stages hand out, remembering each ack."""

    def __init__(self, srv, n: int):
        super().__init__(daemon=True)
        self.srv, self.n = srv, n
        self.created = set()
        self.progress = {}  # id -> number of stages whose complete was acknowledged
        self.error = None

    def run(self):
        s = requests.Session()
        url = self.srv.url
        try:
            while True:
                r = s.post(url("/v1/flows/crash/jobs"), json={"params": {"driver": self.n}}, timeout=60)
                assert r.status_code == 201, r.text
                self.created.add(r.json()["id"])
                for i, stage in enumerate(STAGES):
                    got = s.post(url(f"/v1/stages/{stage}/lease"), json={}, timeout=60).json()
                    job = got["job"]
                    if job is None:
                        continue
                    r = s.post(url(f"/v1/flow-jobs/{job['id']}/complete"), timeout=60,
                               json={"worker": got["worker"], "token": job["token"],
                                     "result": {f"done_{stage}": True}})
                    assert r.status_code == 200, r.text
                    self.progress[job["id"]] = STAGES.index(job["stage"]) + 1
        except (requests.RequestException, ValueError):
            return  # the kill
        except AssertionError as e:
            self.error = repr(e)


def test_acknowledged_flow_steps_survive_kill_9(start_http, tmp_path):
    srv = start_http(data_dir=tmp_path / "data")
    assert srv.post("/v1/flows", json=FLOW).status_code == 201
    drivers = [Driver(srv, n) for n in range(3)]
    for d in drivers:
        d.start()
    # Aim for 150 acknowledged steps; on a loaded machine settle for the 100 asserted below,
    # however long they take (within the test's time limit): the test is about what
    # survives the kill, not about speed.
    started = time.monotonic()
    while True:
        # Distinct jobs: one job's stages may be completed by different drivers, so the
        # per-driver counts overlap.
        done = len(set().union(*(list(d.progress) for d in drivers)))
        elapsed = time.monotonic() - started
        if done >= 150 or (done >= 100 and elapsed > 30) or elapsed > 150:
            break
        time.sleep(0.05)
    srv.kill9()
    for d in drivers:
        d.join(timeout=60)
        assert d.error is None, d.error
    srv = start_http(data_dir=tmp_path / "data")
    created = set().union(*(d.created for d in drivers))
    progress = {}
    for d in drivers:
        for job_id, acked in d.progress.items():
            progress[job_id] = max(acked, progress.get(job_id, 0))
    assert len(progress) >= 100
    counts = {s["stage"]: s for s in srv.get("/v1/flows/crash").json()["stages"]}
    in_stages = sum(c["waiting"] + c["leased"] + c["delayed"] + c["done"] for c in counts.values())
    for job_id in created:
        r = srv.get(f"/v1/flow-jobs/{job_id}")
        assert r.status_code == 200, f"acknowledged create of {job_id} lost"
        job = r.json()
        reached = 3 if job["state"] == "done" else STAGES.index(job["stage"])
        acked = progress.get(job_id, 0)
        assert reached >= acked, (job_id, job, acked)
        for stage in STAGES[:acked]:
            assert job["fields"].get(f"done_{stage}") is True, (job_id, stage, job)
    # Every job is counted once, in one stage: none in two, none in none. At most one create
    # per driver was in flight at the kill and may have happened without its ack.
    assert len(created) <= in_stages <= len(created) + len(drivers)
