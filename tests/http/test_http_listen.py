"""The HTTP listener's settings and lifecycle: `--http-listen` (flag, environment, config
file, `off`), a taken address, and a graceful stop that answers waiting requests."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import threading
import time

import requests

from http_testlib import error_code, http, start_http  # noqa: F401  (fixtures)
from jobyard_testlib import binary_path, free_port


def run_briefly(args, env=None, timeout=60):
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("JOBYARD_")},
           **(env or {})}
    return subprocess.run([str(binary_path()), *args], capture_output=True, timeout=timeout,
                          env=env, stdin=subprocess.DEVNULL)


def test_a_taken_http_address_stops_the_server_with_exit_111(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        port = s.getsockname()[1]
        r = run_briefly(["serve", "--data-dir", str(tmp_path / "d"),
                         "--beanstalk-listen", f"127.0.0.1:{free_port()}",
                         "--gearman-listen", "off", "--http-listen", f"127.0.0.1:{port}"])
    assert r.returncode == 111, r.stderr
    assert b"cannot listen on 127.0.0.1:" in r.stderr


def test_the_http_flag_is_in_the_help_with_its_default():
    out = run_briefly(["serve", "--help"]).stdout.decode()
    assert "--http-listen" in out and "127.0.0.1:8080" in out
    assert "--http-worker-idle-ms" in out


def test_off_disables_the_listener_and_the_config_file_sets_it(start_http, tmp_path):
    srv = start_http()
    port = free_port()
    cfg = tmp_path / "jobyard.toml"
    cfg.write_text(f'http_listen = "127.0.0.1:{port}"\nhttp_worker_idle_ms = 1234\n')
    # The file's address is used when no flag overrides it.
    srv.stop()
    env = {k: v for k, v in os.environ.items() if not k.startswith("JOBYARD_")}
    proc = subprocess.Popen(
        [str(binary_path()), "serve", "--config", str(cfg), "--data-dir", str(tmp_path / "d2"),
         "--beanstalk-listen", f"127.0.0.1:{free_port()}", "--gearman-listen", "off"],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                r = requests.post(f"http://127.0.0.1:{port}/v1/workers", timeout=5)
                break
            except requests.ConnectionError:
                assert proc.poll() is None, proc.stderr.read()
                assert time.monotonic() < deadline
                time.sleep(0.05)
        assert r.status_code == 201 and r.json()["idle_timeout_ms"] == 1234
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
    # With `off`, nothing listens there.
    proc = subprocess.Popen(
        [str(binary_path()), "serve", "--config", str(cfg), "--http-listen", "off",
         "--data-dir", str(tmp_path / "d3"), "--beanstalk-listen", f"127.0.0.1:{free_port()}",
         "--gearman-listen", "off"],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    try:
        err = b""
        while b"ready" not in err:
            line = proc.stderr.readline()
            assert line, "the server exited"
            err += line
        assert b"http protocol" not in err
        with socket.socket() as s:
            assert s.connect_ex(("127.0.0.1", port)) != 0
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)


def test_a_graceful_stop_answers_waiting_requests_and_exits_0(http):
    id_ = http.put_job("q", body="x")
    results = {}

    def wait(name, fn):
        results[name] = fn()

    threads = [
        threading.Thread(target=wait, args=("lease", lambda: requests.post(
            http.url("/v1/lease"), json={"queues": ["empty"], "wait_ms": 60_000},
            timeout=60))),
        threading.Thread(target=wait, args=("result", lambda: requests.get(
            http.url(f"/v1/jobs/{id_}/result"), params={"wait_ms": 60_000}, timeout=60))),
    ]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 30
    while (http.get("/v1/queues/empty").json()["waiting_workers"] < 1
           or http.get(f"/v1/jobs/{id_}").json()["watchers"] < 1):
        assert time.monotonic() < deadline
        time.sleep(0.02)
    http.session.close()
    http.proc.send_signal(signal.SIGTERM)
    assert http.proc.wait(timeout=30) == 0
    for t in threads:
        t.join(60)
    for name in ["lease", "result"]:
        r = results[name]
        assert r.status_code == 503 and error_code(r) == "shutting_down", name
