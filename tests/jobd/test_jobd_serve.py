"""`jobyard serve --jobd-config F`: the jobd worker inside the server, its targets as
engine queues. beanstalkd clients (greenstalk) and Gearman's admin `status` see the
targets; the concurrency is the engine's lease limit, which counts a beanstalkd client's
reservation in the same tube too."""

from __future__ import annotations

import socket
import subprocess
import time

import greenstalk

from jobdlib import pid_alive as _pid_alive, poll as _poll, port_open as _port_open
from jobdlib import serve_with_jobd as _serve_with_jobd, wait as _wait
from jobyard_testlib import free_port


def _started(tmp_path) -> int:
    return len(list(tmp_path.glob("started-*")))


def test_targets_are_tubes_and_reserved_counts_running_jobs(
        start_server, jobs_db, tmp_path, jobyard_bin):
    srv, jobd_port, gearman_port = _serve_with_jobd(
        start_server, jobs_db, tmp_path, "t1 = 2\nt2 = 1")
    with greenstalk.Client(srv.address) as bs:
        assert {"t1", "t2"} <= set(bs.tubes())
        ids = [jobs_db.insert("t1") for _ in range(5)]
        _poll(jobyard_bin, jobd_port, "t1")
        _wait(lambda: _started(tmp_path) == 2, "two jobs running")
        stats = bs.stats_tube("t1")
        assert stats["current-jobs-reserved"] == 2, stats
        # Fetching takes rows only for free slots: nothing waits in the tube.
        assert stats["current-jobs-ready"] == 0, stats
        assert bs.stats_tube("t2")["current-jobs-reserved"] == 0
        assert [jobs_db.row(i)["status"] for i in ids].count("running") == 2

        # Gearman's admin status lists the targets too (function, total, running, workers).
        with socket.create_connection(("127.0.0.1", gearman_port), timeout=30) as g:
            g.sendall(b"status\n")
            buf = b""
            while not buf.endswith(b".\n"):
                chunk = g.recv(4096)
                assert chunk, "gearman closed"
                buf += chunk
        lines = {line.split(b"\t")[0]: line.split(b"\t") for line in buf.splitlines()[:-1]}
        assert lines[b"t1"][2] == b"2", buf

        (tmp_path / "go").touch()
        for i in ids:
            r = jobs_db.wait_status(i, "done")
            assert r["result"] == "ok" and r["stdout"].startswith(f"id={i}"), r
        _wait(lambda: bs.stats_tube("t1")["current-jobs-reserved"] == 0, "leases ended")
        assert _started(tmp_path) == 5
        assert bs.stats_tube("t1")["total-jobs"] == 5


def test_a_beanstalkd_lease_in_the_tube_counts_against_the_concurrency(
        start_server, jobs_db, tmp_path, jobyard_bin):
    srv, jobd_port, _ = _serve_with_jobd(start_server, jobs_db, tmp_path, "t1 = 1")
    (tmp_path / "go").touch()
    with greenstalk.Client(srv.address, use="t1", watch="t1") as bs:
        bs.put(b"not a row")
        held = bs.reserve(timeout=10)
        row = jobs_db.insert("t1")
        _poll(jobyard_bin, jobd_port, "t1")
        # The worker took the row (its own slot count allows it) but the engine gives no
        # lease while the beanstalkd client holds the only one.
        _wait(lambda: bs.stats_tube("t1")["current-jobs-ready"] == 1, "the row queued in the tube")
        assert bs.stats_tube("t1")["current-jobs-reserved"] == 1
        assert _started(tmp_path) == 0
        assert jobs_db.row(row)["status"] != "done"
        # Deleting the held job frees the lease; the engine wakes the worker.
        bs.delete(held)
        assert jobs_db.wait_status(row, "done")["result"] == "ok"
        assert _started(tmp_path) == 1


def test_pause_and_set_concurrency_are_the_engines(
        start_server, jobs_db, tmp_path, jobyard_bin):
    srv, jobd_port, _ = _serve_with_jobd(start_server, jobs_db, tmp_path, "t1 = 1")

    def jobctl(*args):
        return subprocess.run([str(jobyard_bin), "jobctl", "--port", str(jobd_port), *args],
                              check=True, capture_output=True, text=True, timeout=60).stdout

    with greenstalk.Client(srv.address) as bs:
        jobctl("pause", "t1")
        assert bs.stats_tube("t1")["pause"] > 0
        jobctl("continue", "t1")
        assert bs.stats_tube("t1")["pause"] == 0
        jobctl("set-target-concurrency", "t1", "3")
        ids = [jobs_db.insert("t1") for _ in range(4)]
        _poll(jobyard_bin, jobd_port, "t1")
        _wait(lambda: _started(tmp_path) == 3, "three jobs running")
        assert bs.stats_tube("t1")["current-jobs-reserved"] == 3
        (tmp_path / "go").touch()
        for i in ids:
            jobs_db.wait_status(i, "done")
    assert srv.stop() == 0


def test_kill9_of_the_server_strands_no_row(start_server, jobs_db, tmp_path, jobyard_bin):
    srv, jobd_port, _ = _serve_with_jobd(start_server, jobs_db, tmp_path, "t1 = 1")
    running = jobs_db.insert("t1")
    queued = jobs_db.insert("t1")
    _poll(jobyard_bin, jobd_port, "t1")
    _wait(lambda: _started(tmp_path) == 1, "the first job running")
    launcher = int((tmp_path / f"pid-{running}").read_text())
    assert jobs_db.row(running)["status"] == "running"
    srv.kill9()
    # Forked on the server's runtime threads, the launcher dies with the server.
    _wait(lambda: not _pid_alive(launcher), "the launcher to die with the server")
    srv.restart()
    _wait(lambda: _port_open(jobd_port), "the jobd listener after the restart")
    r = jobs_db.wait_status(running, "done")
    assert r["result"] == "fail" and "worker stopped while this job was running" in r["stderr"], r
    assert jobs_db.row(queued)["status"] == "waiting"
    (tmp_path / "go").touch()
    _poll(jobyard_bin, jobd_port, "t1")
    assert jobs_db.wait_status(queued, "done")["result"] == "ok"


def _metrics(http_port: int) -> dict:
    """`/metrics` parsed by the Prometheus client library: {(name, labels): value}."""
    import requests
    from prometheus_client.parser import text_string_to_metric_families

    text = requests.get(f"http://127.0.0.1:{http_port}/metrics", timeout=30).text
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def test_jobd_figures_in_metrics(start_server, jobs_db, tmp_path, jobyard_bin):
    """Known jobd operations show in `/metrics`: requests by type, rows taken and ended,
    per-target launched/finished/failed/running, spawn failures, connections."""
    http_port = free_port()
    run = tmp_path / "run.sh"
    run.write_text(
        'd=$(dirname "$0")\ntouch "$d/started-$1"\n'
        'while [ ! -f "$d/go" ]; do sleep 0.02; done\n[ ! -f "$d/fail-$1" ]\n'
    )
    jobd_port = free_port()
    cfg = tmp_path / "jobd.conf"
    cfg.write_text(
        f"host = 127.0.0.1\nport = {jobd_port}\nname = w1\n"
        f"mysql_host = 127.0.0.1\nmysql_port = {jobs_db.m.port}\nmysql_user = root\n"
        f"mysql_password = \"\"\nmysql_database = {jobs_db.name}\nmysql_table = jobs\n"
        f"launcher = /bin/sh {run} {{id}}\nshutdown_timeout = 2\n[targets]\nm1 = 2\nm2 = 1\n"
    )
    start_server(extra_args=["--jobd-config", str(cfg), "--http-listen", f"127.0.0.1:{http_port}"])
    _wait(lambda: _port_open(jobd_port), "the jobd listener")

    ids = [jobs_db.insert("m1") for _ in range(3)]
    _poll(jobyard_bin, jobd_port, "m1")
    _wait(lambda: _started(tmp_path) == 2, "two jobs running")
    m = _metrics(http_port)
    assert m[("jobyard_jobd_running_processes", (("target", "m1"),))] == 2
    assert m[("jobyard_jobd_jobs_launched_total", (("target", "m1"),))] == 2
    assert m[("jobyard_jobd_running_processes", (("target", "m2"),))] == 0
    assert m[("jobyard_commands_total", (("command", "poll"), ("protocol", "jobd")))] == 1
    assert m[("jobyard_jobd_master_connected", (("worker", "w1"),))] == 0

    (tmp_path / f"fail-{ids[2]}").touch()
    (tmp_path / "go").touch()
    for i in ids:
        jobs_db.wait_status(i, "done")
    assert jobs_db.row(ids[2])["result"] == "fail"
    m = _metrics(http_port)
    assert m[("jobyard_jobd_jobs_launched_total", (("target", "m1"),))] == 3
    assert m[("jobyard_jobd_jobs_finished_total", (("target", "m1"),))] == 3
    assert m[("jobyard_jobd_jobs_failed_total", (("target", "m1"),))] == 1
    assert m[("jobyard_jobd_running_processes", (("target", "m1"),))] == 0
    assert m[("jobyard_protocol_jobs_created_total", (("protocol", "jobd"),))] == 3
    assert m[("jobyard_protocol_jobs_completed_total", (("protocol", "jobd"),))] == 2
    assert m[("jobyard_protocol_jobs_failed_total", (("protocol", "jobd"),))] == 1
    assert m[("jobyard_commands_total", (("command", "poll"), ("protocol", "jobd")))] == 1
    assert m[("jobyard_jobd_launcher_spawn_failures_total", (("worker", "w1"),))] == 0
    assert m[("jobyard_jobd_db_errors_total", (("worker", "w1"),))] == 0

    # A status request on a connection that stays open: counted, and the connection is in
    # the protocol's gauge while it is open.
    with socket.create_connection(("127.0.0.1", jobd_port), timeout=30) as s:
        s.sendall(b'[0,{"no":1,"type":"status"}]\x04')
        buf = b""
        while not buf.endswith(b"\x04"):
            buf += s.recv(65536)
        m = _metrics(http_port)
        assert m[("jobyard_connections", (("protocol", "jobd"),))] == 1
        assert m[("jobyard_commands_total", (("command", "status"), ("protocol", "jobd")))] == 1
    _wait(lambda: _metrics(http_port)[("jobyard_connections", (("protocol", "jobd"),))] == 0,
          "the connection to be counted closed")


def test_jobd_connections_count_against_max_connections(
        start_server, jobs_db, tmp_path, jobyard_bin):
    """The jobd listener takes its connections from the server's gate: with
    `--max-connections 3` (one place is the jobd worker itself), two clients are served,
    the third is closed at once and counted as refused; a place freed serves again."""
    http_port = free_port()
    jobd_port = free_port()
    cfg = tmp_path / "jobd.conf"
    cfg.write_text(
        f"host = 127.0.0.1\nport = {jobd_port}\nname = w\n"
        f"mysql_host = 127.0.0.1\nmysql_port = {jobs_db.m.port}\nmysql_user = root\n"
        f"mysql_password = \"\"\nmysql_database = {jobs_db.name}\nmysql_table = jobs\n"
        f"launcher = /bin/true {{id}}\n[targets]\nt1 = 1\n"
    )
    start_server(extra_args=["--jobd-config", str(cfg), "--max-connections", "3",
                             "--http-listen", "off"])
    _wait(lambda: _port_open(jobd_port), "the jobd listener")

    def status(s: socket.socket) -> bytes:
        s.sendall(b'[0,{"no":7,"type":"status"}]\x04')
        buf = b""
        while not buf.endswith(b"\x04"):
            try:
                chunk = s.recv(65536)
            except ConnectionResetError:
                # Closed by the server while our request was unread: the kernel resets.
                return buf
            if not chunk:
                return buf
            buf += chunk
        return buf

    # _port_open's probe connection may still hold its place for a moment.
    time.sleep(0.3)
    a = socket.create_connection(("127.0.0.1", jobd_port), timeout=30)
    b = socket.create_connection(("127.0.0.1", jobd_port), timeout=30)
    assert b'"no":7' in status(a) and b'"no":7' in status(b)
    c = socket.create_connection(("127.0.0.1", jobd_port), timeout=30)
    assert status(c) == b"", "the connection over the limit is closed without an answer"
    c.close()
    a.close()
    deadline = time.time() + 30
    while True:
        d = socket.create_connection(("127.0.0.1", jobd_port), timeout=30)
        if b'"no":7' in status(d):
            break
        d.close()
        assert time.time() < deadline, "a freed place was not given to a new connection"
        time.sleep(0.05)
    d.close()
    b.close()
