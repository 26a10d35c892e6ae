"""The cluster as an operator sees it on PostgreSQL storage: `jobyard ctl cluster` prints
GET /v1/cluster's table (the leader marked, its epoch and lag), and the dashboard's
overview shows the same (headless chromium), for a node that leads."""

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


def test_the_dashboard_overview_shows_the_cluster(start_pg_server):
    from browserlib import cell_text, shot, start_browser, wait_until

    http = free_port()
    start_pg_server(extra_args=("--node-name", "alpha", "--http-listen", f"{HOST}:{http}"))
    browser = start_browser()
    try:
        browser.get(f"http://{HOST}:{http}/")
        wait_until(browser, lambda d: cell_text(d, '#cluster [data-cluster="role"]'),
                   "the cluster panel")
        card = lambda key: cell_text(browser, f'#cluster [data-cluster="{key}"]')  # noqa: E731
        assert (card("node"), card("role"), card("leader")) == ("alpha", "leader", "alpha")
        assert int(card("epoch")) >= 1 and card("lag") == "0 ms"
        wait_until(browser, lambda d: "alpha" in cell_text(d, '#cluster-nodes tr[data-node="alpha"]'),
                   "the node among the live nodes")
        assert "★" in cell_text(browser, '#cluster-nodes tr[data-node="alpha"]')
        shot(browser, "cluster")
    finally:
        browser.quit()
