"""The failover soak (scripts/soak_failover.sh): its own PostgreSQL, three supervised
jobyard nodes on it, mixed load of real clients (beanstalkd through greenstalk, Gearman
through gearman3, HTTP jobs and a two-stage HTTP flow through requests), and the leader
taken away N times at random moments (`FAULTS`: killed -9 as a crash or a lost machine, or
paused past its lease). At the end everything left is drained and the ledger
(tests/failover_testlib.py) prints `lost=… resurrected=… duplicated=…`; the exit status is
1 if anything acknowledged was lost or resurrected (or a job appeared that no client sent).

    python3 scripts/soak_failover.py KILLS [--seed S] [--binary PATH] [--keep]
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from failover_testlib import (FLOW, FLOW_STAGES, BeanstalkConsumer, BeanstalkProducer,  # noqa: E402
                              FlowCreator, FlowWorker, GearmanSubmitter, GearmanWorker,
                              HttpProducer, HttpWorker, Load, beanstalk_client, declare_flow,
                              drain, drain_flow)
from pg_testlib import STEP_DOWN_EXIT, Cluster, Postgres  # noqa: E402

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


def first_put(cluster: Cluster, ledger, body: bytes, skip=None, timeout: float = 60.0) -> float:
    """Puts `body` through every node (but `skip`) at once, a thread each trying again after
    a failure, until one acknowledges; returns the monotonic time of the first
    acknowledgement (every attempt is in the ledger). In parallel, so that an attempt
    stuck on one node (a door still spliced to a paused leader) does not delay the figure."""
    done = threading.Event()
    acked: list = []
    deadline = time.monotonic() + timeout

    def probe(node) -> None:
        n = 0
        while not done.is_set() and time.monotonic() < deadline:
            n += 1
            attempt = body + b".%s.%d" % (node.name.encode(), n)
            try:
                # A put takes milliseconds; one stuck behind a paused leader is given up.
                with beanstalk_client(node.beanstalk_address, timeout=2, use="soak-b") as c:
                    ledger.put_unanswered(attempt)
                    c.put(attempt)
                    ledger.put_acked(attempt)
                    acked.append(time.monotonic())
                    done.set()
            except (OSError, greenstalk.Error, AssertionError):
                time.sleep(0.02)

    threads = [threading.Thread(target=probe, args=(node,), daemon=True)
               for node in cluster.nodes if node is not skip]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout + 5)
    if not acked:
        raise AssertionError(f"no node acknowledged a put within {timeout} s of the fault")
    return min(acked)


# How the leader is taken away: a crash (kill -9, restarted at once), a lost machine ("lost":
# kill -9, down until another node leads), a pause past the lease (SIGSTOP until another node leads,
# then SIGCONT: the old leader, fenced, must step down with exit 75).
FAULTS = ("crash", "lost", "paused")
# The soak's default: kill -9 only (issue 27's failover figure is over kills).
DEFAULT_FAULTS = "crash,lost"


def fault(cluster: Cluster, load: Load, kind: str, k: int):
    """Takes the leader away; returns (seconds to the first acknowledged put, new leader)."""
    old = cluster.leader()
    pid = old.pid()
    if kind == "paused":
        os.kill(pid, signal.SIGSTOP)
    else:
        old.kill9(hold=kind == "lost")
    at = time.monotonic()
    answered: list = []

    def watch_leader() -> None:
        answered.append((cluster.leader(60, not_pid=pid), time.monotonic()))

    watcher = threading.Thread(target=watch_leader, daemon=True)
    watcher.start()
    try:
        # A paused leader would hold the probe's put: only the others are tried.
        put_at = first_put(cluster, load.ledger, b"probe-%d" % k,
                           skip=old if kind == "paused" else None)
        watcher.join(60)
        assert answered, "no new leader answered"
        new, led_at = answered[0]
    finally:
        if kind == "paused":
            os.kill(pid, signal.SIGCONT)
        old.release()
    cluster.failovers.append(led_at - at)
    if kind == "paused":
        deadline = time.monotonic() + 30
        while old.pid() == pid:
            assert time.monotonic() < deadline, f"the paused leader {old.name} did not step down"
            time.sleep(0.05)
        assert old.exits[-1] == STEP_DOWN_EXIT, f"the paused leader exited {old.exits[-1]}"
    return put_at - at, new


def percentile(values, p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(p / 100 * (len(ordered) - 1))))]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("kills", type=int, help="how many times the leader is taken away")
    ap.add_argument("--faults", default=os.environ.get("SOAK_FAULTS", DEFAULT_FAULTS),
                    help=f"comma-separated kinds to pick from at random: {', '.join(FAULTS)} "
                         f"(default {DEFAULT_FAULTS})")
    ap.add_argument("--seed", type=int, default=int(time.time()))
    ap.add_argument("--binary", default=os.environ.get("JOBYARD_BIN",
                                                       str(ROOT / "target/debug/jobyard")))
    ap.add_argument("--keep", action="store_true", help="keep the node logs' directory")
    args = ap.parse_args()
    rng = random.Random(args.seed)
    faults = [f.strip() for f in args.faults.split(",") if f.strip()]
    assert faults and all(f in FAULTS for f in faults), f"--faults: pick from {FAULTS}"
    logs = Path(tempfile.mkdtemp(prefix="jobyard-soak-failover-"))
    print(f"soak: the leader taken away {args.kills} times ({', '.join(faults)}), seed "
          f"{args.seed}, binary {args.binary}, "
          f"node logs in {logs}", flush=True)

    pg = Postgres().start()
    os.environ["PGPASSWORD"] = pg.password
    db = pg.create_database("soak")
    cluster = Cluster(args.binary, pg.url(db), logs, size=3, extra_args=NODE_ARGS)
    load = None
    # Seconds from each fault to the first put a node acknowledged (a probe client trying
    # every node's beanstalkd address in turn), and to a new leader's answer.
    first_puts = {f: [] for f in FAULTS}
    failovers = {f: [] for f in FAULTS}
    started = time.monotonic()
    try:
        cluster.start()
        declare_flow(cluster.leader().http_base)
        load = mixed_load(cluster).start()
        load.wait_for_acks(100)
        for k in range(args.kills):
            time.sleep(rng.uniform(0.2, 3.0))
            kind = rng.choice(faults)
            put_after, new = fault(cluster, load, kind, k)
            first_puts[kind].append(put_after)
            failovers[kind].append(cluster.failovers[-1])
            load.wait_for_acks(50, timeout=60)
            print(f"fault {k + 1}/{args.kills} ({kind}): first put acknowledged {put_after:.2f} s "
                  f"after, {new.name} leads ({cluster.failovers[-1]:.2f} s), "
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
    print(f"clients: {load.summary()}")
    print(f"node exits: { {n.name: n.exits for n in cluster.nodes} }")
    kills = [*first_puts["crash"], *first_puts["lost"]]
    groups = [("kill -9 (crash or lost machine) -> first put acknowledged", kills),
              ("kill -9 -> a new leader answers /v1/cluster",
               [*failovers["crash"], *failovers["lost"]]),
              ("pause past the lease -> first put acknowledged by another node",
               first_puts["paused"])]
    for what, xs in groups:
        if xs:
            print(f"{what}, {len(xs)} times: min {min(xs):.2f} s, median "
                  f"{statistics.median(xs):.2f} s, p99 {percentile(xs, 99):.2f} s, "
                  f"max {max(xs):.2f} s")
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
