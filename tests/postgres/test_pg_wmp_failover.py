"""WMP workers across a failover: one worker, many managers (the protocol's own model).

Two supervised nodes share one PostgreSQL storage, each with `--wmp-listen` on its own fixed
endpoint. Only the leader binds its endpoint; a standby does not. One real worker, the
project's `jobyard wmp-worker` command worker (libzmq, one DEALER per manager), is given
both endpoints: the DEALER to the standby's endpoint keeps trying to connect (libzmq's
reconnect) and the one to the leader gets work. Jobs are put through beanstalkd before the
leader is killed -9 mid-stream (some of them handed out and running) and through HTTP after,
into the WMP role's queue. Every job must then be done by the worker, none lost, the jobs
after the kill by the new leader's manager, and nothing left in the queue: the jobs the dead
leader had handed out come back from the new leader (at-least-once, as on a disconnect).
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import greenstalk
import pytest
import requests

from jobyard_testlib import HOST, free_port
from pg_testlib import Cluster, SupervisedNode

QUEUE = "wmp-fo"
JOBS_BEFORE = 40
JOBS_AFTER = 20
# Generous: how long a good cluster may take, never how fast it must be. The worker's
# DEALER to the new leader's endpoint retries at libzmq's reconnect interval (docs/wmp.md).
ALL_DONE_WITHIN = 30.0


@pytest.fixture
def wmp_cluster(jobyard_bin, pg_url, tmp_path):
    """Two supervised nodes, each a WMP manager named after the node on its own endpoint."""
    cluster = Cluster(jobyard_bin, pg_url, tmp_path, size=0, names=[])
    for name in ("n1", "n2"):
        endpoint = f"tcp://{HOST}:{free_port()}"
        node = SupervisedNode(jobyard_bin, pg_url, name, tmp_path,
                              extra_args=("--wmp-listen", endpoint, "--wmp-name", name))
        node.wmp_endpoint = endpoint
        cluster.nodes.append(node)
    cluster.start()
    yield cluster
    cluster.stop()
    print(cluster.logs())


@pytest.fixture
def wmp_worker(jobyard_bin, tmp_path):
    """Starts `jobyard wmp-worker` on the given endpoints; each job appends
    `BODY MANAGER ATTEMPT UNIX_TIME` to the returned file after a short sleep, so jobs are running
    when the leader dies."""
    made = []
    done_log = tmp_path / "done.log"
    done_log.touch()

    def start(endpoints):
        script = 'sleep 0.1; b=$(cat); echo "$b $WMP_MANAGER $WMP_ATTEMPT $(date +%s.%N)" >> "$DONE_LOG"'
        argv = [str(jobyard_bin), "wmp-worker", "--role", QUEUE, "--concurrency", "3",
                "--name", "fo-worker"]
        for endpoint in endpoints:
            argv += ["--connect", endpoint]
        argv += ["--", "sh", "-c", script]
        log = open(tmp_path / "worker.log", "wb")
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log,
                                stderr=subprocess.STDOUT,
                                env={"PATH": "/usr/bin:/bin", "DONE_LOG": str(done_log),
                                     "JOBYARD_LOG": "debug"})
        made.append((proc, log))
        return done_log

    yield start
    for proc, log in made:
        proc.kill()
        proc.wait()
        log.close()
        print(f"--- worker log:\n{(tmp_path / 'worker.log').read_text(errors='replace')[-4000:]}")


def done_records(done_log: Path):
    """body -> [(manager, attempt, unix time), ...] for every run the worker finished."""
    runs = {}
    for line in done_log.read_text().splitlines():
        body, manager, attempt, at = line.split()
        runs.setdefault(body, []).append((manager, int(attempt), float(at)))
    return runs


def wait_for(what, predicate, timeout):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"{what} not within {timeout} s"
        time.sleep(0.05)


def pending_jobs(node) -> int:
    """Jobs of QUEUE still ready, reserved (handed out) or delayed on `node`."""
    with greenstalk.Client(node.beanstalk_address, use=QUEUE) as c:
        try:
            st = c.stats_tube(QUEUE)
        except greenstalk.NotFoundError:
            return 0
    return sum(int(st[k]) for k in ("current-jobs-ready", "current-jobs-reserved",
                                    "current-jobs-delayed"))


def test_worker_on_every_node_keeps_working_through_a_kill9_of_the_leader(wmp_cluster,
                                                                           wmp_worker):
    old = wmp_cluster.leader()
    done_log = wmp_worker([n.wmp_endpoint for n in wmp_cluster.nodes])

    before = [f"before-{i}" for i in range(JOBS_BEFORE)]
    with greenstalk.Client(old.beanstalk_address, use=QUEUE) as c:
        for body in before:
            c.put(body)
    # Mid-way: some done, the rest queued or running on the worker when the leader dies.
    wait_for("a third of the jobs done", lambda: len(done_records(done_log)) >= JOBS_BEFORE // 3,
             ALL_DONE_WITHIN)

    killed = time.time()
    new = wmp_cluster.kill_leader(hold=True)
    assert new is not old

    after = [f"after-{i}" for i in range(JOBS_AFTER)]
    for body in after:
        r = requests.post(f"{new.http_base}/v1/queues/{QUEUE}/jobs", json={"body": body},
                          timeout=10)
        assert r.status_code == 201, r.text

    every = set(before) | set(after)
    wait_for("every job done", lambda: every <= set(done_records(done_log)), ALL_DONE_WITHIN)
    wait_for("the queue empty on the new leader", lambda: pending_jobs(new) == 0,
             ALL_DONE_WITHIN)

    runs = done_records(done_log)
    assert set(runs) == every, f"jobs nobody put: {set(runs) - every}"
    for body in after:
        assert {m for m, _, _ in runs[body]} == {new.name}, (body, runs[body])
    again = {b: r for b, r in runs.items() if len(r) > 1}
    # The jobs running when the leader died: their DONEs went nowhere, so the new leader
    # handed them out again (the worker keeps all its slots busy while jobs wait).
    by_both = [b for b in before if {m for m, _, _ in runs[b]} == {old.name, new.name}]
    assert by_both, f"no job the dead leader handed out was handed out again: {runs}"
    by_new = [at for r in runs.values() for m, _, at in r if m == new.name]
    print(f"failover {wmp_cluster.failovers[0]:.2f} s; the new leader's first job done "
          f"{min(by_new) - killed:.2f} s and every job {max(by_new) - killed:.2f} s after the "
          f"kill; jobs put before the kill done by the new leader: "
          f"{sum(any(m == new.name for m, _, _ in runs[b]) for b in before)}; "
          f"run by both leaders: {len(by_both)}; run more than once: {len(again)}")
