"""Flows over the HTTP API against the real server: declare, create, lease per stage with
fencing tokens, complete with routing and fan-out/fan-in, fail with retries, delay, lease
expiry, delete, lookups, positions and counts; restart and kill -9 in the middle of a flow.
Times are only bounds here (lease lengths, long-poll waits), never measured."""

from __future__ import annotations

import time

from http_testlib import error_code, http, start_http  # noqa: F401  (fixtures)

LINEAR = {
    "name": "lin",
    "lookupAttributes": ["userId", "roleIds"],
    "stages": [
        {"name": "prep", "next": "check", "attributesToGet": ["userId"]},
        {"name": "check", "next": "result", "priorities": 2, "maxRetries": 1},
        {"name": "result"},
    ],
}

FANOUT = {
    "name": "fan",
    "stages": [
        {"name": "plan", "next": "gather"},
        {"name": "gather", "next": "report", "children": [{"name": "req", "attributesToGet": ["n"]}]},
        {"name": "report", "attributesToGet": ["children:gather:results"]},
    ],
}


def declare(srv, definition):
    r = srv.post("/v1/flows", json=definition)
    assert r.status_code in (200, 201), r.text
    return r.json()


def create(srv, flow, **fields):
    r = srv.post(f"/v1/flows/{flow}/jobs", json=fields)
    assert r.status_code == 201, r.text
    return r.json()["id"]


def lease(srv, stage, **fields):
    r = srv.post(f"/v1/stages/{stage}/lease", json=fields)
    assert r.status_code == 200, r.text
    return r.json()


def complete(srv, w, job, result=None):
    r = srv.post(f"/v1/flow-jobs/{job['id']}/complete",
                 json={"worker": w, "token": job["token"], "result": result or {}})
    assert r.status_code == 200, r.text
    return r.json()


def get(srv, job_id, query=""):
    r = srv.get(f"/v1/flow-jobs/{job_id}{query}")
    assert r.status_code == 200, r.text
    return r.json()


def run_stage(srv, stage, result=None):
    got = lease(srv, stage)
    assert got["job"] is not None, stage
    return complete(srv, got["worker"], got["job"], result)


def test_a_job_runs_through_a_linear_flow(http):
    assert declare(http, LINEAR) == {"name": "lin", "replaced": False}
    assert declare(http, LINEAR)["replaced"] is True
    job_id = create(http, "lin", params={"userId": "u1", "correlationId": "c"})
    assert job_id.startswith("lin:") and len(job_id) == len("lin:") + 36
    got = lease(http, "prep", wait_ms=1000)
    job = got["job"]
    assert job["id"] == job_id and job["stage"] == "prep" and job["token"] >= 1
    assert job["input"] == {"id": job_id, "flowName": "lin", "priority": 1,
                            "correlationId": "c", "userId": "u1", "delay": None, "retries": 0}
    assert complete(http, got["worker"], job, {"prepared": True}) == {
        "id": job_id, "stage": "check", "status": "waiting"}
    run_stage(http, "check", {"nextQueue": "result", "checked": 1})
    assert run_stage(http, "result")["status"] == "done"
    fields = get(http, job_id)["fields"]
    assert fields["done"] is True and fields["prepared"] is True and fields["checked"] == 1
    assert fields["completed-queue"] == "result"
    assert get(http, job_id, "?fields=done,userId")["fields"] == {"done": True, "userId": "u1"}
    counts = {s["stage"]: s for s in http.get("/v1/flows/lin").json()["stages"]}
    assert counts["result"]["done"] == 1


def test_refusals_are_json_with_stable_codes_and_change_nothing(http):
    bad = {"name": "bad", "stages": [{"name": "a", "next": "nowhere"}]}
    r = http.post("/v1/flows", json=bad)
    assert (r.status_code, error_code(r)) == (400, "bad_definition")
    assert "nowhere" in r.json()["error"]["message"]
    assert http.get("/v1/flows").json() == {"flows": []}
    r = http.post("/v1/flows/nope/jobs", json={})
    assert (r.status_code, error_code(r)) == (404, "unknown_flow")
    declare(http, LINEAR)
    r = http.post("/v1/flows/lin/jobs", json={"priority": 2})
    assert (r.status_code, error_code(r)) == (400, "bad_priority")
    r = http.post("/v1/flows/lin/jobs", json={"params": [1]})
    assert (r.status_code, error_code(r)) == (400, "bad_json")
    r = http.post("/v1/flows/lin/jobs", data=b"{")
    assert (r.status_code, error_code(r)) == (400, "bad_json")
    r = http.post("/v1/stages/nope/lease", json={})
    assert (r.status_code, error_code(r)) == (404, "unknown_stage")
    job_id = create(http, "lin")
    got = lease(http, "prep")
    w, job = got["worker"], got["job"]
    stale = {"worker": w, "token": job["token"] + 7, "result": {"x": 1}}
    r = http.post(f"/v1/flow-jobs/{job_id}/complete", json=stale)
    assert (r.status_code, error_code(r)) == (409, "stale_token")
    r = http.post(f"/v1/flow-jobs/{job_id}/complete",
                  json={"worker": w, "token": job["token"], "result": {"nextQueue": 3}})
    assert (r.status_code, error_code(r)) == (400, "bad_request")
    assert "x" not in get(http, job_id)["fields"]
    r = http.post(f"/v1/flow-jobs/{job_id}/complete",
                  json={"worker": w, "token": job["token"], "result": {"nextQueue": "gone"}})
    assert r.json()["status"] == "failed"
    assert "gone" in get(http, job_id)["fields"]["failedErrorMsg"]
    r = http.post("/v1/flows/lin/jobs", json={"params": {"big": "x" * (256 << 10)}})
    assert (r.status_code, error_code(r)) == (413, "fields_too_big")
    r = http.get("/v1/flow-jobs/lin:nope")
    assert (r.status_code, error_code(r)) == (404, "not_found")


def test_fan_out_and_fan_in_without_a_parent_worker(http):
    declare(http, FANOUT)
    parent = create(http, "fan")
    specs = [{"childName": "req", "n": n} for n in range(3)]
    out = run_stage(http, "plan", {"children:gather:params": specs})
    assert out["status"] == "waiting_children"
    seen = []
    for _ in range(3):
        got = lease(http, "gather:req")
        seen.append(got["job"]["input"]["n"])
        if got["job"]["input"]["n"] == 1:
            r = http.post(f"/v1/flow-jobs/{got['job']['id']}/fail",
                          json={"worker": got["worker"], "token": got["job"]["token"], "error": "no"})
            assert r.json()["status"] == "failed"
        else:
            complete(http, got["worker"], got["job"], {"done": True, "out": got["job"]["input"]["n"]})
    assert sorted(seen) == [0, 1, 2]
    got = lease(http, "report")
    results = got["job"]["input"]["children:gather:results"]
    assert [r.get("out") for r in results] == [0, None, 2]
    assert results[1]["failedErrorMsg"] == "no"
    view = get(http, parent, "?resolve_children=true")
    children = view["fields"]["children:gather:jobs"]
    assert [c["state"] for c in children] == ["done", "failed", "done"]


def test_lookups_positions_idempotency_and_delete(http):
    declare(http, LINEAR)
    a = create(http, "lin", params={"userId": 7, "roleIds": [1, 2]})
    b = create(http, "lin", params={"userId": "7"}, idempotency_key="k1")
    r = http.post("/v1/flows/lin/jobs", json={"idempotency_key": "k1"})
    assert (r.status_code, r.json()) == (200, {"id": b, "created": False})
    found = http.get("/v1/flows/lin/jobs?key=userId&value=7").json()["jobs"]
    assert [j["id"] for j in found] == [a, b]
    assert http.get(f"/v1/flow-jobs/{b}/position").json()["position"] == 2
    assert http.delete(f"/v1/flow-jobs/{a}").json() == {"id": a, "deleted": True}
    assert http.get(f"/v1/flow-jobs/{b}/position").json()["position"] == 1
    assert [j["id"] for j in http.get("/v1/flows/lin/jobs?key=roleIds&value=2").json()["jobs"]] == []
    r = http.delete(f"/v1/flow-jobs/{a}")
    assert (r.status_code, error_code(r)) == (404, "not_found")


def test_a_lease_runs_out_once_and_the_late_worker_is_refused(http):
    declare(http, {"name": "x", "stages": [{"name": "s", "maxRetries": 1, "leaseMs": 300}]})
    job_id = create(http, "x")
    first = lease(http, "s")
    # The engine's timer requeues it; a long-poll gets it back with the retry counted.
    second = lease(http, "s", wait_ms=10000)
    assert second["job"]["id"] == job_id and second["job"]["input"]["retries"] == 1
    assert second["job"]["token"] > first["job"]["token"]
    r = http.post(f"/v1/flow-jobs/{job_id}/complete",
                  json={"worker": first["worker"], "token": first["job"]["token"]})
    assert (r.status_code, error_code(r)) == (409, "stale_token")
    r = http.post(f"/v1/flow-jobs/{job_id}/heartbeat",
                  json={"worker": second["worker"], "token": second["job"]["token"], "lease_ms": 60000})
    assert r.status_code == 200, r.text
    assert complete(http, second["worker"], second["job"])["status"] == "done"


def test_a_delay_resumes_by_the_servers_timer(http):
    declare(http, {"name": "d", "stages": [{"name": "s"}]})
    job_id = create(http, "d")
    got = lease(http, "s")
    ready_at = int(time.time() * 1000) + 300
    r = http.post(f"/v1/flow-jobs/{job_id}/delay",
                  json={"worker": got["worker"], "token": got["job"]["token"],
                        "ready_at_ms": ready_at, "reason": "rate"})
    assert r.json()["status"] == "delayed"
    assert http.get(f"/v1/flow-jobs/{job_id}/position").json()["state"] == "delayed"
    again = lease(http, "s", wait_ms=10000)
    assert again["job"]["id"] == job_id and again["job"]["input"]["delay"] is True


def test_a_flow_survives_restart_and_kill_9_mid_flow(start_http, tmp_path):
    srv = start_http(data_dir=tmp_path / "data")
    declare(srv, LINEAR)
    declare(srv, FANOUT)
    lin = create(srv, "lin", params={"userId": "u"})
    run_stage(srv, "prep", {"a": 1})
    fan = create(srv, "fan")
    run_stage(srv, "plan", {"children:gather:params": [{"childName": "req", "n": 1},
                                                       {"childName": "req", "n": 2}]})
    child = lease(srv, "gather:req")
    complete(srv, child["worker"], child["job"], {"out": 1})
    leased = lease(srv, "check")  # leased when the server dies: handed out again after
    srv.kill9()
    srv = start_http(data_dir=tmp_path / "data")
    assert [f["name"] for f in srv.get("/v1/flows").json()["flows"]] == ["fan", "lin"]
    view = get(srv, lin)
    assert (view["stage"], view["state"], view["fields"]["a"]) == ("check", "waiting", 1)
    again = lease(srv, "check")
    assert again["job"]["id"] == lin and again["job"]["token"] > leased["job"]["token"]
    complete(srv, again["worker"], again["job"])
    assert run_stage(srv, "result")["status"] == "done"
    assert get(srv, fan)["state"] == "waiting_children"
    run_stage(srv, "gather:req", {"out": 2})
    got = lease(srv, "report")
    assert [r["out"] for r in got["job"]["input"]["children:gather:results"]] == [1, 2]
    complete(srv, got["worker"], got["job"])
    assert srv.stop() == 0
    srv = start_http(data_dir=tmp_path / "data")
    assert get(srv, fan)["fields"]["done"] is True
    assert get(srv, lin)["fields"]["done"] is True
    assert [j["id"] for j in srv.get("/v1/flows/lin/jobs?key=userId&value=u").json()["jobs"]] == [lin]


def test_flows_declared_in_the_config_file_serve_at_start(start_http, tmp_path):
    config = tmp_path / "jobyard.toml"
    config.write_text(
        "[[flows]]\n"
        'name = "cfg"\n'
        'lookupAttributes = ["u"]\n'
        "[[flows.stages]]\n"
        'name = "one"\n'
        'next = "two"\n'
        "[[flows.stages]]\n"
        'name = "two"\n'
        "priorities = 2\n")
    srv = start_http(extra=["--config", str(config)])
    assert [f["name"] for f in srv.get("/v1/flows").json()["flows"]] == ["cfg"]
    job_id = create(srv, "cfg", params={"u": "a"})
    run_stage(srv, "one")
    assert run_stage(srv, "two")["status"] == "done"
    assert get(srv, job_id)["fields"]["done"] is True


def test_a_bad_flow_in_the_config_stops_the_start_with_its_reason(tmp_path):
    import subprocess

    from jobyard_testlib import binary_path
    config = tmp_path / "jobyard.toml"
    config.write_text('[[flows]]\nname = "bad"\n[[flows.stages]]\nname = "a"\nnext = "b"\n')
    out = subprocess.run([str(binary_path()), "serve", "--config", str(config),
                          "--data-dir", str(tmp_path / "d"), "--http-listen", "off",
                          "--beanstalk-listen", "off", "--gearman-listen", "off"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode != 0
    assert '"b"' in out.stderr, out.stderr


def test_flow_jobs_survive_compaction(start_http, tmp_path):
    small = ["--segment-bytes", "65536", "--compact-min-bytes", "65536"]
    srv = start_http(extra=small, data_dir=tmp_path / "data")
    declare(srv, LINEAR)
    kept = [create(srv, "lin", params={"userId": f"u{i}", "pad": "p" * 200}) for i in range(50)]
    # Churn: many transitions on other jobs, so the log grows past the threshold often.
    for i in range(300):
        churn = create(srv, "lin", params={"pad": "c" * 300})
        srv.delete(f"/v1/flow-jobs/{churn}")
    deadline = time.monotonic() + 30
    snaps = lambda: list((tmp_path / "data").glob("snap-*"))  # noqa: E731
    while not snaps() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert snaps(), "a compaction ran"
    srv.kill9()
    srv = start_http(extra=small, data_dir=tmp_path / "data")
    for i, job_id in enumerate(kept):
        assert get(srv, job_id)["fields"]["userId"] == f"u{i}"
    assert [f["name"] for f in srv.get("/v1/flows").json()["flows"]] == ["lin"]
    found = srv.get("/v1/flows/lin/jobs?key=userId&value=u7").json()["jobs"]
    assert [j["id"] for j in found] == [kept[7]]


def test_plain_routes_cannot_touch_flow_stage_queues(http):
    declare(http, LINEAR)
    create(http, "lin")
    for path, body in (("/v1/queues/flows%2Fprep/jobs", {}), ("/v1/lease", {"queues": ["flows/prep"]})):
        r = http.post(path, json=body)
        assert (r.status_code, error_code(r)) == (400, "bad_queue_name"), path
    engine_id = http.get("/v1/queues/flows%2Fprep/jobs").json()["jobs"][0]["id"]
    r = http.delete(f"/v1/jobs/{engine_id}")
    assert (r.status_code, error_code(r)) == (400, "bad_request")
    assert lease(http, "prep")["job"] is not None


def test_a_finished_job_is_purged_after_its_retention_with_its_lookups(http):
    declare(http, {"name": "r", "retentionSec": 1, "lookupAttributes": ["u"],
                   "stages": [{"name": "only"}]})
    job_id = create(http, "r", params={"u": "x"})
    assert run_stage(http, "only")["status"] == "done"
    assert get(http, job_id)["fields"]["done"] is True  # kept after its end...
    deadline = time.monotonic() + 30
    while http.get(f"/v1/flow-jobs/{job_id}").status_code == 200 and time.monotonic() < deadline:
        time.sleep(0.1)
    r = http.get(f"/v1/flow-jobs/{job_id}")  # ...and purged by the server's own timer
    assert (r.status_code, error_code(r)) == (404, "not_found")
    assert http.get("/v1/flows/r/jobs?key=u&value=x").json()["jobs"] == []


def test_the_limiter_delays_a_job_instead_of_handing_it_out(http):
    declare(http, {"name": "lim", "stages": [
        {"name": "api", "limiter": {"reservoir": 1, "intervalMs": 3600000, "groupJobKey": "g"}}]})
    first = create(http, "lim", params={"g": "a"})
    second = create(http, "lim", params={"g": "a"})
    other = create(http, "lim", params={"g": "b"})
    assert lease(http, "api")["job"]["id"] == first
    assert lease(http, "api")["job"] is None  # over the limit: delayed, not handed out
    assert lease(http, "api")["job"]["id"] == other  # another group counts apart
    fields = get(http, second)["fields"]
    assert fields["delayReason"] == "rate limited" and fields["delay"] is True
    position = http.get(f"/v1/flow-jobs/{second}/position").json()
    assert position["state"] == "delayed" and position["ready_at_ms"] == fields["delayReadyTimestamp"]
