"""A standby's front door (`--storage postgres://`, docs/postgres.md "Any node serves
clients"): while another node leads, a standby listens on its own beanstalkd, Gearman and
HTTP addresses and forwards each connection to the leader, answering `GET /v1/health` and
`GET /v1/cluster` itself; once it leads, the same addresses serve as any leader's do."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.request

import greenstalk
import pytest

import jobyard
from jobyard_testlib import HOST, free_port


def gearman_tool(port: int, *args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(["gearman", "-h", HOST, "-p", str(port), *args],
                          capture_output=True, timeout=timeout)


def gearadmin_status(port: int) -> dict:
    """`gearadmin --status` as {function: (total, running, workers)}."""
    out = subprocess.run(["gearadmin", "-h", HOST, "-p", str(port), "--status"],
                         capture_output=True, text=True, timeout=60).stdout
    status = {}
    for line in out.splitlines():
        parts = line.split("\t")
        if len(parts) == 4:
            status[parts[0]] = tuple(int(x) for x in parts[1:])
    return status


def get_json(url: str):
    """(status, JSON document) of a GET."""
    try:
        with urllib.request.urlopen(url, timeout=10) as reply:
            return reply.status, json.load(reply)
    except urllib.error.HTTPError as e:
        return e.code, json.load(e)


class Node:
    """A node's listener ports and its Server (tests/jobyard_testlib.py)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.gearman_port = free_port()
        self.http_port = free_port()
        self.server = None

    def args(self):
        return ("--node-name", self.name,
                "--gearman-listen", f"{HOST}:{self.gearman_port}",
                "--http-listen", f"{HOST}:{self.http_port}")

    @property
    def http(self) -> str:
        return f"http://{HOST}:{self.http_port}"


@pytest.fixture
def two_nodes(start_pg_server, pg_node):
    """A leader `first` and a standby `second` on one storage, each with its beanstalkd,
    Gearman and HTTP listeners. The standby's `start()` returns once its beanstalkd port
    answers, which it does by forwarding to the leader."""
    leader, standby = Node("first"), Node("second")
    leader.server = start_pg_server(extra_args=leader.args())
    standby.server = pg_node(extra_args=standby.args()).start()
    return leader, standby


def test_a_standby_forwards_every_protocol_to_the_leader(two_nodes):
    leader, standby = two_nodes
    # beanstalkd: greenstalk on the standby's port works on the leader's jobs.
    with greenstalk.Client(standby.server.address, use="fwd") as client:
        ids = [client.put(f"via standby {i}") for i in range(3)]
    with greenstalk.Client(leader.server.address) as client:
        assert client.stats_tube("fwd")["current-jobs-ready"] == 3
        assert client.peek(ids[0]).body == "via standby 0"
    with greenstalk.Client(standby.server.address, watch="fwd") as client:
        for i in range(3):
            job = client.reserve(timeout=5)
            assert job.body == f"via standby {i}"
            client.delete(job)
    with greenstalk.Client(leader.server.address) as client:
        for job_id in ids:
            with pytest.raises(greenstalk.NotFoundError):
                client.peek(job_id)

    # HTTP: the Python client puts through the standby; the leader holds the job.
    with jobyard.Client(standby.http) as client:
        job_id = client.put("http-fwd", b"over http")
    with jobyard.Client(leader.http) as client:
        assert client.job(job_id)["state"] == "ready"
        assert client.queue("http-fwd")["ready"] == 1

    # Health and cluster are the standby's own; the leader's say it leads.
    status, health = get_json(f"{standby.http}/v1/health")
    assert status == 200 and health["status"] == "ok", health
    assert (health["role"], health["leader"], health["node"]) == ("standby", "first", "second")
    status, cluster = get_json(f"{standby.http}/v1/cluster")
    assert status == 200
    assert (cluster["role"], cluster["leader"], cluster["node"]) == ("standby", "first", "second")
    assert cluster["epoch"] >= 1
    status, cluster = get_json(f"{leader.http}/v1/cluster")
    assert (cluster["role"], cluster["leader"], cluster["node"]) == ("leader", "first", "first")

    # Gearman: the gearman tool through the standby, a worker on the leader.
    if shutil.which("gearman") is None or shutil.which("gearadmin") is None:
        pytest.skip("gearman-tools not installed (scripts/setup.sh installs them)")
    out = gearman_tool(standby.gearman_port, "-b", "-f", "gfwd", "background via standby")
    assert out.returncode == 0, out.stderr
    assert gearadmin_status(leader.gearman_port)["gfwd"][0] == 1
    worker = subprocess.Popen(
        ["gearman", "-h", HOST, "-p", str(leader.gearman_port), "-w", "-f", "rev", "-c", "1",
         "--", "rev"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        out = gearman_tool(standby.gearman_port, "-f", "rev", "hello standby")
        assert out.returncode == 0, out.stderr
        assert out.stdout.decode().strip() == "ybdnats olleh"
        assert worker.wait(timeout=60) == 0
    finally:
        worker.kill()
    # A worker through the standby runs the background job.
    out = gearman_tool(standby.gearman_port, "-w", "-f", "gfwd", "-c", "1", "--", "cat")
    assert out.returncode == 0, out.stderr
    assert gearadmin_status(leader.gearman_port)["gfwd"][0] == 0


def test_after_kill9_of_the_leader_clients_of_the_standby_carry_on(two_nodes):
    leader, standby = two_nodes
    with greenstalk.Client(standby.server.address, use="carry") as client:
        for i in range(20):
            client.put(f"job-{i}")
    spliced = socket.create_connection(standby.server.address, timeout=10)
    spliced.sendall(b"list-tube-used\r\n")
    assert spliced.recv(64) == b"USING default\r\n"
    with jobyard.Client(standby.http) as http:
        http.put("carry-http", b"before the kill")
    leader.server.kill9()
    # The spliced connection ends with the leader (or when the door closes as the standby
    # takes over); clients reconnect to the same address.
    deadline = time.monotonic() + 30
    while True:
        status, cluster = get_json(f"{standby.http}/v1/cluster")
        if status == 200 and cluster["role"] == "leader":
            break
        assert time.monotonic() < deadline, f"the standby did not take over: {cluster}"
        time.sleep(0.1)
    assert cluster["leader"] == "second" and cluster["node"] == "second"
    assert spliced.recv(64) == b"", "the connection spliced to the dead leader is closed"
    spliced.close()
    with greenstalk.Client(standby.server.address, use="carry", watch="carry") as client:
        client.put("after the failover")
        bodies = []
        for _ in range(21):
            job = client.reserve(timeout=5)
            bodies.append(job.body)
            client.delete(job)
    assert sorted(bodies) == sorted([f"job-{i}" for i in range(20)] + ["after the failover"])
    with jobyard.Client(standby.http) as http:
        assert http.queue("carry-http")["ready"] == 1
        assert http.health()["status"] == "ok"
