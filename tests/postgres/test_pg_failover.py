"""Leadership over `--storage postgres://`: a second node waits as a standby and takes
over when the leader's lease runs out (kill -9) or is let go (a clean stop), with every
acknowledged job; a leader stopped past its lease (SIGSTOP) is fenced off: once it runs
again it hands out, appends and acknowledges nothing, and steps down."""

from __future__ import annotations

import json
import signal
import socket
import time
import urllib.request

import greenstalk

from jobyard_testlib import HOST, free_port
from pg_testlib import Standby

N_JOBS = 200
STEP_DOWN_EXIT = 75


def start_standby(make_node) -> Standby:
    standby = Standby(make_node())
    assert standby.waiting(), "the second node did not become a standby"
    return standby


def reserve_all(address, expect: int) -> list:
    bodies = []
    with greenstalk.Client(address) as client:
        for _ in range(expect + 1):
            try:
                job = client.reserve(timeout=1)
            except greenstalk.TimedOutError:
                break
            bodies.append(job.body)
            client.delete(job)
    return bodies


def test_a_second_node_waits_as_a_standby_and_takes_over_a_clean_stop(pg_node, start_pg_server):
    http = free_port()
    first = start_pg_server(
        extra_args=("--node-name", "first", "--http-listen", f"{HOST}:{http}")
    )
    standby = start_standby(lambda: pg_node(extra_args=("--node-name", "second")))
    time.sleep(1.5)
    assert standby.server.running() and not standby.took_over(0), "a standby must not serve"
    with urllib.request.urlopen(f"http://{HOST}:{http}/v1/cluster", timeout=10) as reply:
        cluster = json.load(reply)
    assert cluster == {
        "role": "leader", "epoch": 1, "leader": "first", "node": "first", "lag_ms": 0,
        "nodes": [{"node": "first", "role": "leader"}, {"node": "second", "role": "standby"}],
    }, cluster
    with greenstalk.Client(first.address) as client:
        client.put("still served")
    first.stop()
    # A clean stop lets the lease go: no waiting for it to run out.
    assert standby.took_over(10), standby.server.log_tail()
    assert reserve_all(standby.server.address, 1) == ["still served"]


def test_failover_after_kill9_keeps_every_acknowledged_job(pg_node, start_pg_server):
    leader = start_pg_server()
    standby = start_standby(pg_node)
    with greenstalk.Client(leader.address) as client:
        for i in range(N_JOBS):
            client.put(f"job-{i}")
    leader.kill9()
    killed = time.monotonic()
    assert standby.took_over(30), standby.server.log_tail()
    took = standby.led_at - killed
    print(f"failover: the standby served {took:.2f} s after kill -9 of the leader")
    assert took < 15, took
    new_leader = standby.server
    # Clients reconnect to the new leader and carry on.
    with greenstalk.Client(new_leader.address) as client:
        client.put("after the failover")
    bodies = reserve_all(new_leader.address, N_JOBS + 1)
    assert sorted(bodies) == sorted([f"job-{i}" for i in range(N_JOBS)] + ["after the failover"])


def test_a_leader_stopped_past_its_lease_is_fenced(pg_node, start_pg_server, postgres, pg_url):
    db = pg_url.rsplit("/", 1)[1]
    leader = start_pg_server()
    standby = start_standby(pg_node)
    with greenstalk.Client(leader.address) as client:
        client.put("before the stop")
    old_epoch = int(postgres.sql("SELECT epoch FROM jobyard.leader", db=db)[0][0])
    leader.proc.send_signal(signal.SIGSTOP)
    try:
        # Sent while the leader is stopped: read only once it runs again.
        stale_put = socket.create_connection(leader.address, timeout=30)
        stale_put.sendall(b"put 0 0 60 9\r\nstale put\r\n")
        assert standby.took_over(30), standby.server.log_tail()
        new_epoch = int(postgres.sql("SELECT epoch FROM jobyard.leader", db=db)[0][0])
        assert new_epoch == old_epoch + 1
        with greenstalk.Client(standby.server.address) as client:
            client.put("on the new leader")
        rows_before = postgres.sql(f"SELECT count(*) FROM jobyard.log WHERE epoch <> {new_epoch}", db=db)
        reserve = socket.create_connection(leader.address, timeout=30)
    finally:
        leader.proc.send_signal(signal.SIGCONT)
    # Handing out is gated on the monotonic clock: a reserve right after the continue
    # gets no job, whatever thread runs first.
    reserve.sendall(b"reserve-with-timeout 0\r\n")
    reserve.settimeout(15)
    stale_put.settimeout(15)
    assert not read_reply(reserve).startswith(b"RESERVED"), "a fenced leader handed out a job"
    assert read_reply(stale_put) == b"", "a fenced leader acknowledged a put"
    assert leader.proc.wait(15) == STEP_DOWN_EXIT
    assert "stepping down" in leader.log_path.read_text()
    rows_after = postgres.sql(f"SELECT count(*) FROM jobyard.log WHERE epoch <> {new_epoch}", db=db)
    assert rows_after == rows_before, "the fenced leader appended to the log"
    bodies = reserve_all(standby.server.address, 3)
    assert sorted(bodies) == ["before the stop", "on the new leader"]


def read_reply(conn: socket.socket) -> bytes:
    """A line of reply, or b"" when the server closed the connection first."""
    buf = b""
    try:
        while not buf.endswith(b"\r\n"):
            chunk = conn.recv(256)
            if not chunk:
                return buf
            buf += chunk
    except ConnectionResetError:
        return buf
    return buf
