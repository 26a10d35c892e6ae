"""The cluster as an operator sees it on PostgreSQL storage: `jobyard ctl cluster` prints
GET /v1/cluster's table (the leader marked, its epoch and lag), for a node that leads."""

from __future__ import annotations

import json
import subprocess

from jobyard_testlib import HOST, free_port


def ctl(jobyard_bin, url: str, *args: str) -> str:
    done = subprocess.run([str(jobyard_bin), "ctl", "--url", url, *args],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_ctl_cluster_shows_the_leading_node(start_pg_server, jobyard_bin):
    http = free_port()
    start_pg_server(extra_args=("--node-name", "alpha", "--http-listen", f"{HOST}:{http}"))
    url = f"http://{HOST}:{http}"
    doc = json.loads(ctl(jobyard_bin, url, "cluster", "--json"))
    assert (doc["role"], doc["node"], doc["leader"]) == ("leader", "alpha", "alpha"), doc
    assert doc["epoch"] >= 1, doc
    table = ctl(jobyard_bin, url, "cluster").splitlines()
    assert table[0] == f"node alpha: leader, epoch {doc['epoch']}, lag 0 ms", table
    assert table[2].split() == ["*", "alpha", "leader", "0", "ms", "(this)"], table
