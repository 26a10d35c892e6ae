"""Every bound of the flow routes (docs/http-api.md, Limits), at its edge: the largest
accepted value passes, one more is refused with its documented code."""

from __future__ import annotations

import time

from http_testlib import error_code, http, start_http  # noqa: F401  (fixtures)

FIELDS = 262144  # bytes of params/result once serialized


def padded(n):
    """An object whose JSON is exactly n bytes: {"p":"xxx..."}."""
    return {"p": "x" * (n - len('{"p":""}'))}


def test_definition_size_names_and_priorities_at_their_edges(http):
    base = {"name": "f", "stages": [{"name": "a", "priorities": 100}]}
    assert http.post("/v1/flows", json=base).status_code == 201
    for bad in ({"name": "f", "stages": [{"name": "a", "priorities": 101}]},
                {"name": "n" * 129, "stages": [{"name": "a"}]},
                {"name": "f", "stages": [{"name": f"s{i}"} for i in range(65)]}):
        r = http.post("/v1/flows", json=bad)
        assert (r.status_code, error_code(r)) == (400, "bad_definition"), bad
    assert http.post("/v1/flows", json={"name": "n" * 128, "stages": [{"name": "a"}]}).status_code == 201
    big = {"name": "g", "stages": [{"name": "a", "attributesToGet": ["a" * 120] * 256}]}
    assert len(str(big)) < 65536
    assert http.post("/v1/flows", json=big).status_code == 201
    huge = {"name": "g", "stages": [{"name": "a", "attributesToGet": ["a" * 128] * 600}]}
    r = http.post("/v1/flows", json=huge)
    assert (r.status_code, error_code(r)) == (400, "bad_definition")


def test_params_result_and_error_sizes(http):
    http.post("/v1/flows", json={"name": "f", "stages": [{"name": "a", "maxRetries": 5}]})
    r = http.post("/v1/flows/f/jobs", json={"params": padded(FIELDS)})
    assert r.status_code == 201, r.text
    r = http.post("/v1/flows/f/jobs", json={"params": padded(FIELDS + 1)})
    assert (r.status_code, error_code(r)) == (413, "fields_too_big")
    lease = http.post("/v1/stages/a/lease", json={}).json()
    w, job = lease["worker"], lease["job"]
    r = http.post(f"/v1/flow-jobs/{job['id']}/complete",
                  json={"worker": w, "token": job["token"], "result": padded(FIELDS + 1)})
    assert (r.status_code, error_code(r)) == (413, "fields_too_big")
    r = http.post(f"/v1/flow-jobs/{job['id']}/fail",
                  json={"worker": w, "token": job["token"], "error": "e" * (FIELDS + 1)})
    assert (r.status_code, error_code(r)) == (400, "bad_request")
    r = http.post(f"/v1/flow-jobs/{job['id']}/fail",
                  json={"worker": w, "token": job["token"], "error": "e" * FIELDS})
    assert r.status_code == 200, r.text


def test_idempotency_key_lookup_entries_and_delay_bounds(http):
    http.post("/v1/flows", json={"name": "f", "lookupAttributes": ["ids"], "stages": [{"name": "a"}]})
    assert http.post("/v1/flows/f/jobs", json={"idempotency_key": "k" * 200}).status_code == 201
    for key in ("k" * 201, ""):
        r = http.post("/v1/flows/f/jobs", json={"idempotency_key": key})
        assert (r.status_code, error_code(r)) == (400, "bad_request")
    assert http.post("/v1/flows/f/jobs", json={"params": {"ids": list(range(1000))}}).status_code == 201
    r = http.post("/v1/flows/f/jobs", json={"params": {"ids": list(range(1001))}})
    assert (r.status_code, error_code(r)) == (400, "bad_request")
    lease = http.post("/v1/stages/a/lease", json={}).json()
    w, job = lease["worker"], lease["job"]
    year = 366 * 86_400_000
    now = int(time.time() * 1000)
    r = http.post(f"/v1/flow-jobs/{job['id']}/delay",
                  json={"worker": w, "token": job["token"], "ready_at_ms": now + year + 60_000})
    assert (r.status_code, error_code(r)) == (400, "bad_request")
    r = http.post(f"/v1/flow-jobs/{job['id']}/delay",
                  json={"worker": w, "token": job["token"], "ready_at_ms": now + year - 60_000})
    assert r.status_code == 200, r.text


def test_lease_bounds_on_a_stage(http):
    http.post("/v1/flows", json={"name": "f", "stages": [{"name": "a"}]})
    for body in ({"wait_ms": 60001}, {"lease_ms": 0}, {"lease_ms": 86_400_001}):
        r = http.post("/v1/stages/a/lease", json=body)
        assert (r.status_code, error_code(r)) == (400, "bad_request"), body
    assert http.post("/v1/stages/a/lease", json={"wait_ms": 0, "lease_ms": 86_400_000}).status_code == 200
