"""The HTTP API and the other protocols on the same queues, each side a real client:
requests for HTTP, greenstalk for beanstalkd, libgearman's `gearman` tool for Gearman."""

from __future__ import annotations

import shutil
import subprocess
import threading
import time

import greenstalk
import pytest

from http_testlib import error_code, http, start_http  # noqa: F401  (fixtures)


def need_gearman_tool():
    if shutil.which("gearman") is None:
        pytest.skip("the gearman tool is not installed (scripts/setup.sh installs it)")


def result_later(http, id_):
    """Starts waiting for a job's result in a thread; returns a function giving the reply."""
    box = {}
    t = threading.Thread(target=lambda: box.setdefault(
        "r", http.get(f"/v1/jobs/{id_}/result", params={"wait_ms": 30_000})), daemon=True)
    t.start()

    def join():
        t.join(60)
        return box["r"]

    return join


def wait_watching(http, id_):
    """Waits until the result request watches the job (polled, bounded)."""
    deadline = time.monotonic() + 30
    while http.get(f"/v1/jobs/{id_}").json()["watchers"] < 1:
        assert time.monotonic() < deadline, "the result request did not start watching"
        time.sleep(0.02)


def test_put_over_http_reserve_and_delete_over_beanstalkd(http):
    id_ = http.put_job("tube1", body="from http", priority=9, ttr=30)
    join = result_later(http, id_)
    wait_watching(http, id_)
    with greenstalk.Client(http.beanstalk, use="tube1", watch="tube1") as c:
        job = c.reserve(timeout=30)
        assert job.id == id_ and job.body == "from http"
        stats = c.stats_job(job)
        assert stats["pri"] == 9 and stats["ttr"] == 30 and stats["tube"] == "tube1"
        assert http.get(f"/v1/jobs/{id_}").json()["state"] == "reserved"
        # The beanstalkd client holds the lease: HTTP may not delete it.
        r = http.delete(f"/v1/jobs/{id_}")
        assert r.status_code == 409 and error_code(r) == "leased"
        c.delete(job)
    r = join()
    assert r.status_code == 200
    assert r.json() == {"id": id_, "ended": True, "status": "deleted"}


def test_put_over_beanstalkd_lease_and_complete_over_http(http):
    with greenstalk.Client(http.beanstalk, use="tube2") as c:
        id_ = c.put("from beanstalkd", priority=3, ttr=40)
    lease = http.lease("tube2")
    job = lease["job"]
    assert job["id"] == id_ and job["body"] == "from beanstalkd" and job["priority"] == 3
    assert job["ttr"] == 40 and job["token"] == 1
    with greenstalk.Client(http.beanstalk, watch="tube2") as c:
        with pytest.raises(greenstalk.TimedOutError):
            c.reserve(timeout=0)  # leased over HTTP: not handed out twice
        with pytest.raises(greenstalk.NotFoundError):
            c.delete(id_)  # the HTTP worker holds it
    r = http.post(f"/v1/jobs/{id_}/complete", json={"worker": lease["worker"], "token": 1})
    assert r.status_code == 200


def test_gearman_client_gets_the_result_of_a_job_completed_over_http(http):
    need_gearman_tool()
    client = subprocess.Popen(
        ["gearman", "-h", "127.0.0.1", "-p", str(http.gport), "-f", "reverse", "-s"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        lease = http.lease("reverse", wait_ms=30_000)
        job = lease["job"]
        assert job is not None and job["queue"] == "reverse"
        r = http.post(f"/v1/jobs/{job['id']}/complete", json={
            "worker": lease["worker"], "token": job["token"], "result": "done over http"})
        assert r.status_code == 200
        out, err = client.communicate(timeout=30)
    finally:
        if client.poll() is None:
            client.kill()
            client.wait()
    assert client.returncode == 0, err
    assert out.decode().strip() == "done over http"


def test_gearman_client_hears_a_failure_reported_over_http(http):
    need_gearman_tool()
    client = subprocess.Popen(
        ["gearman", "-h", "127.0.0.1", "-p", str(http.gport), "-f", "doomed", "payload"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        lease = http.lease("doomed", wait_ms=30_000)
        job = lease["job"]
        assert job["body"] == "payload"
        r = http.post(f"/v1/jobs/{job['id']}/fail", json={"worker": lease["worker"],
                                                          "token": job["token"]})
        assert r.status_code == 200
        out, err = client.communicate(timeout=30)
    finally:
        if client.poll() is None:
            client.kill()
            client.wait()
    assert b"fail" in (out + err).lower(), (out, err)


def test_a_job_put_over_http_and_done_by_a_gearman_worker_answers_the_http_waiter(http):
    need_gearman_tool()
    id_ = http.put_job("upper", body="shout")
    join = result_later(http, id_)
    wait_watching(http, id_)
    worker = subprocess.run(
        ["gearman", "-h", "127.0.0.1", "-p", str(http.gport), "-w", "-f", "upper", "-c", "1",
         "--", "tr", "a-z", "A-Z"],
        capture_output=True, timeout=60)
    assert worker.returncode == 0, worker.stderr
    r = join()
    assert r.status_code == 200
    assert r.json() == {"id": id_, "ended": True, "status": "ok", "result": "SHOUT"}
