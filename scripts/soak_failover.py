"""The failover soak (scripts/soak_failover.sh): its own PostgreSQL, three supervised
jobyard nodes on it, mixed load of real clients (beanstalkd through greenstalk, Gearman
through gearman3, HTTP jobs and a two-stage HTTP flow through requests), and the leader
killed -9 N times at random moments. At the end everything left is drained and the ledger
(tests/failover_testlib.py) prints `lost=… resurrected=… duplicated=…`; the exit status is
1 if anything acknowledged was lost or resurrected (or a job appeared that no client sent).

    python3 scripts/soak_failover.py KILLS [--seed S] [--binary PATH] [--keep]
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from failover_testlib import (FLOW, FLOW_STAGES, BeanstalkConsumer, BeanstalkProducer,  # noqa: E402
                              FlowCreator, FlowWorker, GearmanSubmitter, GearmanWorker,
                              HttpProducer, HttpWorker, Load, declare_flow, drain, drain_flow)
from pg_testlib import Cluster, Postgres  # noqa: E402

import greenstalk  # noqa: E402

# Small sections, so that snapshots are cut (and old rows deleted) during the soak.
NODE_ARGS = ("--segment-bytes", "65536", "--compact-min-bytes", "65536")


def mixed_load(cluster: Cluster) -> Load:
    load = Load()
    beanstalk, gear, http = (cluster.beanstalk_addresses(), cluster.gearman_addresses(),
                             cluster.http_bases())
    for i in range(2):
        load.add(BeanstalkProducer, f"bp{i}", beanstalk, "soak-b")
        load.add(BeanstalkConsumer, f"bc{i}", beanstalk, "soak-b")
        load.add(GearmanSubmitter, f"gs{i}", gear, "soak-g")
    load.add(GearmanWorker, "gw", gear, "soak-g")
    load.add(HttpProducer, "hp", http, "soak-h")
    load.add(HttpWorker, "hw", http, "soak-h")
    load.add(FlowCreator, "fc", http, FLOW)
    for stage in FLOW_STAGES:
        load.add(FlowWorker, f"fw-{stage}", http, stage)
    return load


def first_put(cluster: Cluster, ledger, body: bytes, timeout: float = 60.0) -> float:
    """Puts `body` through whichever node takes it first, trying each in turn; returns the
    monotonic time of the acknowledgement (every attempt is in the ledger)."""
    deadline = time.monotonic() + timeout
    n = 0
    while time.monotonic() < deadline:
        for address in cluster.beanstalk_addresses():
            n += 1
            attempt = body + b".%d" % n
            try:
                with greenstalk.Client(address, encoding=None, use="soak-b") as c:
                    c._sock.settimeout(10)
                    ledger.put_unanswered(attempt)
                    c.put(attempt)
                    ledger.put_acked(attempt)
                    return time.monotonic()
            except (OSError, greenstalk.Error, AssertionError):
                continue
        time.sleep(0.02)
    raise AssertionError(f"no node acknowledged a put within {timeout} s of the kill")


def percentile(values, p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(p / 100 * (len(ordered) - 1))))]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("kills", type=int)
    ap.add_argument("--seed", type=int, default=int(time.time()))
    ap.add_argument("--binary", default=os.environ.get("JOBYARD_BIN",
                                                       str(ROOT / "target/debug/jobyard")))
    ap.add_argument("--keep", action="store_true", help="keep the node logs' directory")
    args = ap.parse_args()
    rng = random.Random(args.seed)
    logs = Path(tempfile.mkdtemp(prefix="jobyard-soak-failover-"))
    print(f"soak: {args.kills} kills of the leader, seed {args.seed}, binary {args.binary}, "
          f"node logs in {logs}", flush=True)

    pg = Postgres().start()
    os.environ["PGPASSWORD"] = pg.password
    db = pg.create_database("soak")
    cluster = Cluster(args.binary, pg.url(db), logs, size=3, extra_args=NODE_ARGS)
    load = None
    first_puts = []  # seconds from each kill to the first put a node acknowledged
    started = time.monotonic()
    try:
        cluster.start()
        declare_flow(cluster.leader().http_base)
        load = mixed_load(cluster).start()
        load.wait_for_acks(100)
        for k in range(args.kills):
            time.sleep(rng.uniform(0.2, 3.0))
            # A lost machine (down until another node leads) or a crash (restarted at once).
            lost_machine = rng.random() < 0.5
            old = cluster.leader()
            pid = old.pid()
            old.kill9(hold=lost_machine)
            killed = time.monotonic()
            try:
                put_at = first_put(cluster, load.ledger, b"probe-%d" % k)
                new = cluster.leader(not_pid=pid)
            finally:
                old.release()
            cluster.failovers.append(time.monotonic() - killed)
            first_puts.append(put_at - killed)
            load.wait_for_acks(50, timeout=60)
            print(f"kill {k + 1}/{args.kills} ({'machine lost' if lost_machine else 'crash'}): "
                  f"first put acknowledged {first_puts[-1]:.2f} s after, "
                  f"{new.name} leads ({cluster.failovers[-1]:.2f} s), "
                  f"{load.ledger.acks()} puts acknowledged so far", flush=True)
        load.finish()
        leader = cluster.leader()
        queues = ["soak-b", "soak-g", "soak-h"]
        left = drain(leader.beanstalk_address, queues)
        left.update(drain_flow(leader.http_base))
        verdict = load.ledger.verdict(left)
        snapshots = pg.sql("SELECT count(*), coalesce(max(section), 0) FROM jobyard.snapshots",
                           db=db)[0]
        rows = pg.sql("SELECT count(*) FROM jobyard.log", db=db)[0][0]
    except BaseException:
        if load is not None:
            load.stop.set()
        print(cluster.logs(60), file=sys.stderr)
        raise
    finally:
        cluster.stop()
        pg.destroy()
    took = time.monotonic() - started
    f = cluster.failovers
    print(f"clients: {load.summary()}")
    print(f"node exits: { {n.name: n.exits for n in cluster.nodes} }")
    for what, xs in (("kill -9 -> first put acknowledged (any node)", first_puts),
                     ("kill -9 -> a new leader answers /v1/cluster", f)):
        print(f"{what}, {len(xs)} kills: min {min(xs):.2f} s, median "
              f"{statistics.median(xs):.2f} s, p99 {percentile(xs, 99):.2f} s, "
              f"max {max(xs):.2f} s" if xs else f"{what}: no kills")
    print(f"soak took {took:.0f} s; at the end: {snapshots[0]} snapshot(s) (newest section "
          f"{snapshots[1]}), {rows} log rows")
    if load.ledger.refusals:
        print(f"first refusals: {load.ledger.refusals}")
    print(verdict.details() if not verdict.ok else verdict.line())
    if not args.keep and verdict.ok:
        for p in logs.iterdir():
            p.unlink()
        logs.rmdir()
    return 0 if verdict.ok else 1


if __name__ == "__main__":
    sys.exit(main())
