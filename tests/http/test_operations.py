"""Operating a real server over its HTTP listener: the dashboard, Prometheus metrics of jobs
put through beanstalkd and Gearman, the admin API, and `jobyard ctl` (tables and --json)."""

from __future__ import annotations

import json
import socket
import subprocess

from http_testlib import binary_path, http, start_http  # noqa: F401  (fixtures)


def beanstalk_put(addr, tube: str, n: int) -> None:
    with socket.create_connection(addr, timeout=10) as s:
        f = s.makefile("rwb")
        f.write(f"use {tube}\r\n".encode())
        f.flush()
        assert f.readline().startswith(b"USING")
        for i in range(n):
            body = f"job-{i}".encode()
            f.write(b"put 100 0 60 %d\r\n%s\r\n" % (len(body), body))
            f.flush()
            assert f.readline().startswith(b"INSERTED")


def ctl(http, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(binary_path()), "ctl", "--url", http.url(""), *args],
                          capture_output=True, text=True, timeout=30)


def test_dashboard_and_metrics_are_served_on_the_http_listener(http):
    beanstalk_put(http.beanstalk, "emails", 3)
    page = http.get("/")
    assert page.status_code == 200 and "<title>jobyard</title>" in page.text
    assert "/admin/api" in http.get("/ui/app.js").text
    metrics = http.get("/metrics")
    assert metrics.status_code == 200
    lines = metrics.text.splitlines()
    assert 'jobyard_queue_jobs{queue="emails",state="ready"} 3' in lines
    assert 'jobyard_protocol_jobs_created_total{protocol="beanstalk"} 3' in lines
    for line in lines:
        if line and not line.startswith("#"):
            float(line.rsplit(" ", 1)[1])  # every sample has a number


def test_ctl_shows_queues_of_every_protocol_and_acts_on_them(http):
    beanstalk_put(http.beanstalk, "thumbs", 2)
    subprocess.run(["gearman", "-p", str(http.gport), "-h", "127.0.0.1", "-b", "-f",
                    "reports", "data"], check=True, timeout=30)
    out = ctl(http, "queues")
    assert out.returncode == 0, out.stderr
    header, *rows = out.stdout.splitlines()
    assert header.split()[:3] == ["QUEUE", "READY", "RESERVED"]
    by_name = {r.split()[0]: r.split() for r in rows}
    assert by_name["thumbs"][1] == "2" and by_name["reports"][1] == "1"
    data = json.loads(ctl(http, "--json", "queues").stdout)
    assert {q["name"] for q in data["queues"]} >= {"thumbs", "reports"}

    jobs = json.loads(ctl(http, "--json", "jobs", "thumbs").stdout)["jobs"]
    first = jobs[0]["id"]
    assert ctl(http, "bury", str(first)).returncode == 0
    listed = ctl(http, "jobs", "thumbs", "--state", "buried")
    assert str(first) in listed.stdout
    assert ctl(http, "kick", "thumbs", "10").stdout.startswith("ok")
    assert ctl(http, "pause", "thumbs").returncode == 0
    assert "(paused)" in ctl(http, "queues").stdout
    assert ctl(http, "resume", "thumbs").returncode == 0
    peek = ctl(http, "peek", str(first))
    assert "job-0" in peek.stdout and "ready" in peek.stdout
    assert ctl(http, "delete", str(first)).returncode == 0
    gone = ctl(http, "delete", str(first))
    assert gone.returncode == 1 and "not found" in gone.stderr
    assert json.loads(ctl(http, "--json", "stats").stdout)["jobs"] == 2


def test_ctl_reports_an_unreachable_server_with_exit_2(http):
    out = subprocess.run([str(binary_path()), "ctl", "--url", "http://127.0.0.1:1", "queues"],
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 2 and "cannot reach" in out.stderr


def lease_histogram(text: str, queue: str, outcome: str) -> dict:
    """The lease-to-complete histogram of one queue and outcome, read with the Prometheus
    project's own text parser: {"buckets": [(le, count), ...], "sum": s, "count": n}."""
    from prometheus_client.parser import text_string_to_metric_families

    out = {"buckets": []}
    for family in text_string_to_metric_families(text):
        if family.name != "jobyard_lease_to_complete_seconds":
            continue
        assert family.type == "histogram"
        for s in family.samples:
            if s.labels.get("queue") != queue or s.labels.get("outcome") != outcome:
                continue
            if s.name.endswith("_bucket"):
                out["buckets"].append((float(s.labels["le"]), s.value))
            elif s.name.endswith("_sum"):
                out["sum"] = s.value
            elif s.name.endswith("_count"):
                out["count"] = s.value
    return out


def test_lease_to_complete_histogram_after_known_reserves_and_deletes(http):
    import time

    import greenstalk

    held_s = 0.3
    with greenstalk.Client(http.beanstalk, use="timed", watch="timed") as c:
        for i in range(5):
            c.put(f"job {i}")
        windows = []
        for _ in range(3):  # reserve → delete at once
            start = time.monotonic()
            c.delete(c.reserve(timeout=5))
            windows.append(time.monotonic() - start)
        # One held for a known time: the server's lease lies inside the client's window.
        start = time.monotonic()
        job = c.reserve(timeout=5)
        time.sleep(held_s)
        c.delete(job)
        slow_window = time.monotonic() - start
        # Released and taken again: one completion, timed from the second lease.
        c.release(c.reserve(timeout=5))
        c.bury(c.reserve(timeout=5))
    text = http.get("/metrics").text
    ok = lease_histogram(text, "timed", "ok")
    failed = lease_histogram(text, "timed", "failed")
    assert ok["count"] == 4 and failed["count"] == 1, (ok, failed)
    assert held_s <= ok["sum"] <= sum(windows) + slow_window, ok
    buckets = dict(ok["buckets"])
    assert buckets[float("inf")] == 4
    counts = [n for _, n in sorted(ok["buckets"])]
    assert counts == sorted(counts), "cumulative buckets never decrease"
    # The held job's lease lasted more than 0.25 s: it is above that bucket's bound.
    assert buckets[0.25] <= 3
    assert buckets[600.0] == 4
