"""A flow worker's report (complete, fail, delay) with `next`: the worker's next job of the
same stage is leased in the same request. Served like a stage lease (fenced, a long poll
when asked), refused before anything is applied when the report itself is refused or the
worker has another lease request in progress. Times are only bounds here, never measured."""

from __future__ import annotations

import threading
import time

from http_testlib import error_code, http, start_http  # noqa: F401  (fixtures)

FLOW = {"name": "nx", "stages": [
    {"name": "one", "next": "two", "maxRetries": 1, "delayable": True},
    {"name": "two"},
]}


def setup(srv, jobs=2):
    r = srv.post("/v1/flows", json=FLOW)
    assert r.status_code in (200, 201), r.text
    ids = []
    for i in range(jobs):
        r = srv.post("/v1/flows/nx/jobs", json={"params": {"n": i}})
        assert r.status_code == 201, r.text
        ids.append(r.json()["id"])
    return ids


def lease(srv, stage, **fields):
    r = srv.post(f"/v1/stages/{stage}/lease", json=fields)
    assert r.status_code == 200, r.text
    return r.json()


def report(srv, verb, worker, job, **fields):
    return srv.post(f"/v1/flow-jobs/{job['id']}/{verb}",
                    json={"worker": worker, "token": job["token"], **fields})


def states(srv, stage):
    jobs = srv.get(f"/v1/stages/{stage}/jobs").json()["jobs"]
    return {j["id"]: j["state"] for j in jobs}


def test_a_complete_with_next_hands_out_the_next_job_of_the_stage(http):
    first, second = setup(http)
    got = lease(http, "one")
    w, job = got["worker"], got["job"]
    assert job["id"] == first
    r = report(http, "complete", w, job, result={"done1": True}, next={})
    assert r.status_code == 200, r.text
    body = r.json()
    assert (body["id"], body["stage"], body["status"]) == (first, "two", "waiting")
    nxt = body["next"]
    assert nxt["worker"] == w
    assert nxt["job"]["id"] == second and nxt["job"]["stage"] == "one"
    assert nxt["job"]["input"]["id"] == second and nxt["job"]["input"]["retries"] == 0
    assert nxt["job"]["token"] >= 1 and nxt["job"]["lease_ms"] > 0
    assert states(http, "one") == {second: "leased"}
    # Nothing left: `next` answers null at once (no wait asked).
    r = report(http, "complete", w, nxt["job"], next={"lease_ms": 5000})
    assert r.status_code == 200, r.text
    assert r.json()["next"] == {"worker": w, "job": None}
    assert states(http, "two") == {first: "waiting", second: "waiting"}
    # Without `next`, the reply is what it always was.
    got = lease(http, "two")
    r = report(http, "complete", got["worker"], got["job"])
    assert set(r.json()) == {"id", "stage", "status"}


def test_a_next_lease_asks_its_own_lease_length(http):
    setup(http)
    got = lease(http, "one")
    before = time.time() * 1000
    r = report(http, "complete", got["worker"], got["job"], next={"lease_ms": 120000})
    job = r.json()["next"]["job"]
    assert 100000 < job["lease_ms"] <= 120000
    assert job["deadline_ms"] >= before + 100000


def test_next_waits_like_a_lease_when_asked(http):
    (only,) = setup(http, jobs=1)
    got = lease(http, "one")
    later = {}

    def create_soon():
        time.sleep(0.3)
        with http._new_session() as s:
            later["id"] = s.post(http.url("/v1/flows/nx/jobs"), json={}, timeout=10).json()["id"]

    t = threading.Thread(target=create_soon)
    t.start()
    r = report(http, "complete", got["worker"], got["job"], next={"wait_ms": 20000})
    t.join()
    assert r.status_code == 200, r.text
    assert r.json()["status"] == "waiting" and r.json()["stage"] == "two"
    assert r.json()["next"]["job"]["id"] == later["id"]
    # A wait that runs out answers the report with no job.
    r = report(http, "complete", got["worker"], r.json()["next"]["job"], next={"wait_ms": 50})
    assert r.json()["next"]["job"] is None
    assert states(http, "two") == {only: "waiting", later["id"]: "waiting"}


def test_fail_and_delay_take_next_too(http):
    first, second = setup(http)
    got = lease(http, "one")
    w = got["worker"]
    r = report(http, "fail", w, got["job"], error="try again", next={})
    assert r.status_code == 200, r.text
    assert r.json()["status"] in ("waiting", "delayed")
    nxt = r.json()["next"]["job"]
    # The failed job is retried without a backoff here, and it is the older of the two.
    assert nxt["id"] == first and nxt["input"]["retries"] == 1
    ready_at = int(time.time() * 1000) + 60000
    r = report(http, "delay", w, nxt, ready_at_ms=ready_at, reason="later", next={})
    assert r.status_code == 200, r.text
    assert r.json()["status"] == "delayed"
    again = r.json()["next"]["job"]
    assert again["id"] == second and again["input"]["retries"] == 0
    assert states(http, "one") == {first: "delayed", second: "leased"}


def test_a_refused_report_leases_nothing(http):
    first, second = setup(http)
    got = lease(http, "one")
    w, job = got["worker"], got["job"]
    stale = {**job, "token": job["token"] + 5}
    r = report(http, "complete", w, stale, next={})
    assert (r.status_code, error_code(r)) == (409, "stale_token")
    other = lease(http, "two")["worker"]  # a session that holds nothing
    r = report(http, "complete", other, job, next={})
    assert (r.status_code, error_code(r)) == (409, "not_leased")
    r = report(http, "fail", other, job, next={})
    assert (r.status_code, error_code(r)) == (409, "not_leased")
    r = report(http, "complete", "999999", job, next={})
    assert (r.status_code, error_code(r)) == (404, "unknown_worker")
    r = http.post("/v1/flow-jobs/nx:nope/complete", json={"worker": w, "token": 1, "next": {}})
    assert (r.status_code, error_code(r)) == (404, "not_found")
    for bad in ({"wait_ms": 60001}, {"lease_ms": 0}, {"queues": ["x"]}, "yes"):
        r = report(http, "complete", w, job, next=bad)
        assert r.status_code == 400, (bad, r.text)
        assert error_code(r) in ("bad_request", "bad_json"), (bad, r.text)
    r = report(http, "delay", w, job, ready_at_ms=0, next={"wait_ms": -1})
    assert (r.status_code, error_code(r)) == (400, "bad_json")
    # None of it applied anything: the job is still this worker's, the other one waits.
    assert states(http, "one") == {first: "leased", second: "waiting"}
    r = report(http, "complete", w, job, next={})
    assert r.status_code == 200 and r.json()["next"]["job"]["id"] == second


def test_a_worker_with_a_lease_request_in_progress_is_refused_before_the_report(http):
    (first,) = setup(http, jobs=1)
    got = lease(http, "one")
    w, job = got["worker"], got["job"]
    waiting = threading.Event()
    answered = {}

    def long_poll():
        with http._new_session() as s:
            waiting.set()
            answered["r"] = s.post(http.url("/v1/stages/two/lease"),
                                   json={"worker": w, "wait_ms": 1500}, timeout=10).json()

    t = threading.Thread(target=long_poll)
    t.start()
    waiting.wait()
    time.sleep(0.3)  # the long poll is in progress on the server (a bound, not a measure)
    r = report(http, "complete", w, job, next={})
    assert (r.status_code, error_code(r)) == (409, "worker_busy")
    assert states(http, "one") == {first: "leased"}
    t.join()
    assert answered["r"]["job"] is None
    r = report(http, "complete", w, job, next={})
    assert r.status_code == 200 and r.json()["next"]["job"] is None


def test_a_token_handed_to_a_waiting_worker_is_logged_before_the_reply(start_http, tmp_path):
    """The engine fences a flow job for a waiting worker in the transition that made it
    ready (here: the create); after a kill -9 the job's next lease has a later token."""
    srv = start_http(data_dir=tmp_path / "data")
    setup(srv, jobs=0)
    got = {}

    def long_poll():
        with srv._new_session() as s:
            got["r"] = s.post(srv.url("/v1/stages/one/lease"), json={"wait_ms": 20000},
                              timeout=30).json()

    t = threading.Thread(target=long_poll)
    t.start()
    time.sleep(0.3)  # the long poll is waiting (a bound, not a measure)
    job_id = srv.post("/v1/flows/nx/jobs", json={}).json()["id"]
    t.join()
    handed = got["r"]["job"]
    assert handed["id"] == job_id
    srv.kill9()
    srv = start_http(data_dir=tmp_path / "data")
    again = lease(srv, "one")["job"]
    assert again["id"] == job_id and again["token"] > handed["token"]
    r = report(srv, "complete", "1", handed)
    assert error_code(r) in ("stale_token", "unknown_worker", "not_leased")
