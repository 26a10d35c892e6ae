"""`GET /v1/stages/{stage}/jobs` against the real server: a stage's jobs in hand-out order
(waiting by priority then age, delayed by ready time, leased), the per-state limit and its
bounds."""

from __future__ import annotations

import time

from http_testlib import error_code, http, start_http  # noqa: F401  (fixtures)

FLOW = {"name": "listed", "stages": [{"name": "line", "priorities": 3, "delayable": True}]}


def test_a_stage_lists_its_jobs_in_hand_out_order(http):
    assert http.post("/v1/flows", json=FLOW).status_code == 201
    ids = [http.post("/v1/flows/listed/jobs", json={"priority": p}).json()["id"] for p in (3, 1, 2, 1)]
    leased = http.post("/v1/stages/line/lease", json={}).json()
    assert leased["job"]["id"] == ids[1], "priority 1, oldest first"
    worker, job = leased["worker"], leased["job"]
    again = http.post("/v1/stages/line/lease", json={"worker": worker}).json()["job"]
    ready_at = int(time.time() * 1000) + 600_000
    r = http.post(f"/v1/flow-jobs/{again['id']}/delay",
                  json={"worker": worker, "token": again["token"], "ready_at_ms": ready_at})
    assert r.status_code == 200, r.text
    listing = http.get("/v1/stages/line/jobs").json()
    assert listing["stage"] == "line"
    assert [(j["id"], j["state"]) for j in listing["jobs"]] == [
        (ids[2], "waiting"), (ids[0], "waiting"), (ids[3], "delayed"), (job["id"], "leased")]
    delayed = listing["jobs"][2]
    assert delayed["ready_at_ms"] == ready_at and listing["jobs"][0]["ready_at_ms"] is None
    assert [j["priority"] for j in listing["jobs"]] == [2, 3, 1, 1]
    limited = http.get("/v1/stages/line/jobs?limit=1").json()["jobs"]
    assert [j["id"] for j in limited] == [ids[2], ids[3], job["id"]], "one of each state"


def test_an_unknown_stage_lists_nothing_and_limits_are_checked(http):
    assert http.get("/v1/stages/nothing-here/jobs").json() == {"stage": "nothing-here", "jobs": []}
    for bad in ("0", "1001", "x"):
        r = http.get(f"/v1/stages/line/jobs?limit={bad}")
        assert r.status_code == 400 and error_code(r) in ("bad_request", "bad_json"), r.text
    r = http.get("/v1/stages/line/jobs?other=1")
    assert r.status_code == 400
