"""The Grafana dashboard (deploy/grafana/jobyard.json) queries only metrics the server
exports: a real server does a little work so every family appears, and every metric name in
every panel's PromQL (and in the template variables' queries) must be a series of its
`/metrics`. A histogram is queried through its `_bucket`, `_sum` and `_count` series, never
by its bare name; `_bucket` on a counter or gauge is no series either."""

from __future__ import annotations

import copy
import json
import re
import urllib.request
from pathlib import Path
from typing import Dict, Iterator, Set

import pytest

from jobyard_testlib import REPO, Raw, Server, binary_path, free_port

DASHBOARD = REPO / "deploy" / "grafana" / "jobyard.json"

# PromQL words that are not metric names when they stand outside a call.
KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "offset", "bool",
            "and", "or", "unless", "inf", "nan"}
IDENTIFIER = re.compile(r"[A-Za-z_:][A-Za-z0-9_:]*")


def metric_names(expr: str) -> Set[str]:
    """The metric names a PromQL expression reads: identifiers that are not function calls,
    keywords, label names (in `{...}` or `by (...)`), strings, ranges or Grafana variables."""
    e = re.sub(r'"(?:\\.|[^"\\])*"|\'(?:\\.|[^\'\\])*\'', '""', expr)
    e = re.sub(r"\{[^}]*\}", " ", e)
    e = re.sub(r"\[[^\]]*\]", " ", e)
    e = re.sub(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", e)
    e = re.sub(r"\$\{[^}]*\}|\$\w+", " ", e)
    names = set()
    for m in IDENTIFIER.finditer(e):
        before = e[m.start() - 1] if m.start() else " "
        if before.isdigit() or before == ".":  # the exponent of a number such as 1e3
            continue
        if e[m.end():].lstrip().startswith("(") or m.group().lower() in KEYWORDS:
            continue
        names.add(m.group())
    return names


def template_expr(query) -> str:
    """The PromQL inside a query variable's `label_values(EXPR, label)` (or the query itself)."""
    text = query.get("query", "") if isinstance(query, dict) else str(query)
    m = re.fullmatch(r"\s*label_values\((.*),\s*\w+\s*\)\s*", text)
    return m.group(1) if m else text


def queries(dashboard: dict) -> Iterator[tuple]:
    """(where, PromQL) for every panel target, rows' nested panels included, and every query
    variable."""
    def panels(items):
        for p in items:
            yield p
            yield from panels(p.get("panels", []))

    for panel in panels(dashboard["panels"]):
        for target in panel.get("targets", []):
            yield f"panel {panel['title']!r} target {target['refId']}", target["expr"]
    for var in dashboard.get("templating", {}).get("list", []):
        if var.get("type") == "query":
            yield f"variable ${var['name']}", template_expr(var["query"])


def exported_series(text: str) -> Set[str]:
    """Series names `/metrics` has samples for, allowed by their family's type: a histogram
    has `_bucket`, `_sum` and `_count` series; a summary its name, `_sum` and `_count`;
    counters and gauges their name."""
    kinds: Dict[str, str] = {}
    sampled = set()
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, family, kind = line.split()
            kinds[family] = kind
        elif line and not line.startswith("#"):
            sampled.add(IDENTIFIER.match(line).group())
    allowed = set()
    for family, kind in kinds.items():
        if kind == "histogram":
            allowed |= {family + "_bucket", family + "_sum", family + "_count"}
        elif kind == "summary":
            allowed |= {family, family + "_sum", family + "_count"}
        else:
            allowed.add(family)
    return allowed & sampled


def missing_metrics(dashboard: dict, series: Set[str]) -> Dict[str, Set[str]]:
    """Where the dashboard queries a metric that is not among `series`, and which."""
    missing = {}
    for where, expr in queries(dashboard):
        names = metric_names(expr)
        assert names, f"{where}: no metric found in {expr!r}"
        if names - series:
            missing[where] = names - series
    return missing


def scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as r:
        return r.read().decode()


@pytest.fixture(scope="module")
def metrics_text(tmp_path_factory) -> Iterator[str]:
    """`/metrics` of a server that put, completed, failed and buried jobs over beanstalkd
    and put one over HTTP, with its log fsynced (`--fsync always`)."""
    tmp = tmp_path_factory.mktemp("grafana")
    http_port = free_port()
    srv = Server(binary_path(), tmp / "data", tmp,
                 extra_args=["--http-listen", f"127.0.0.1:{http_port}"]).start()
    try:
        # The fsync histogram is recorded once a scrape has installed the exporter.
        scrape(http_port)
        with Raw(srv.address) as raw:
            assert raw.cmd("use grafana") == b"USING grafana"
            assert raw.cmd("watch grafana") == b"WATCHING 2"
            for end in ("delete", "bury"):
                raw.put(b"work")
                reserved = raw.cmd("reserve-with-timeout 10").split()
                assert reserved[0] == b"RESERVED", reserved
                raw.chunk(int(reserved[2]))
                command = f"{end} {int(reserved[1])}" + (" 0" if end == "bury" else "")
                assert raw.cmd(command) in (b"DELETED", b"BURIED")
            raw.put(b"waiting")
        request = urllib.request.Request(
            f"http://127.0.0.1:{http_port}/v1/queues/grafana-http/jobs",
            data=json.dumps({"body": "over http"}).encode(),
            headers={"content-type": "application/json"},
        )
        urllib.request.urlopen(request, timeout=30).read()
        yield scrape(http_port)
    finally:
        srv.stop()


@pytest.fixture(scope="module")
def dashboard() -> dict:
    return json.loads(DASHBOARD.read_text())


def test_every_metric_the_dashboard_queries_is_exported(dashboard, metrics_text):
    series = exported_series(metrics_text)
    assert "jobyard_lease_to_complete_seconds_bucket" in series, "no lease completed"
    assert "jobyard_log_fsync_seconds_bucket" in series, "no fsync recorded"
    assert missing_metrics(dashboard, series) == {}


def test_a_misspelled_or_misused_metric_is_caught(dashboard, metrics_text):
    series = exported_series(metrics_text)
    for wrong in ("jobyard_log_byte_total", "jobyard_lease_to_complete_seconds",
                  "jobyard_queue_jobs_bucket", "jobyard_connections_count"):
        broken = copy.deepcopy(dashboard)
        target = broken["panels"][1]["targets"][0]
        target["expr"] = f"sum(rate({wrong}[5m])) + {target['expr']}"
        missing = missing_metrics(broken, series)
        assert list(missing.values()) == [{wrong}], (wrong, missing)


def test_metric_names_are_read_out_of_promql():
    expr = ('histogram_quantile(0.99, sum by (le, queue) (rate(a_seconds_bucket'
            '{queue=~"$queue", x="rate(b)"}[$__rate_interval]))) / ignoring(le) c:d_total'
            ' > 1e3 and on (queue) max without (state) (e_total offset 5m)')
    assert metric_names(expr) == {"a_seconds_bucket", "c:d_total", "e_total"}
    assert template_expr({"query": "label_values(jobyard_queue_jobs, queue)"}) == "jobyard_queue_jobs"


def test_the_dashboard_is_well_formed(dashboard):
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids)), "panel ids repeat"
    titles = [p["title"] for p in dashboard["panels"]]
    for wanted in ("Jobs put, completed and failed per second", "Queue depth by state",
                   "Lease to complete", "Connections per protocol", "fsync latency",
                   "Log bytes per second", "Log records per second"):
        assert wanted in titles, wanted
    for panel in dashboard["panels"]:
        refs = [t["refId"] for t in panel.get("targets", [])]
        assert len(refs) == len(set(refs)), panel["title"]
        if panel["type"] != "row":
            assert panel["datasource"]["uid"] == "${datasource}", panel["title"]
