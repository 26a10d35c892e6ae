"""docs/openapi.json against the running server: every reply of a scenario that touches
each route has the shape its schema describes (required fields present, no field the
description does not name, types as described). With the route table test in
crates/http (every route described, every description served) this keeps the description
honest."""

from __future__ import annotations

import json
import re
from pathlib import Path

from http_testlib import http, start_http  # noqa: F401  (fixtures)

DOC = json.loads((Path(__file__).resolve().parents[2] / "docs" / "openapi.json").read_text())
TYPES = {"integer": int, "string": str, "boolean": bool, "array": list, "object": dict,
         "null": type(None)}


def resolve(schema):
    while "$ref" in schema:
        schema = DOC["components"]["schemas"][schema["$ref"].rsplit("/", 1)[1]]
    return schema


def check(value, schema, where):
    schema = resolve(schema)
    if "oneOf" in schema:
        errors = []
        for option in schema["oneOf"]:
            try:
                return check(value, option, where)
            except AssertionError as e:
                errors.append(str(e))
        raise AssertionError(f"{where}: matches no option: {errors}")
    kinds = schema.get("type")
    if kinds is not None:
        kinds = kinds if isinstance(kinds, list) else [kinds]
        ok = any(isinstance(value, TYPES[k]) and not (k == "integer" and isinstance(value, bool))
                 for k in kinds)
        assert ok, f"{where}: {value!r} is not {kinds}"
    if "enum" in schema:
        assert value in schema["enum"], f"{where}: {value!r} not in {schema['enum']}"
    if isinstance(value, dict) and "properties" in schema:
        for key in schema.get("required", []):
            assert key in value, f"{where}: required {key} missing"
        for key, v in value.items():
            assert key in schema["properties"], f"{where}: {key} is not described"
            check(v, schema["properties"][key], f"{where}.{key}")
    if isinstance(value, list) and "items" in schema:
        for i, item in enumerate(value):
            check(item, schema["items"], f"{where}[{i}]")


def template_of(path):
    for template in DOC["paths"]:
        pattern = "^" + re.sub(r"\{[^}]+\}", "[^/]+", template) + "$"
        if re.match(pattern, path):
            return template
    raise AssertionError(f"{path} is not described")


class Checked:
    """Makes requests and checks each reply against the description."""

    def __init__(self, http):
        self.http = http
        self.seen = set()

    def call(self, method, path, **kw):
        r = self.http.request(method, path, **kw)
        template = template_of(path.split("?")[0])
        op = DOC["paths"][template][method.lower()]
        assert str(r.status_code) in op["responses"], (method, path, r.status_code, r.text)
        schema = op["responses"][str(r.status_code)]["content"]["application/json"]["schema"]
        check(r.json(), schema, f"{method} {template} {r.status_code}")
        self.seen.add((method, template))
        return r.json()


def test_every_reply_matches_its_schema(http):
    c = Checked(http)
    c.call("GET", "/v1/health")
    c.call("GET", "/v1/cluster")
    w = c.call("POST", "/v1/workers")["worker"]
    id1 = c.call("POST", "/v1/queues/s1/jobs", json={"body": "a", "attributes": {"x": 1}})["id"]
    id2 = c.call("POST", "/v1/queues/s1/jobs", json={"body_base64": "AP8=", "delay": 100})["id"]
    c.call("GET", f"/v1/jobs/{id1}")
    c.call("GET", f"/v1/jobs/{id2}")
    c.call("GET", "/v1/jobs/999")
    c.call("GET", "/v1/queues")
    c.call("GET", "/v1/queues/s1")
    c.call("GET", "/v1/queues/s1/jobs?state=delayed")
    c.call("GET", f"/v1/jobs/{id1}/result?wait_ms=10")
    lease = c.call("POST", "/v1/lease", json={"queues": ["s1"], "worker": w, "lease_ms": 60000})
    assert lease["job"]["id"] == id1
    c.call("POST", "/v1/lease", json={"queues": ["s1"], "worker": w})
    c.call("POST", f"/v1/jobs/{id1}/heartbeat", json={"worker": w, "token": 1})
    c.call("POST", f"/v1/jobs/{id1}/release", json={"worker": w, "token": 1})
    c.call("POST", "/v1/lease", json={"queues": ["s1"], "worker": w})
    c.call("POST", f"/v1/jobs/{id1}/route", json={"worker": w, "token": 1, "queue": "s2"})
    c.call("POST", f"/v1/jobs/{id1}/route", json={"worker": w, "token": 2, "queue": "s2"})
    c.call("POST", "/v1/lease", json={"queues": ["s2"], "worker": w})
    c.call("POST", f"/v1/jobs/{id1}/complete", json={"worker": w, "token": 3, "result": "r"})
    id3 = c.call("POST", "/v1/queues/s3/jobs", json={})["id"]
    c.call("POST", "/v1/lease", json={"queues": ["s3"], "worker": w})
    c.call("POST", f"/v1/jobs/{id3}/fail", json={"worker": w, "token": 1, "error": "e"})
    c.call("DELETE", f"/v1/jobs/{id2}")
    c.call("DELETE", f"/v1/workers/{w}")
    c.call("DELETE", f"/v1/workers/{w}")
    c.call("POST", "/v1/queues/s1/jobs", data=b"{")
    c.call("PATCH", "/v1/queues/s9/policy", json={"rate_limit": "100/s", "pause_seconds": 60})
    c.call("GET", "/v1/queues/s9/policy")
    c.call("GET", "/v1/queues/s9")
    c.call("PATCH", "/v1/queues/s9/policy", json={"rate_limit": "fast"})
    c.call("PATCH", "/v1/queues/s9/policy", json={"rate_limit": None, "paused": False})
    dead_letter_scenario(c)
    flow_scenario(c)
    schedule_scenario(c)
    described = {(m.upper(), p) for p, item in DOC["paths"].items() for m in item}
    assert described == c.seen, described ^ c.seen


def dead_letter_scenario(c):
    """A retry policy's fields, and the dead-letter routes."""
    c.call("PATCH", "/v1/queues/s10/policy",
           json={"max_attempts": 1, "backoff": "exponential", "dead_letter": "s10-dead"})
    c.call("PATCH", "/v1/queues/s10/policy", json={"backoff": "linear"})
    w = c.call("POST", "/v1/workers")["worker"]
    job = c.call("POST", "/v1/queues/s10/jobs", json={})["id"]
    token = c.call("POST", "/v1/lease", json={"queues": ["s10"], "worker": w})["job"]["token"]
    c.call("POST", f"/v1/jobs/{job}/fail", json={"worker": w, "token": token, "error": "e"})
    c.call("GET", "/v1/queues/s10-dead/dead-letters")
    c.call("POST", "/v1/queues/s10-dead/dead-letters/retry", json={"ids": [job]})
    c.call("POST", "/v1/queues/s10-dead/dead-letters/retry", json={"ids": ["x"]})
    c.call("POST", "/v1/queues/s10-dead/dead-letters/discard")
    c.call("DELETE", f"/v1/workers/{w}")


def schedule_scenario(c):
    """Every schedule route."""
    c.call("PUT", "/v1/schedules/nightly",
           json={"queue": "reports", "cron": "0 3 * * *", "time_zone": "Europe/Berlin",
                 "body": "b", "overlap": "skip", "missed": "catch_up"})
    c.call("PUT", "/v1/schedules/nightly", json={"queue": "reports", "cron": "0 0 3 * * *"})
    c.call("PUT", "/v1/schedules/bad", json={"queue": "q", "interval": "30s", "cron": "* * * * *"})
    c.call("PUT", "/v1/schedules/big", json={"queue": "q", "interval": "30s", "body": "x" * 70000})
    c.call("GET", "/v1/schedules")
    c.call("GET", "/v1/schedules/nightly")
    c.call("GET", "/v1/schedules/nope")
    c.call("POST", "/v1/schedules/nightly/pause")
    c.call("POST", "/v1/schedules/nightly/resume")
    c.call("POST", "/v1/schedules/nope/pause")
    c.call("POST", "/v1/schedules/nope/resume")
    c.call("DELETE", "/v1/schedules/nightly")
    c.call("DELETE", "/v1/schedules/nightly")


def flow_scenario(c):
    """Every flow route, in a flow with a fan-out."""
    flow = {"name": "f", "lookupAttributes": ["u"], "stages": [
        {"name": "a", "next": "b"},
        {"name": "b", "next": "c", "children": [{"name": "k"}]},
        {"name": "c", "maxRetries": 1}]}
    c.call("POST", "/v1/flows", json=flow)
    c.call("POST", "/v1/flows", json=flow)
    c.call("POST", "/v1/flows", json={"name": "g", "stages": []})
    c.call("GET", "/v1/flows")
    c.call("GET", "/v1/flows/f")
    c.call("GET", "/v1/flows/nope")
    job = c.call("POST", "/v1/flows/f/jobs", json={"params": {"u": 1}, "idempotency_key": "k"})["id"]
    c.call("POST", "/v1/flows/f/jobs", json={"idempotency_key": "k"})
    c.call("POST", "/v1/flows/f/jobs", json={"priority": 9})
    c.call("POST", "/v1/flows/nope/jobs", json={})
    c.call("GET", "/v1/flows/f/jobs?key=u&value=1&resolve_children=true")
    c.call("GET", f"/v1/flow-jobs/{job}/position")
    c.call("GET", "/v1/stages/a/jobs")
    c.call("GET", "/v1/stages/a/jobs?limit=0")
    lease = c.call("POST", "/v1/stages/a/lease", json={"wait_ms": 1000})
    w, token = lease["worker"], lease["job"]["token"]
    c.call("POST", "/v1/stages/a/lease", json={"worker": w})
    c.call("POST", "/v1/stages/nope/lease", json={})
    c.call("POST", f"/v1/flow-jobs/{job}/heartbeat", json={"worker": w, "token": token})
    c.call("POST", f"/v1/flow-jobs/{job}/delay",
           json={"worker": w, "token": token, "ready_at_ms": 0, "reason": "r"})
    lease = c.call("POST", "/v1/stages/a/lease", json={"worker": w, "wait_ms": 5000})
    token = lease["job"]["token"]
    c.call("POST", f"/v1/flow-jobs/{job}/complete", json={"worker": w, "token": token + 1})
    c.call("POST", f"/v1/flow-jobs/{job}/complete",
           json={"worker": w, "token": token,
                 "result": {"children:b:params": [{"childName": "k"}, {"childName": "k"}]}})
    c.call("GET", f"/v1/flow-jobs/{job}?resolve_children=true")
    lease = c.call("POST", "/v1/stages/b:k/lease", json={"worker": w})
    # A complete that also leases the worker's next job: the reply carries it as `next`.
    done = c.call("POST", f"/v1/flow-jobs/{lease['job']['id']}/complete",
                  json={"worker": w, "token": lease["job"]["token"], "result": {"done": True},
                        "next": {}})
    other = done["next"]["job"]
    c.call("POST", f"/v1/flow-jobs/{other['id']}/complete",
           json={"worker": w, "token": other["token"], "result": {"done": True},
                 "next": {"wait_ms": 0}})
    lease = c.call("POST", "/v1/stages/c/lease", json={"worker": w})
    c.call("POST", f"/v1/flow-jobs/{job}/fail",
           json={"worker": w, "token": lease["job"]["token"], "error": "e"})
    c.call("GET", f"/v1/flow-jobs/{job}?fields=done")
    c.call("GET", "/v1/flow-jobs/nope")
    c.call("POST", "/v1/flow-jobs/lookup", json={"ids": [job, "f:nope"], "resolve_children": True})
    c.call("POST", "/v1/flow-jobs/lookup", json={"ids": ["f:nope"] * 1001})
    c.call("DELETE", f"/v1/flow-jobs/{job}")
    c.call("DELETE", f"/v1/flow-jobs/{job}")
