"""What `/metrics` counts on a real server: fsyncs made before anything scraped are in the
fsync latency histogram, and every schedule route is a counted HTTP command."""

from __future__ import annotations

import socket

from http_testlib import http, start_http  # noqa: F401  (fixtures)


def samples(text: str) -> dict:
    """`name{labels}` -> value of every sample line of Prometheus text."""
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            out[name] = float(value)
    return out


def beanstalk_puts(addr, n: int) -> None:
    with socket.create_connection(addr, timeout=30) as s:
        f = s.makefile("rwb")
        for i in range(n):
            body = f"job-{i}".encode()
            f.write(b"put 100 0 60 %d\r\n%s\r\n" % (len(body), body))
            f.flush()
            assert f.readline().startswith(b"INSERTED")


def test_fsyncs_before_the_first_scrape_are_in_the_fsync_histogram(http):
    # --fsync always (the default): each acknowledged put was synced; nothing has scraped.
    beanstalk_puts(http.beanstalk, 3)
    first = samples(http.get("/metrics").text)
    fsyncs = first["jobyard_log_fsyncs_total"]
    assert fsyncs >= 1
    # A fresh server syncs nothing before its listeners start, so the histogram, counting
    # from then, has every fsync the log made.
    assert first.get("jobyard_log_fsync_seconds_count") == fsyncs, first


def test_fsyncs_while_the_config_is_declared_are_in_the_fsync_histogram(start_http, tmp_path):
    # The config's policies and schedules are logged (and synced) before any listener
    # starts: the recorder must already be there to time those fsyncs.
    config = tmp_path / "jobyard.toml"
    config.write_text(
        '[queues.mails]\nmax_attempts = 3\nrate_limit = "10/s"\n\n'
        '[[schedules]]\nname = "hourly"\nqueue = "reports"\ninterval = "1h"\nbody = "x"\n'
    )
    srv = start_http(extra=("--config", str(config)))
    first = samples(srv.get("/metrics").text)
    fsyncs = first["jobyard_log_fsyncs_total"]
    assert fsyncs >= 1, "declaring the config syncs the log"
    assert first.get("jobyard_log_fsync_seconds_count") == fsyncs, first


def test_every_schedule_route_is_counted_as_an_http_command(http):
    calls = [
        ("declare-schedule", "PUT", "/v1/schedules/hourly",
         {"queue": "reports", "interval": "1h", "body": "x"}),
        ("list-schedules", "GET", "/v1/schedules", None),
        ("get-schedule", "GET", "/v1/schedules/hourly", None),
        ("pause-schedule", "POST", "/v1/schedules/hourly/pause", None),
        ("resume-schedule", "POST", "/v1/schedules/hourly/resume", None),
        ("delete-schedule", "DELETE", "/v1/schedules/hourly", None),
    ]
    for _, method, path, body in calls:
        r = http.request(method, path, json=body)
        assert r.status_code in (200, 201), r.text
    # A refused call is counted too, as the other routes count theirs.
    assert http.get("/v1/schedules/gone").status_code == 404
    counted = samples(http.get("/metrics").text)
    for command, *_ in calls:
        want = 2.0 if command == "get-schedule" else 1.0
        key = f'jobyard_commands_total{{protocol="http",command="{command}"}}'
        assert counted.get(key) == want, (key, counted.get(key))
