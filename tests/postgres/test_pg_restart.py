"""PostgreSQL restarted under load: while producers of each protocol put jobs into a
supervised two-node cluster, PostgreSQL is stopped (fast shutdown: every session cut) for a
few seconds and started again (a consumer deletes meanwhile). Afterwards every put that was
acknowledged is there, none that was refused with an error reply is, no job whose delete
was acknowledged came back, a node serves again (the leader, or a node the
supervisor restarted after it stepped down), and the clients carry on."""

from __future__ import annotations

import time

import pytest

from failover_testlib import BeanstalkConsumer, BeanstalkProducer, HttpProducer, Load, drain
from pg_testlib import Cluster

pytest.importorskip("greenstalk")

# Longer than the lease (3 s): a standby may take over when PostgreSQL is back.
OUTAGE_SECONDS = 4.0
ACKS = 150


def test_postgres_stopped_and_started_under_load_loses_nothing_acknowledged(
        jobyard_bin, pg_url, postgres, tmp_path):
    cluster = Cluster(jobyard_bin, pg_url, tmp_path, size=2).start()
    load = Load()
    try:
        for i in range(2):
            load.add(BeanstalkProducer, f"bp{i}", cluster.beanstalk_addresses(), "pgr-b")
        load.add(BeanstalkConsumer, "bc", cluster.beanstalk_addresses(), "pgr-b")
        load.add(HttpProducer, "hp", cluster.http_bases(), "pgr-h")
        load.start()
        load.wait_for_acks(ACKS)
        postgres.stop()
        stopped = load.ledger.acks()
        time.sleep(OUTAGE_SECONDS)
        during = load.ledger.acks() - stopped
        postgres.start()
        # Served again: puts are acknowledged after PostgreSQL is back.
        load.wait_for_acks(ACKS, timeout=60)
        load.finish()
        leader = cluster.leader()
        left = drain(leader.beanstalk_address, sorted(load.queues))
        verdict = load.ledger.verdict(left)
        exits = {n.name: n.exits for n in cluster.nodes}
        print(f"acknowledged while PostgreSQL was down: {during}; leader after: "
              f"{leader.name}; node exits: {exits}; {verdict.line()}; first refusals: "
              f"{load.ledger.refusals}")
        assert verdict.ok, verdict.details()
        # Nothing can be committed while PostgreSQL is down; a reply or two may have been
        # on its way when it stopped.
        assert during <= len(load.clients), f"{during} puts acknowledged without PostgreSQL"
    finally:
        load.stop.set()
        cluster.stop()
        print(cluster.logs())
