"""Schedules across a failover: two schedules ticking every second on a supervised
two-node cluster, one with `missed = "skip"` and one with `missed = "catch_up"`; the leader
is killed -9 half a second after a tick, and the node that takes over goes on ticking.

No tick is ever enqueued twice (each job carries its tick in its attributes,
docs/schedules.md), and the ticks that passed while no node led follow `missed`: the
first two after the kill cannot have fired (the lease, renewed every second for 3 s, keeps
any node from leading until 2 s after the kill); `skip` resumes with the first tick after
the new leader started, `catch_up` fires the latest tick before that once, then goes on.
"""

from __future__ import annotations

import time

import requests

from pg_testlib import Cluster

INTERVAL_MS = 1000
TICKS_AFTER = 3


def ticks(node, queue: str) -> list:
    """The tick of every job the schedule `queue` (named like its queue) put, sorted."""
    r = requests.get(f"{node.http_base}/v1/queues/{queue}/jobs?state=ready&limit=1000",
                     timeout=10)
    assert r.status_code == 200, r.text
    found = []
    for job in r.json()["jobs"]:
        attrs = requests.get(f"{node.http_base}/v1/jobs/{job['id']}", timeout=10).json()
        assert attrs["attributes"]["schedule"] == queue, attrs
        found.append(attrs["attributes"]["tick"])
    return sorted(found)


def consecutive(ts: list) -> bool:
    return all(b - a == INTERVAL_MS for a, b in zip(ts, ts[1:]))


def sleep_until(at: float) -> None:
    time.sleep(max(0.0, at - time.time()))


def test_ticks_go_on_after_a_failover_never_doubled_and_missed_as_declared(
        jobyard_bin, pg_url, tmp_path):
    cluster = Cluster(jobyard_bin, pg_url, tmp_path, size=2).start()
    try:
        leader = cluster.leader()
        for name, missed in (("skipper", "skip"), ("catcher", "catch_up")):
            r = requests.put(f"{leader.http_base}/v1/schedules/{name}", timeout=10,
                             json={"queue": name, "interval": "1s", "missed": missed})
            assert r.status_code == 201, r.text
        # Let three ticks fire, and kill half a second after one.
        kill_at = int(time.time()) + 3.5
        sleep_until(kill_at)
        new = cluster.kill_leader()
        killed_ms = int(kill_at * 1000)
        sleep_until(time.time() + TICKS_AFTER + 0.5)
        first_missed = (killed_ms // INTERVAL_MS + 1) * INTERVAL_MS
        second_missed = first_missed + INTERVAL_MS

        got = {name: ticks(new, name) for name in ("skipper", "catcher")}
        print(f"failover {cluster.failovers[0]:.2f} s; kill at {killed_ms}; ticks {got}")
        for name, ts in got.items():
            assert len(ts) == len(set(ts)), f"{name}: a tick enqueued twice: {ts}"
            assert all(t % INTERVAL_MS == 0 for t in ts), ts
            before = [t for t in ts if t < killed_ms]
            after = [t for t in ts if t > killed_ms]
            assert len(before) >= 2 and consecutive(before), (name, before)
            assert len(after) >= TICKS_AFTER - 1, f"{name}: ticks did not go on: {ts}"
            assert consecutive(after), f"{name}: a tick missing after the takeover: {ts}"
            assert first_missed not in ts, f"{name}: {first_missed} fired with no leader"
        skipped, caught = got["skipper"], got["catcher"]
        assert second_missed not in skipped, skipped
        resumed = min(t for t in skipped if t > killed_ms)
        caught_up = min(t for t in caught if t > killed_ms)
        # catch_up fired the last tick before the new leader's start once; skip did not.
        assert caught_up == resumed - INTERVAL_MS, (caught, skipped)
    finally:
        cluster.stop()
        print(cluster.logs())
