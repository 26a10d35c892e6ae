"""Routing a leased job to the next queue in one durable step (POST /v1/jobs/{id}/route):
the stage step of multi-stage jobs, checked end to end, across protocols and a crash."""

from __future__ import annotations

import shutil
import subprocess
import threading
import time

import greenstalk
import pytest

from http_testlib import error_code, http, start_http  # noqa: F401  (fixtures)


def watched(http, id_):
    deadline = time.monotonic() + 30
    while http.get(f"/v1/jobs/{id_}").json()["watchers"] < 1:
        assert time.monotonic() < deadline, "the result request did not start watching"
        time.sleep(0.02)


def test_a_job_goes_through_two_stages_and_its_waiter_hears_the_end(http):
    id_ = http.put_job("stage-1", body="order", priority=7, attributes={"step": 1})
    box = {}
    t = threading.Thread(target=lambda: box.setdefault("r", http.get(
        f"/v1/jobs/{id_}/result", params={"wait_ms": 30_000})), daemon=True)
    t.start()
    watched(http, id_)
    first = http.lease("stage-1")
    w1 = first["worker"]
    r = http.post(f"/v1/jobs/{id_}/route", json={"worker": w1, "token": 1, "queue": "stage-2",
                                                 "attributes": {"step": 2}})
    assert r.status_code == 200 and r.json() == {"id": id_, "queue": "stage-2", "state": "ready"}
    job = http.get(f"/v1/jobs/{id_}").json()
    assert job["queue"] == "stage-2" and job["state"] == "ready" and job["priority"] == 7
    assert job["attributes"] == {"step": 2} and job["watchers"] == 1
    assert http.get("/v1/queues/stage-1").json()["ready"] == 0
    second = http.lease("stage-2")
    assert second["job"]["id"] == id_ and second["job"]["token"] == 2
    assert second["job"]["body"] == "order" and second["job"]["attributes"] == {"step": 2}
    for call in ["route", "complete"]:
        r = http.post(f"/v1/jobs/{id_}/{call}", json={"worker": w1, "token": 1, "queue": "x"}
                      if call == "route" else {"worker": w1, "token": 1})
        assert r.status_code == 409 and error_code(r) == "stale_token", call
    r = http.post(f"/v1/jobs/{id_}/complete", json={"worker": second["worker"], "token": 2,
                                                    "result": "shipped"})
    assert r.status_code == 200
    t.join(60)
    assert box["r"].json() == {"id": id_, "ended": True, "status": "ok", "result": "shipped"}


def test_a_waiting_worker_of_the_next_stage_gets_the_routed_job(http):
    id_ = http.put_job("a", body="x")
    first = http.lease("a")
    box = {}
    t = threading.Thread(target=lambda: box.setdefault("r", http.lease("b", wait_ms=30_000)),
                         daemon=True)
    t.start()
    deadline = time.monotonic() + 30
    while http.get("/v1/queues/b").json()["waiting_workers"] < 1:
        assert time.monotonic() < deadline
        time.sleep(0.02)
    r = http.post(f"/v1/jobs/{id_}/route", json={"worker": first["worker"], "token": 1,
                                                 "queue": "b", "priority": 1})
    assert r.status_code == 200
    t.join(60)
    assert box["r"]["job"]["id"] == id_ and box["r"]["job"]["priority"] == 1


def test_a_routed_job_is_reserved_by_a_beanstalkd_consumer_of_that_tube(http):
    id_ = http.put_job("http-stage", body="for beanstalkd")
    lease = http.lease("http-stage")
    http.post(f"/v1/jobs/{id_}/route", json={"worker": lease["worker"], "token": 1,
                                             "queue": "bs-stage"})
    with greenstalk.Client(http.beanstalk, watch="bs-stage") as c:
        job = c.reserve(timeout=30)
        assert job.id == id_ and job.body == "for beanstalkd"
        c.delete(job)


def test_route_refusals(http):
    id_ = http.put_job("q", body="x")
    lease = http.lease("q")
    w = lease["worker"]
    for body, status, code in [
        ({"worker": w, "token": 1, "queue": "a b"}, 400, "bad_queue_name"),
        ({"worker": w, "token": 1}, 400, "bad_json"),
        ({"worker": w, "token": 1, "queue": "n", "attributes": "x" * 70000}, 413,
         "attributes_too_big"),
        ({"worker": w, "token": 2, "queue": "n"}, 409, "stale_token"),
        ({"worker": "nobody", "token": 1, "queue": "n"}, 404, "unknown_worker"),
    ]:
        r = http.post(f"/v1/jobs/{id_}/route", json=body)
        assert r.status_code == status and error_code(r) == code, body
    assert http.get(f"/v1/jobs/{id_}").json()["queue"] == "q", "nothing half-applied"


def test_a_gearman_job_with_a_unique_key_is_not_routable(http):
    if shutil.which("gearman") is None:
        pytest.skip("the gearman tool is not installed (scripts/setup.sh installs it)")
    subprocess.run(["gearman", "-h", "127.0.0.1", "-p", str(http.gport), "-f", "g", "-b",
                    "-u", "key-1", "data"], check=True, capture_output=True, timeout=60)
    lease = http.lease("g")
    id_ = lease["job"]["id"]
    assert http.get(f"/v1/jobs/{id_}").json()["unique"] == "key-1"
    r = http.post(f"/v1/jobs/{id_}/route", json={"worker": lease["worker"], "token": 1,
                                                 "queue": "elsewhere"})
    assert r.status_code == 409 and error_code(r) == "not_routable"


def test_an_acknowledged_route_survives_kill_9(http):
    id_ = http.put_job("before", body="x", attributes={"v": 1})
    lease = http.lease("before")
    r = http.post(f"/v1/jobs/{id_}/route", json={"worker": lease["worker"], "token": 1,
                                                 "queue": "after", "priority": 3,
                                                 "attributes": {"v": 2}})
    assert r.status_code == 200
    http.kill9()
    http.start()
    job = http.get(f"/v1/jobs/{id_}").json()
    assert (job["queue"], job["state"], job["priority"]) == ("after", "ready", 3)
    assert job["attributes"] == {"v": 2} and job["attempts"] == 1
    assert http.lease("after")["job"]["token"] == 2
