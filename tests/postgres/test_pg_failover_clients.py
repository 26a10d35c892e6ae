"""Failover under load with real clients of each protocol: supervised nodes on one
PostgreSQL storage (pg_testlib's `Cluster`, restarting a node that exits as systemd would),
clients that reconnect to whichever node answers, and the leader killed -9 mid-stream (or,
in one test, paused past its lease: once continued it must step down, exit 75).

Each test asserts, through tests/failover_testlib.py's ledger, that no acknowledged job was
lost, none whose delete or complete was acknowledged came back (resurrected), and nothing
appeared that no client sent; jobs handed out twice because their end was never
acknowledged (at-least-once delivery across a failover) are counted and printed.

The clients try every node's address in turn after a broken connection, so they reach the
leader directly or through a standby's front door, whichever answers first;
`test_clients_through_one_standby_address` keeps every client on one standby's address
through the kill of the leader behind it (skipped on a build whose standbys do not forward).
"""

from __future__ import annotations

import time

import pytest

from failover_testlib import (FLOW, FLOW_STAGES, BeanstalkConsumer, BeanstalkProducer,
                              FlowCreator, FlowWorker, GearmanSubmitter, GearmanWorker,
                              HttpProducer, HttpWorker, Load, declare_flow, drain, drain_flow)
from pg_testlib import STEP_DOWN_EXIT, Cluster

pytest.importorskip("gearman")

# Enough traffic before and after a kill to show the clients were busy on both leaders.
ACKS_AROUND_A_KILL = 150


@pytest.fixture
def cluster(jobyard_bin, pg_url, tmp_path):
    made = []

    def make(size=2, extra_args=()):
        c = Cluster(jobyard_bin, pg_url, tmp_path, size=size, extra_args=extra_args).start()
        made.append(c)
        return c

    yield make
    for c in made:
        c.stop()
        print(c.logs())


def judge(load: Load, cluster: Cluster, flows: bool = False) -> None:
    """Drains what is left from the leader and asserts the ledger's verdict."""
    leader = cluster.leader()
    queues = sorted(q for q in load.queues if q != FLOW and q not in FLOW_STAGES)
    left = drain(leader.beanstalk_address, queues)
    if flows:
        left.update(drain_flow(leader.http_base))
    verdict = load.ledger.verdict(left)
    print(f"failovers (s): {[round(t, 2) for t in cluster.failovers]}; {verdict.line()}\n"
          f"clients: {load.summary()}")
    assert verdict.ok, verdict.details()
    assert verdict.acked_puts > 0


def run_through_kills(cluster: Cluster, load: Load, kills: int) -> None:
    """Kills the leader `kills` times under the load: the first is a lost machine (the node
    stays down until a standby leads), then a crash (restarted at once), and so on."""
    load.start()
    try:
        load.wait_for_acks(ACKS_AROUND_A_KILL)
        for k in range(kills):
            cluster.kill_leader(hold=k % 2 == 0)
            load.wait_for_acks(ACKS_AROUND_A_KILL)
    finally:
        load.finish()


def test_greenstalk_producers_and_consumers_through_a_kill9(cluster):
    c = cluster()
    load = Load()
    for i in range(2):
        load.add(BeanstalkProducer, f"bp{i}", c.beanstalk_addresses(), "fo-b")
        load.add(BeanstalkConsumer, f"bc{i}", c.beanstalk_addresses(), "fo-b")
    run_through_kills(c, load, kills=1)
    assert load.ledger.acked_ends, "the consumers deleted nothing"
    judge(load, c)


def test_gearman_background_jobs_and_a_worker_through_a_kill9(cluster):
    c = cluster()
    load = Load()
    for i in range(2):
        load.add(GearmanSubmitter, f"gs{i}", c.gearman_addresses(), "fo-g")
    load.add(GearmanWorker, "gw0", c.gearman_addresses(), "fo-g")
    run_through_kills(c, load, kills=1)
    assert load.ledger.taken, "the worker did nothing"
    judge(load, c)


def test_http_put_lease_complete_through_a_kill9(cluster):
    c = cluster()
    load = Load()
    for i in range(2):
        load.add(HttpProducer, f"hp{i}", c.http_bases(), "fo-h")
        load.add(HttpWorker, f"hw{i}", c.http_bases(), "fo-h")
    run_through_kills(c, load, kills=1)
    assert load.ledger.acked_ends, "the workers completed nothing"
    judge(load, c)


def test_a_kill9_loop_under_mixed_load(cluster):
    c = cluster(size=3)
    load = Load()
    load.add(BeanstalkProducer, "bp", c.beanstalk_addresses(), "mix-b")
    load.add(BeanstalkConsumer, "bc", c.beanstalk_addresses(), "mix-b")
    load.add(GearmanSubmitter, "gs", c.gearman_addresses(), "mix-g")
    load.add(GearmanWorker, "gw", c.gearman_addresses(), "mix-g")
    load.add(HttpProducer, "hp", c.http_bases(), "mix-h")
    load.add(HttpWorker, "hw", c.http_bases(), "mix-h")
    declare_flow(c.leader().http_base)
    load.add(FlowCreator, "fc", c.http_bases(), FLOW)
    for stage in FLOW_STAGES:
        load.add(FlowWorker, f"fw-{stage}", c.http_bases(), stage)
    run_through_kills(c, load, kills=3)
    restarted = sum(n.restarts() for n in c.nodes)
    assert restarted >= 3, f"the supervisor restarted {restarted} nodes, expected the 3 killed"
    judge(load, c, flows=True)


def test_a_leader_paused_past_its_lease_under_load_steps_down_and_loses_nothing(cluster):
    c = cluster()
    load = Load()
    load.add(BeanstalkProducer, "bp", c.beanstalk_addresses(), "pause-b")
    load.add(BeanstalkConsumer, "bc", c.beanstalk_addresses(), "pause-b")
    load.add(HttpProducer, "hp", c.http_bases(), "pause-h")
    load.add(HttpWorker, "hw", c.http_bases(), "pause-h")
    load.start()
    try:
        load.wait_for_acks(ACKS_AROUND_A_KILL)
        old = c.leader()
        c.pause_leader()
        load.wait_for_acks(ACKS_AROUND_A_KILL)
    finally:
        load.finish()
    assert STEP_DOWN_EXIT in old.exits, f"the paused leader exited {old.exits}, not 75"
    judge(load, c)


def has_front_door(binary) -> bool:
    """Whether this build's standbys forward clients (the front door came with
    `--advertise-host`)."""
    import subprocess

    out = subprocess.run([str(binary), "serve", "--help"], capture_output=True, text=True,
                         timeout=60).stdout
    return "--advertise-host" in out


def a_forwarding_standby(c: Cluster, timeout: float = 30.0):
    """A standby that accepts beanstalkd clients (its door is open), waiting for one."""
    import socket

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        leader = c.leader()
        for node in c.nodes:
            if node is not leader and node.running():
                try:
                    socket.create_connection(node.beanstalk_address, timeout=2).close()
                    return node
                except OSError:
                    pass
        time.sleep(0.1)
    raise AssertionError(f"no standby opened its front door in {timeout} s:\n{c.logs()}")


def test_clients_through_one_standby_address(cluster, jobyard_bin):
    if not has_front_door(jobyard_bin):
        pytest.skip("this build's standbys do not forward clients to the leader")
    c = cluster(size=3)
    door = a_forwarding_standby(c)
    load = Load()
    load.add(BeanstalkProducer, "bp", [door.beanstalk_address], "door-b")
    load.add(BeanstalkConsumer, "bc", [door.beanstalk_address], "door-b")
    load.add(GearmanSubmitter, "gs", [door.gearman_address], "door-g")
    load.add(GearmanWorker, "gw", [door.gearman_address], "door-g")
    load.add(HttpProducer, "hp", [door.http_base], "door-h")
    load.add(HttpWorker, "hw", [door.http_base], "door-h")
    load.start()
    try:
        load.wait_for_acks(ACKS_AROUND_A_KILL)
        # Kill the leader behind the door; the door may itself take over.
        c.kill_leader(hold=False)
        load.wait_for_acks(ACKS_AROUND_A_KILL)
    finally:
        load.finish()
    judge(load, c)
