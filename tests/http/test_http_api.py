"""Every endpoint of the HTTP API and its refusals, against the real server with a real
HTTP client (requests). Semantics: docs/http-api.md."""

from __future__ import annotations

import base64
import json
import os
import signal
import threading
import time
from pathlib import Path

import pytest
import requests

from http_testlib import error_code, http, start_http  # noqa: F401  (fixtures)

REPO = Path(__file__).resolve().parent.parent.parent


def in_thread(fn):
    """Runs `fn` in a thread; returns a function that joins it and gives its result."""
    out = {}

    def run():
        try:
            out["value"] = fn()
        except Exception as e:  # shown by the joining test
            out["error"] = e

    t = threading.Thread(target=run, daemon=True)
    t.start()

    def join():
        t.join(60)
        assert not t.is_alive(), "the request did not finish"
        if "error" in out:
            raise out["error"]
        return out["value"]

    return join


def wait_until(predicate, what, timeout=30.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


def waiting_workers(http, queue):
    return http.get(f"/v1/queues/{queue}").json()["waiting_workers"]


# -- health, routes ---------------------------------------------------------------------


def test_health_answers(http):
    r = http.get("/v1/health")
    assert r.status_code == 200
    assert r.json()["status"] == "ok" and r.json()["version"]


def test_unknown_routes_and_methods_are_json_errors(http):
    r = http.get("/v1/nope")
    assert r.status_code == 404 and error_code(r) == "no_such_route"
    r = http.request("PUT", "/v1/lease")
    assert r.status_code == 405 and error_code(r) == "method_not_allowed"


def test_every_route_of_the_openapi_description_is_served(http):
    doc = json.loads((REPO / "docs" / "openapi.json").read_text())
    assert doc["openapi"].startswith("3.")
    for path, item in doc["paths"].items():
        for method in item:
            concrete = path.replace("{queue}", "q").replace("{id}", "1").replace("{worker}", "1")
            # A body only where the route reads one: a body a handler leaves unread can make
            # the server close the kept-alive connection, and the next request would race it.
            body = b"{}" if method == "post" else None
            r = http.request(method.upper(), concrete, data=body)
            # A real route answers with its own status, never the router's refusals.
            if r.status_code in (404, 405):
                assert error_code(r) not in ("no_such_route", "method_not_allowed"), (method, path)
            assert r.headers["content-type"].startswith("application/json"), (method, path)


# -- put and get ------------------------------------------------------------------------


def test_put_with_defaults_and_describe(http):
    r = http.post("/v1/queues/emails/jobs", json={"body": "hello", "attributes": {"to": ["a"]}})
    assert r.status_code == 201
    put = r.json()
    assert put["queue"] == "emails" and put["state"] == "ready"
    job = http.get(f"/v1/jobs/{put['id']}").json()
    assert job["id"] == put["id"] and job["queue"] == "emails" and job["state"] == "ready"
    assert job["priority"] == 1024 and job["ttr"] == 60 and job["delay"] == 0
    assert job["attempts"] == 0 and job["durable"] is True and job["watchers"] == 0
    assert job["attributes"] == {"to": ["a"]}
    assert job["body_preview"] == "hello" and job["body_size"] == 5
    assert job["body_truncated"] is False and job["time_left_ms"] is None


def test_put_with_priority_delay_ttr_and_binary_body(http):
    raw = bytes(range(256))
    id_ = http.put_job("bin", body_base64=base64.b64encode(raw).decode(), priority=7,
                       delay=100, ttr=3)
    job = http.get(f"/v1/jobs/{id_}").json()
    assert job["state"] == "delayed" and job["priority"] == 7 and job["ttr"] == 3
    assert job["delay"] == 100 and 0 < job["time_left_ms"] <= 100_000
    assert base64.b64decode(job["body_preview_base64"]) == raw
    assert job["body_size"] == 256 and job["body_truncated"] is False


def test_a_long_body_is_previewed(http):
    id_ = http.put_job("long", body="é" * 300)
    job = http.get(f"/v1/jobs/{id_}").json()
    assert job["body_preview"] == "é" * 128  # 256 bytes, cut at a character boundary
    assert job["body_size"] == 600 and job["body_truncated"] is True


def test_put_refusals(http):
    cases = [
        (b"not json", "bad_json"),
        (b'{"body": 1}', "bad_json"),
        (b'{"priority": -1}', "bad_json"),
        (b'{"priority": 4294967296}', "bad_json"),
        (b'{"surprise": true}', "bad_json"),
        (b'{"body": "a", "body_base64": "YQ=="}', "bad_request"),
        (b'{"body_base64": "***"}', "bad_request"),
    ]
    for data, code in cases:
        r = http.request("POST", "/v1/queues/q/jobs", data=data)
        assert r.status_code == 400 and error_code(r) == code, data
    for bad in ["a%20b", "a%0Ab"]:
        r = http.request("POST", f"/v1/queues/{bad}/jobs", json={})
        assert r.status_code == 400 and error_code(r) == "bad_queue_name", bad
    assert http.get("/v1/queues/q").json()["total_jobs"] == 0, "nothing half-applied"


def test_an_empty_body_puts_an_empty_job(http):
    r = http.request("POST", "/v1/queues/q/jobs")
    assert r.status_code == 201
    assert http.get(f"/v1/jobs/{r.json()['id']}").json()["body_size"] == 0


def test_get_refusals(http):
    r = http.get("/v1/jobs/999")
    assert r.status_code == 404 and error_code(r) == "not_found"
    for bad in ["abc", "0", "-1", "99999999999999999999999"]:
        r = http.get(f"/v1/jobs/{bad}")
        assert r.status_code == 400 and error_code(r) == "bad_request", bad


def test_puts_are_refused_while_draining(http):
    os.kill(http.pid, signal.SIGUSR1)
    wait_until(lambda: http.get("/v1/health").json()["status"] == "draining", "drain mode")
    r = http.post("/v1/queues/q/jobs", json={"body": "x"})
    assert r.status_code == 503 and error_code(r) == "draining"


# -- delete -------------------------------------------------------------------------------


def test_delete_a_job_nobody_holds(http):
    id_ = http.put_job("q", body="x")
    r = http.delete(f"/v1/jobs/{id_}")
    assert r.status_code == 200 and r.json() == {"id": id_, "deleted": True}
    assert error_code(http.get(f"/v1/jobs/{id_}")) == "not_found"
    r = http.delete(f"/v1/jobs/{id_}")
    assert r.status_code == 404 and error_code(r) == "not_found"


def test_delete_of_a_leased_job_needs_its_holder(http):
    id_ = http.put_job("q", body="x")
    lease = http.lease("q")
    w, token = lease["worker"], lease["job"]["token"]
    r = http.delete(f"/v1/jobs/{id_}")
    assert r.status_code == 409 and error_code(r) == "leased"
    r = http.delete(f"/v1/jobs/{id_}", params={"worker": w, "token": token + 1})
    assert r.status_code == 409 and error_code(r) == "stale_token"
    other = http.post("/v1/workers").json()["worker"]
    r = http.delete(f"/v1/jobs/{id_}", params={"worker": other, "token": token})
    assert r.status_code == 409 and error_code(r) == "not_leased"
    r = http.delete(f"/v1/jobs/{id_}", params={"worker": "nobody", "token": token})
    assert r.status_code == 404 and error_code(r) == "unknown_worker"
    r = http.delete(f"/v1/jobs/{id_}", params={"worker": w, "token": token})
    assert r.status_code == 200


# -- lease ------------------------------------------------------------------------------


def test_lease_hands_out_the_most_urgent_job_of_its_queues_with_a_token(http):
    http.put_job("a", body="low", priority=10)
    urgent = http.put_job("b", body="urgent", priority=1, attributes={"k": "v"})
    got = http.lease("a", "b", lease_ms=5000)
    job = got["job"]
    assert job["id"] == urgent and job["queue"] == "b" and job["body"] == "urgent"
    assert job["token"] == 1 and job["priority"] == 1 and job["attributes"] == {"k": "v"}
    assert 0 < job["lease_ms"] <= 5000
    desc = http.get(f"/v1/jobs/{urgent}").json()
    assert desc["state"] == "reserved" and desc["attempts"] == 1
    assert desc["time_left_ms"] <= 5000
    # The same worker leases again.
    again = http.lease("a", "b", worker=got["worker"])
    assert again["worker"] == got["worker"] and again["job"]["body"] == "low"
    assert http.lease("a", "b", worker=got["worker"])["job"] is None


def test_lease_without_wait_answers_at_once_with_no_job(http):
    got = http.lease("empty")
    assert got["job"] is None and got["worker"]


def test_long_poll_is_served_by_a_later_put(http):
    w = http.post("/v1/workers").json()["worker"]
    join = in_thread(lambda: http.lease("later", worker=w, wait_ms=30_000))
    wait_until(lambda: waiting_workers(http, "later") == 1, "the lease to wait")
    id_ = http.put_job("later", body="now")
    got = join()
    assert got["job"]["id"] == id_ and got["job"]["token"] == 1
    assert waiting_workers(http, "later") == 0


def test_long_poll_times_out_with_no_job(http):
    got = http.lease("never", wait_ms=200)
    assert got["job"] is None
    assert http.get("/v1/queues/never").json()["waiting_workers"] == 0


def test_a_worker_waits_once_at_a_time(http):
    w = http.post("/v1/workers").json()["worker"]
    join = in_thread(lambda: http.lease("busy", worker=w, wait_ms=30_000))
    wait_until(lambda: waiting_workers(http, "busy") == 1, "the lease to wait")
    r = requests.post(http.url("/v1/lease"), json={"queues": ["busy"], "worker": w}, timeout=30)
    assert r.status_code == 409 and error_code(r) == "worker_busy"
    http.put_job("busy", body="x")
    assert join()["job"]["body"] == "x"


def test_a_client_that_hangs_up_mid_poll_leaves_no_wait_behind(http):
    w = http.post("/v1/workers").json()["worker"]
    with pytest.raises(requests.exceptions.ReadTimeout):
        requests.post(http.url("/v1/lease"), json={"queues": ["gone"], "worker": w,
                                                   "wait_ms": 30_000}, timeout=0.5)
    wait_until(lambda: waiting_workers(http, "gone") == 0, "the abandoned wait to end")
    id_ = http.put_job("gone", body="x")
    assert http.get(f"/v1/jobs/{id_}").json()["state"] == "ready"
    assert http.lease("gone", worker=w)["job"]["id"] == id_, "the worker is still usable"


def test_lease_refusals(http):
    r = http.post("/v1/lease", json={"queues": ["q"], "worker": "nobody"})
    assert r.status_code == 404 and error_code(r) == "unknown_worker"
    for body, code in [({"queues": []}, "bad_request"), ({}, "bad_json"),
                       ({"queues": ["q"], "lease_ms": 0}, "bad_request"),
                       ({"queues": ["a b"]}, "bad_queue_name")]:
        r = http.post("/v1/lease", json=body)
        assert r.status_code == 400 and error_code(r) == code, body


# -- the holder's calls -----------------------------------------------------------------


def test_complete_answers_the_waiter_with_the_result(http):
    id_ = http.put_job("q", body="in", priority=1)
    http.put_job("q", body="keeps the queue (and its counters) alive")
    join = in_thread(lambda: http.get(f"/v1/jobs/{id_}/result", params={"wait_ms": 30_000}))
    wait_until(lambda: http.get(f"/v1/jobs/{id_}").json()["watchers"] == 1, "the watch")
    lease = http.lease("q")
    r = http.post(f"/v1/jobs/{id_}/complete", json={"worker": lease["worker"],
                                                    "token": lease["job"]["token"],
                                                    "result": "out"})
    assert r.status_code == 200 and r.json() == {"id": id_, "status": "ok"}
    res = join()
    assert res.status_code == 200
    assert res.json() == {"id": id_, "ended": True, "status": "ok", "result": "out"}
    assert error_code(http.get(f"/v1/jobs/{id_}")) == "not_found"
    counts = http.get("/v1/queues/q").json()
    assert counts["total_ok"] == 1 and counts["reserved"] == 0


def test_a_binary_result_travels_as_base64(http):
    id_ = http.put_job("q")
    join = in_thread(lambda: http.get(f"/v1/jobs/{id_}/result", params={"wait_ms": 30_000}))
    wait_until(lambda: http.get(f"/v1/jobs/{id_}").json()["watchers"] == 1, "the watch")
    lease = http.lease("q")
    http.post(f"/v1/jobs/{id_}/complete", json={"worker": lease["worker"], "token": 1,
                                                "result_base64": "AP8="})
    assert join().json()["result_base64"] == "AP8="


def test_fail_answers_the_waiter_with_the_error(http):
    id_ = http.put_job("q", body="in", priority=1)
    http.put_job("q", body="keeps the queue (and its counters) alive")
    join = in_thread(lambda: http.get(f"/v1/jobs/{id_}/result", params={"wait_ms": 30_000}))
    # The waiter must be watching before the job ends (ended jobs are not kept).
    wait_until(lambda: http.get(f"/v1/jobs/{id_}").json()["watchers"] == 1, "the watch")
    lease = http.lease("q")
    r = http.post(f"/v1/jobs/{id_}/fail", json={"worker": lease["worker"], "token": 1,
                                                "error": "boom"})
    assert r.status_code == 200 and r.json()["status"] == "failed"
    assert join().json() == {"id": id_, "ended": True, "status": "failed", "result": "",
                             "error": "boom"}
    assert http.get("/v1/queues/q").json()["total_failed"] == 1


def test_release_gives_the_job_back_with_a_new_priority_or_a_delay(http):
    id_ = http.put_job("q", body="x", priority=5)
    lease = http.lease("q")
    w = lease["worker"]
    r = http.post(f"/v1/jobs/{id_}/release", json={"worker": w, "token": 1, "priority": 3})
    assert r.status_code == 200 and r.json() == {"id": id_, "state": "ready"}
    job = http.get(f"/v1/jobs/{id_}").json()
    assert job["state"] == "ready" and job["priority"] == 3 and job["releases"] == 1
    again = http.lease("q", worker=w)["job"]
    assert again["token"] == 2, "every lease has a new token"
    r = http.post(f"/v1/jobs/{id_}/release", json={"worker": w, "token": 1})
    assert r.status_code == 409 and error_code(r) == "stale_token"
    r = http.post(f"/v1/jobs/{id_}/release", json={"worker": w, "token": 2, "delay": 60})
    assert r.json()["state"] == "delayed"
    assert http.get(f"/v1/jobs/{id_}").json()["priority"] == 3, "unchanged when absent"


def test_heartbeat_extends_the_lease(http):
    id_ = http.put_job("q", body="x", ttr=100)
    lease = http.lease("q", lease_ms=1000)
    w = lease["worker"]
    first = lease["job"]["deadline_ms"]
    r = http.post(f"/v1/jobs/{id_}/heartbeat", json={"worker": w, "token": 1,
                                                     "lease_ms": 50_000})
    assert r.status_code == 200
    assert r.json()["deadline_ms"] > first and 0 < r.json()["lease_ms"] <= 50_000
    r = http.post(f"/v1/jobs/{id_}/heartbeat", json={"worker": w, "token": 1})
    assert 50_000 < r.json()["lease_ms"] <= 100_000, "the job's ttr when absent"
    r = http.post(f"/v1/jobs/{id_}/heartbeat", json={"worker": w, "token": 1, "lease_ms": 0})
    assert r.status_code == 400 and error_code(r) == "bad_request"


def test_an_expired_lease_requeues_once_and_its_token_is_refused(http):
    id_ = http.put_job("q", body="x")
    first = http.lease("q", lease_ms=100)
    a = first["worker"]
    wait_until(lambda: http.get(f"/v1/jobs/{id_}").json()["state"] == "ready", "the expiry")
    desc = http.get(f"/v1/jobs/{id_}").json()
    assert desc["timeouts"] == 1
    # The token still matches the attempt, but the lease is gone.
    r = http.post(f"/v1/jobs/{id_}/complete", json={"worker": a, "token": 1})
    assert r.status_code == 409 and error_code(r) == "not_leased"
    second = http.lease("q", lease_ms=30_000)
    assert second["job"]["token"] == 2
    for call in ["complete", "fail", "heartbeat", "release"]:
        r = http.post(f"/v1/jobs/{id_}/{call}", json={"worker": a, "token": 1})
        assert r.status_code == 409 and error_code(r) == "stale_token", call
    r = http.post(f"/v1/jobs/{id_}/complete", json={"worker": second["worker"], "token": 2})
    assert r.status_code == 200


def test_holder_call_refusals(http):
    id_ = http.put_job("q", body="x")
    lease = http.lease("q")
    w = lease["worker"]
    for call in ["complete", "fail", "heartbeat", "release"]:
        r = http.post(f"/v1/jobs/{id_}/{call}", json={"worker": "nobody", "token": 1})
        assert r.status_code == 404 and error_code(r) == "unknown_worker", call
        r = http.post(f"/v1/jobs/{id_}/{call}", json={"worker": w})
        assert r.status_code == 400 and error_code(r) == "bad_json", call
        r = http.post(f"/v1/jobs/12345/{call}", json={"worker": w, "token": 1})
        assert r.status_code == 404 and error_code(r) == "not_found", call
        r = http.post(f"/v1/jobs/x/{call}", json={"worker": w, "token": 1})
        assert r.status_code == 400 and error_code(r) == "bad_request", call


# -- results ----------------------------------------------------------------------------


def test_result_of_a_job_that_does_not_end_in_time(http):
    id_ = http.put_job("q", body="x")
    r = http.get(f"/v1/jobs/{id_}/result")
    assert r.json() == {"id": id_, "ended": False, "state": "ready"}
    r = http.get(f"/v1/jobs/{id_}/result", params={"wait_ms": 100})
    assert r.json() == {"id": id_, "ended": False, "state": "ready"}
    r = http.get("/v1/jobs/999/result", params={"wait_ms": 100})
    assert r.status_code == 404 and error_code(r) == "not_found"


def test_a_deleted_job_answers_its_waiter(http):
    id_ = http.put_job("q", body="x")
    join = in_thread(lambda: http.get(f"/v1/jobs/{id_}/result", params={"wait_ms": 30_000}))
    wait_until(lambda: http.get(f"/v1/jobs/{id_}").json()["watchers"] == 1, "the watch")
    http.delete(f"/v1/jobs/{id_}")
    r = join()
    assert r.status_code == 200
    assert r.json() == {"id": id_, "ended": True, "status": "deleted"}


# -- queues -----------------------------------------------------------------------------


def test_queue_counts_per_state(http):
    http.put_job("c", body="1", priority=1)
    http.put_job("c", body="2", priority=2000)
    http.put_job("c", body="3", delay=100)
    http.lease("c")
    c = http.get("/v1/queues/c").json()
    assert (c["ready"], c["urgent"], c["reserved"], c["delayed"], c["buried"]) == (1, 0, 1, 1, 0)
    assert c["total_jobs"] == 3 and c["name"] == "c" and c["paused"] is False
    z = http.get("/v1/queues/nothing-here").json()
    assert z["ready"] == 0 and z["total_jobs"] == 0
    r = http.get("/v1/queues/a%20b")
    assert r.status_code == 400 and error_code(r) == "bad_queue_name"


def test_queues_are_listed_in_name_order_a_page_at_a_time(http):
    for q in ["q3", "q1", "q2"]:
        http.put_job(q)
    page = http.get("/v1/queues", params={"limit": 2}).json()
    assert [q["name"] for q in page["queues"]] == ["default", "q1"] and page["next"] == "q1"
    page = http.get("/v1/queues", params={"limit": 2, "after": page["next"]}).json()
    assert [q["name"] for q in page["queues"]] == ["q2", "q3"] and page["next"] is None
    r = http.get("/v1/queues", params={"limit": 0})
    assert r.status_code == 400 and error_code(r) == "bad_request"


def test_jobs_are_listed_in_order_a_page_at_a_time(http):
    ids = [http.put_job("l", body=f"b{i}", priority=p) for i, p in enumerate([5, 1, 3, 1])]
    http.put_job("l", body="later", delay=100)
    seen, cursor = [], None
    while True:
        params = {"limit": 3, **({"cursor": cursor} if cursor else {})}
        page = http.get("/v1/queues/l/jobs", params=params).json()
        assert page["state"] == "ready"
        seen += [(j["id"], j["priority"]) for j in page["jobs"]]
        cursor = page["next"]
        if cursor is None:
            break
    assert seen == [(ids[1], 1), (ids[3], 1), (ids[2], 3), (ids[0], 5)]
    delayed = http.get("/v1/queues/l/jobs", params={"state": "delayed"}).json()
    assert [j["body_preview"] for j in delayed["jobs"]] == ["later"]
    http.lease("l")
    reserved = http.get("/v1/queues/l/jobs", params={"state": "reserved"}).json()
    assert [j["id"] for j in reserved["jobs"]] == [ids[1]]
    assert http.get("/v1/queues/none/jobs").json()["jobs"] == []
    for params in [{"state": "done"}, {"cursor": "x"}, {"limit": 1001}, {"extra": 1}]:
        r = http.get("/v1/queues/l/jobs", params=params)
        assert r.status_code == 400 and error_code(r) == "bad_request", params


# -- workers ----------------------------------------------------------------------------


def test_deleting_a_worker_gives_its_jobs_back(http):
    r = http.post("/v1/workers")
    assert r.status_code == 201 and r.json()["idle_timeout_ms"] == 60_000
    w = r.json()["worker"]
    id_ = http.put_job("q", body="x")
    http.lease("q", worker=w)
    r = http.delete(f"/v1/workers/{w}")
    assert r.status_code == 200 and r.json() == {"worker": w, "released": 1}
    wait_until(lambda: http.get(f"/v1/jobs/{id_}").json()["state"] == "ready", "the release")
    r = http.delete(f"/v1/workers/{w}")
    assert r.status_code == 404 and error_code(r) == "unknown_worker"
    r = http.post("/v1/lease", json={"queues": ["q"], "worker": w})
    assert error_code(r) == "unknown_worker"


def test_an_idle_worker_expires_but_not_while_it_holds_a_lease(start_http):
    http = start_http(["--http-worker-idle-ms", "200"])
    idle = http.post("/v1/workers").json()["worker"]
    id_ = http.put_job("q", body="x")
    holder = http.lease("q", lease_ms=60_000)
    assert http.get("/v1/health").json()["workers"] == 2
    wait_until(lambda: http.get("/v1/health").json()["workers"] == 1, "the idle one to expire")
    r = http.post("/v1/lease", json={"queues": ["none"], "worker": idle})
    assert r.status_code == 404 and error_code(r) == "unknown_worker"
    time.sleep(0.5)
    assert http.get("/v1/health").json()["workers"] == 1
    r = http.post(f"/v1/jobs/{id_}/complete", json={"worker": holder["worker"], "token": 1})
    assert r.status_code == 200, "a worker holding a lease stays"


def test_listings_preview_bodies_kept_only_in_the_log(start_http):
    """Bodies live only in the log once written (the default; no body kept in memory here):
    a queue's page and the dashboard's job view read them back for their previews."""
    srv = start_http(extra=["--hot-body-bytes", "0"])
    ids = [srv.put_job("logged", body=f"body {i}") for i in range(5)]
    time.sleep(0.3)  # the writer reports where the bodies are; the engine drops its copies
    page = srv.get("/v1/queues/logged/jobs").json()
    assert [(j["id"], j["body_preview"]) for j in page["jobs"]] == [
        (id_, f"body {i}") for i, id_ in enumerate(ids)
    ]
    job = srv.get(f"/admin/api/jobs/{ids[2]}").json()
    assert job["body_preview"] == "body 2"
