"""`jobyard ctl cluster` against a real server: the table and `--json` of GET /v1/cluster.
On the file log the server is a cluster of one (tests/postgres/test_pg_cluster_view.py has
a node on PostgreSQL)."""

from __future__ import annotations

import json
import subprocess

from jobyard_testlib import HOST, free_port


def ctl(jobyard_bin, url: str, *args: str) -> str:
    done = subprocess.run([str(jobyard_bin), "ctl", "--url", url, *args],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_ctl_cluster_on_the_file_log_is_a_cluster_of_one(start_server, jobyard_bin):
    http = free_port()
    start_server(extra_args=("--http-listen", f"{HOST}:{http}"))
    url = f"http://{HOST}:{http}"
    doc = json.loads(ctl(jobyard_bin, url, "cluster", "--json"))
    assert doc["role"] == "leader" and doc["epoch"] == 0 and doc["node"] is None, doc
    table = ctl(jobyard_bin, url, "cluster").splitlines()
    assert table[0] == "single node, file log", table
    assert table[1].split() == ["LEADER", "NODE", "ROLE", "LAG"], table
    assert table[2].split()[:3] == ["*", "(this", "server)"], table
    assert "leader" in table[2] and "0 ms (this)" in table[2], table
