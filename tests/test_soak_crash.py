"""kill -9 under mixed beanstalkd and Gearman load, with compaction forced by tiny segments.

Each cycle runs, against one server and one data directory:
* beanstalkd producers (greenstalk; the `Producer` of test_crash.py) putting, deleting,
  burying, releasing and kicking their own jobs;
* Gearman clients (gearman3) submitting background jobs, acknowledged by JOB_CREATED;
* Gearman workers (gearman3) taking and completing those jobs;
then SIGKILLs the server mid-stream, restarts it, and checks that every acknowledged job is
back exactly once with its body, queue, priority and state (test_crash.verify). A Gearman
job a worker completed may be gone or back (WORK_COMPLETE has no reply, so its deletion is
never acknowledged); one submitted while the server died may exist or not, at most once.

The suite runs 2 cycles; `scripts/soak_crash.sh` runs many more (SOAK_CYCLES, default 100).
"""

from __future__ import annotations

import os
import random
import sys
import threading
import time
from pathlib import Path
from typing import Dict, List, Optional, Set

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent / "gearman"))
pytest.importorskip("gearman")
from gearman_py3 import gearman  # noqa: E402

from jobyard_testlib import data_files, free_port  # noqa: E402
from test_crash import GONE, Expect, Model, Producer, verify  # noqa: E402

FUNCTIONS = ["soak-g0", "soak-g1"]
GEARMAN_NORMAL_PRI = 1024  # the engine priority of a normal-priority Gearman job


def job_id(handle) -> int:
    handle = handle.decode() if isinstance(handle, bytes) else handle
    return int(handle.rsplit(":", 1)[1])


class Submitter(threading.Thread):
    """Submits background Gearman jobs until the server dies or `stop` is set."""

    def __init__(self, addr: str, name: str, seed: int, killed, stop):
        super().__init__(name=name, daemon=True)
        self.addr, self.rng, self.killed, self.stop = addr, random.Random(seed), killed, stop
        self.jobs: Dict[int, Expect] = {}
        self.inflight_put: Optional[bytes] = None
        self.error: Optional[str] = None
        self.acks = 0

    def run(self) -> None:
        try:
            client = gearman.GearmanClient([self.addr])
            n = 0
            while not self.stop.is_set():
                n += 1
                func = FUNCTIONS[self.rng.randrange(len(FUNCTIONS))]
                body = b"%s-%d-%d" % (self.name.encode(), n, self.rng.randrange(1 << 30))
                self.inflight_put = body
                req = client.submit_job(func, body, unique=body.decode(), background=True,
                                        wait_until_complete=False, poll_timeout=60)
                if not req.job.handle:
                    raise AssertionError(f"no handle for {body!r}")
                self.jobs[job_id(req.job.handle)] = Expect(body, func, GEARMAN_NORMAL_PRI,
                                                           "ready")
                self.inflight_put = None
                self.acks += 1
        except Exception as e:  # the kill ends every connection
            if not self.killed.is_set():
                self.error = f"{type(e).__name__}: {e!r}"


class Worker(threading.Thread):
    """Takes and completes Gearman jobs; remembers which ones it completed."""

    def __init__(self, addr: str, name: str, killed, stop):
        super().__init__(name=name, daemon=True)
        self.addr, self.killed, self.stop = addr, killed, stop
        self.completed: Set[int] = set()
        self.error: Optional[str] = None

    def run(self) -> None:
        outer = self

        class SoakWorker(gearman.GearmanWorker):
            def after_poll(self, any_activity):
                return not outer.stop.is_set()

        def complete(worker, job):
            # Recorded before the reply: the completion may be durable from here on.
            outer.completed.add(job_id(job.handle))
            return b"done"

        try:
            w = SoakWorker([self.addr])
            w.set_client_id(self.name)
            for f in FUNCTIONS:
                w.register_task(f.encode(), complete)
            w.work(poll_timeout=0.2)
        except Exception as e:
            if not self.killed.is_set():
                self.error = f"{type(e).__name__}: {e!r}"


def soak(server, gearman_addr: str, cycles: int) -> Model:
    model = Model()
    rng = random.Random(20261123)
    totals = {"beanstalk": 0, "gearman": 0, "completed": 0}
    for cycle in range(cycles):
        killed, stop = threading.Event(), threading.Event()
        producers = [
            Producer(server.address, f"c{cycle}p{i}", f"crash-{i % 3}", rng.randrange(1 << 30),
                     killed, stop, follow_up=0.9, delete_share=0.7)
            for i in range(4)
        ]
        submitters = [Submitter(gearman_addr, f"c{cycle}s{i}", rng.randrange(1 << 30), killed,
                                stop) for i in range(2)]
        workers = [Worker(gearman_addr, f"c{cycle}w{i}", killed, stop) for i in range(2)]
        threads = [*producers, *submitters, *workers]
        for t in threads:
            t.start()
        time.sleep(rng.uniform(1.0, 2.5))
        killed.set()
        server.kill9()
        stop.set()
        for t in threads:
            t.join(60)
            assert not t.is_alive(), f"{t.name} is stuck after the server died"
        errors = [f"{t.name}: {t.error}" for t in threads if t.error]
        assert not errors, f"cycle {cycle}:\n" + "\n".join(errors)
        acks = sum(p.acks for p in producers) + sum(s.acks for s in submitters)
        assert acks > 0, f"cycle {cycle}: nothing was acknowledged before the kill"
        totals["beanstalk"] += sum(p.acks for p in producers)
        totals["gearman"] += sum(s.acks for s in submitters)

        inflight = model.absorb(producers)
        for s in submitters:
            model.jobs.update(s.jobs)
            if s.jobs:
                model.max_id_seen = max(model.max_id_seen, max(s.jobs))
            if s.inflight_put is not None:
                inflight.append(s.inflight_put)
        for w in workers:
            totals["completed"] += len(w.completed)
            for jid in w.completed:
                e = model.jobs.get(jid)
                if e is not None and e.state is not GONE:
                    e.alt = e.alt | {GONE}
                # A job completed before its submitter saw JOB_CREATED (the kill came in
                # between) is an in-flight put: already allowed to be there or not.

        server.start(port=server.port)
        verify(server, model, inflight)
        print(f"cycle {cycle + 1}/{cycles}: ok ({len(model.jobs)} jobs known)", flush=True)
    live = [e for e in model.jobs.values() if e.state is not GONE]
    print(f"{cycles} kill -9 cycles: {totals['beanstalk']} beanstalkd and {totals['gearman']} "
          f"Gearman acknowledgements, {totals['completed']} Gearman completions, "
          f"{len(model.jobs)} jobs, {len(live)} live at the end")
    return model


def test_kill9_with_mixed_protocols_and_compaction_loses_and_resurrects_nothing(start_server):
    cycles = int(os.environ.get("SOAK_CYCLES", "2"))
    gport = free_port()
    gearman_addr = f"127.0.0.1:{gport}"
    server = start_server(
        fsync="always",
        extra_args=["--gearman-listen", gearman_addr,
                    "--segment-bytes", "65536", "--compact-min-bytes", "65536"],
    )
    soak(server, gearman_addr, cycles)
    if cycles >= 3:
        snapshots = [p for p in data_files(server.data_dir) if p.name.startswith("snap-")]
        assert snapshots, "meant to crash around compaction, but none happened"
