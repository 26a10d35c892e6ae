"""Every bound of the HTTP API (docs/http-api.md, "Limits"): the value at the limit is
accepted and one past it is refused with its stable code, and nothing is half-applied."""

from __future__ import annotations

import base64
import socket

import pytest
import requests

from http_testlib import error_code, http, start_http  # noqa: F401  (fixtures)

MAX_JOB = 100


@pytest.fixture
def small(start_http):
    """A server with a 100-byte job size limit."""
    return start_http(["--max-job-size", str(MAX_JOB)])


def test_a_body_of_exactly_the_job_size_is_accepted_and_one_more_byte_is_not(small):
    assert small.post("/v1/queues/q/jobs", json={"body": "x" * MAX_JOB}).status_code == 201
    r = small.post("/v1/queues/q/jobs", json={"body": "x" * (MAX_JOB + 1)})
    assert r.status_code == 413 and error_code(r) == "job_too_big"
    raw = base64.b64encode(b"\0" * (MAX_JOB + 1)).decode()
    r = small.post("/v1/queues/q/jobs", json={"body_base64": raw})
    assert r.status_code == 413 and error_code(r) == "job_too_big"
    assert small.get("/v1/queues/q").json()["total_jobs"] == 1


def test_a_result_or_error_larger_than_the_job_size_is_refused(small):
    id_ = small.put_job("q", body="x")
    lease = small.lease("q")
    w = lease["worker"]
    for call, field in [("complete", "result"), ("fail", "error")]:
        r = small.post(f"/v1/jobs/{id_}/{call}", json={"worker": w, "token": 1,
                                                       field: "r" * (MAX_JOB + 1)})
        assert r.status_code == 413 and error_code(r) == "job_too_big", call
    assert small.get(f"/v1/jobs/{id_}").json()["state"] == "reserved", "nothing applied"
    r = small.post(f"/v1/jobs/{id_}/complete", json={"worker": w, "token": 1,
                                                     "result": "r" * MAX_JOB})
    assert r.status_code == 200


def test_a_request_body_past_the_read_limit_is_refused_unread(small):
    limit = 6 * MAX_JOB + 256 * 1024
    padded = b'{"body": "x"' + b" " * (limit - 13) + b"}"
    assert len(padded) == limit
    assert small.request("POST", "/v1/queues/q/jobs", data=padded).status_code == 201
    over = b'{"body": "x"' + b" " * (limit - 12) + b"}"
    r = small.request("POST", "/v1/queues/q/jobs", data=over)
    assert r.status_code == 413 and error_code(r) == "request_too_large"


def test_attributes_are_bounded(http):
    # {"a":"..."}: 8 bytes around the string.
    at_limit = {"a": "x" * (65536 - 8)}
    assert http.post("/v1/queues/q/jobs", json={"attributes": at_limit}).status_code == 201
    over = {"a": "x" * (65536 - 7)}
    r = http.post("/v1/queues/q/jobs", json={"attributes": over})
    assert r.status_code == 413 and error_code(r) == "attributes_too_big"


def test_path_and_query_are_bounded(http):
    base = "/v1/queues/q/jobs?limit=1&state=ready&cursor="
    ok = base + "1.1" + "&" * (4096 - len(base) - 3)
    assert len(ok) == 4096
    assert http.get(ok).status_code == 200
    r = http.get(ok + "&")
    assert r.status_code == 414 and error_code(r) == "uri_too_long"


def test_queue_names_are_bounded(http):
    assert http.post("/v1/queues/" + "q" * 200 + "/jobs", json={}).status_code == 201
    r = http.post("/v1/queues/" + "q" * 201 + "/jobs", json={})
    assert r.status_code == 400 and error_code(r) == "bad_queue_name"
    r = http.post("/v1/lease", json={"queues": ["q" * 201]})
    assert r.status_code == 400 and error_code(r) == "bad_queue_name"


def test_lease_parameters_are_bounded(http):
    ok = [{"queues": [f"q{i}" for i in range(32)]},
          {"queues": ["q"], "lease_ms": 86_400_000},
          {"queues": ["q"], "wait_ms": 0}]
    for body in ok:
        assert http.post("/v1/lease", json=body).status_code == 200, body
    bad = [{"queues": [f"q{i}" for i in range(33)]},
           {"queues": ["q"], "lease_ms": 86_400_001},
           {"queues": ["q"], "lease_ms": 0},
           {"queues": ["q"], "wait_ms": 60_001}]
    for body in bad:
        r = http.post("/v1/lease", json=body)
        assert r.status_code == 400 and error_code(r) == "bad_request", body
    r = http.get("/v1/jobs/1/result", params={"wait_ms": 60_001})
    assert r.status_code == 400 and error_code(r) == "bad_request"


def test_page_sizes_are_bounded(http):
    for path in ["/v1/queues", "/v1/queues/q/jobs"]:
        assert http.get(path, params={"limit": 1000}).status_code == 200
        r = http.get(path, params={"limit": 1001})
        assert r.status_code == 400 and error_code(r) == "bad_request", path


def test_flow_job_lookups_are_bounded(http):
    assert http.post("/v1/flows", json={"name": "lk", "stages": [{"name": "lk-only"}]}).ok
    job = http.post("/v1/flows/lk/jobs", json={}).json()["id"]
    r = http.post("/v1/flow-jobs/lookup", json={"ids": [job] * 1000})
    assert r.status_code == 200 and len(r.json()["jobs"]) == 1000
    r = http.post("/v1/flow-jobs/lookup", json={"ids": [job] * 1001})
    assert r.status_code == 400 and error_code(r) == "bad_request"


def test_connections_and_sessions_share_the_connection_limit(start_http):
    srv = start_http(["--max-connections", "3"])
    s = requests.Session()  # one keep-alive connection: the first place
    workers = [s.post(srv.url("/v1/workers"), timeout=30) for _ in range(2)]
    assert [w.status_code for w in workers] == [201, 201]  # places two and three
    r = s.post(srv.url("/v1/workers"), timeout=30)
    assert r.status_code == 503 and error_code(r) == "too_many_sessions"
    r = s.post(srv.url("/v1/lease"), json={"queues": ["q"]}, timeout=30)
    assert r.status_code == 503 and error_code(r) == "too_many_sessions"
    r = s.get(srv.url("/v1/jobs/1/result"), params={"wait_ms": 10}, timeout=30)
    assert r.status_code == 503 and error_code(r) == "too_many_sessions"
    # A new connection finds no place: it is closed without an answer.
    with pytest.raises(requests.ConnectionError):
        requests.get(srv.url("/v1/health"), timeout=30)
    # Ending a session frees a place.
    assert s.delete(srv.url(f"/v1/workers/{workers[0].json()['worker']}"),
                    timeout=30).status_code == 200
    assert s.post(srv.url("/v1/workers"), timeout=30).status_code == 201
    s.close()


def test_headers_beyond_the_parser_limits_are_refused_and_the_server_goes_on(http):
    big = b"X-Big: " + b"a" * (1 << 20) + b"\r\n"
    many = b"".join(b"X-%d: 1\r\n" % i for i in range(101))
    for headers in [big, many]:
        with socket.create_connection(("127.0.0.1", http.hport), timeout=30) as s:
            try:
                s.sendall(b"GET /v1/health HTTP/1.1\r\nHost: x\r\n" + headers + b"\r\n")
                reply = s.recv(4096)
            except (ConnectionResetError, BrokenPipeError):
                reply = b""
            assert not reply.startswith(b"HTTP/1.1 200"), reply[:80]
    assert http.get("/v1/health").status_code == 200
