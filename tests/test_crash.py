"""The durability promise, tested by crashing a real server under load.

Producer threads (greenstalk clients) put jobs as fast as the server acknowledges them and
also delete, bury, release-with-delay and kick some of their own jobs, recording every
acknowledged result. The server is `kill -9`ed mid-stream, restarted on the same data
directory, and every acknowledged job must be there exactly once with its body, tube,
priority and state; deleted ones must be gone; nothing may be duplicated; new ids must
continue above every old one. An operation that was sent but not acknowledged when the
server died may have happened or not, and the check allows both outcomes.

With `--fsync always` the promise holds even for power loss; with `interval=<ms>` and
`never` replies come after write(2), so a process crash (which is what kill -9 is) must
still lose nothing that was acknowledged.
"""

from __future__ import annotations

import random
import threading
import time
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Set

import greenstalk
import pytest

from jobyard_testlib import Raw, data_files, total_jobs

GONE = None  # the "state" of a deleted job


@dataclass
class Expect:
    body: bytes
    tube: str
    pri: int
    state: Optional[str]  # ready | delayed | buried | GONE
    # Outcomes also acceptable after a crash because an operation on this job was sent but
    # not acknowledged. Empty when nothing was in flight.
    alt: Set[Optional[str]] = field(default_factory=set)


class Producer(threading.Thread):
    """Puts and manipulates its own jobs until the server dies or `stop` is set."""

    def __init__(self, address, name: str, tube: str, seed: int, killed: threading.Event,
                 stop: threading.Event, follow_up: float = 0.4, delete_share: float = 0.3):
        super().__init__(name=name, daemon=True)
        self.follow_up = follow_up  # chance of acting on an earlier job after each put
        self.delete_share = delete_share  # share of those actions that are deletes
        self.address = address
        self.tube = tube
        self.rng = random.Random(seed)
        self.killed = killed
        self.stop = stop
        self.jobs: Dict[int, Expect] = {}
        self.inflight_put: Optional[bytes] = None
        self.error: Optional[str] = None
        self.acks = 0
        self.n = 0

    def run(self) -> None:
        try:
            c = greenstalk.Client(self.address, encoding=None, use=self.tube)
            c._sock.settimeout(120)
            self.loop(c)
        except (OSError, ConnectionError, AssertionError) as e:
            # AssertionError: greenstalk asserts on a reply cut short by the crash
            if not self.killed.is_set():
                self.error = f"connection failed before the kill: {e!r}"
        except Exception as e:  # a reply the server should not have sent
            self.error = f"{type(e).__name__}: {e!r}"

    def loop(self, c: greenstalk.Client) -> None:
        rng = self.rng
        live: List[int] = []
        while not self.stop.is_set():
            self.n += 1
            body = b"%s-%d-" % (self.name.encode(), self.n) + bytes(
                rng.randrange(256) for _ in range(rng.randrange(0, 64))
            )
            pri = rng.randrange(2**32)
            delayed = rng.random() < 0.1
            self.inflight_put = body
            jid = c.put(body, priority=pri, delay=3600 if delayed else 0, ttr=600)
            self.jobs[jid] = Expect(body, self.tube, pri, "delayed" if delayed else "ready")
            self.inflight_put = None
            self.acks += 1
            live.append(jid)

            if rng.random() < self.follow_up:
                i = rng.randrange(len(live))
                jid = live[i]
                e = self.jobs[jid]
                choice = rng.random()
                if choice < self.delete_share:
                    e.alt = {GONE}
                    c.delete(jid)
                    e.state, e.alt = GONE, set()
                    live[i] = live[-1]
                    live.pop()
                elif e.state == "ready" and choice < (1 + self.delete_share) / 2:
                    job = c.reserve_job(jid)
                    assert job.body == e.body, (jid, job.body, e.body)
                    new_pri = rng.randrange(2**32)
                    e.alt = {"buried"}
                    c.bury(job, priority=new_pri)
                    e.state, e.pri, e.alt = "buried", new_pri, set()
                elif e.state == "ready":
                    job = c.reserve_job(jid)
                    assert job.body == e.body, (jid, job.body, e.body)
                    new_pri = rng.randrange(2**32)
                    e.alt = {"delayed"}
                    c.release(job, priority=new_pri, delay=3600)
                    e.state, e.pri, e.alt = "delayed", new_pri, set()
                else:  # buried or delayed
                    e.alt = {"ready"}
                    c.kick_job(jid)
                    e.state, e.alt = "ready", set()
                self.acks += 1


class Model:
    """What the server has acknowledged, across rounds."""

    def __init__(self):
        self.jobs: Dict[int, Expect] = {}
        self.max_id_seen = 0

    def absorb(self, producers: List[Producer]) -> List[bytes]:
        inflight = []
        for p in producers:
            self.jobs.update(p.jobs)
            if p.jobs:
                self.max_id_seen = max(self.max_id_seen, max(p.jobs))
            if p.inflight_put is not None:
                inflight.append(p.inflight_put)
        return inflight


def verify(server, model: Model, inflight_puts: List[bytes]) -> None:
    """Checks the restarted server against the model, then resolves every ambiguity in the
    model to what the server shows (so the next round expects exactly that)."""
    with Raw(server.address, timeout=120) as raw:
        probe_id = raw.put(b"probe", pri=0)
        assert probe_id > model.max_id_seen, (
            f"new id {probe_id} is not above the ids acknowledged before the crash "
            f"(max {model.max_id_seen})"
        )
        found = raw.jobs(range(1, probe_id))
        stats = raw.stats()
        assert raw.cmd(f"delete {probe_id}") == b"DELETED"

    # exactly these jobs exist: nothing hides above the probe's id
    assert total_jobs(stats) == len(found) + 1, (total_jobs(stats), len(found))
    assert int(stats["current-jobs-reserved"]) == 0

    problems = []
    for jid, e in model.jobs.items():
        got = found.get(jid)
        state = got["state"] if got else GONE
        if state != e.state and state not in e.alt:
            problems.append(f"job {jid}: expected {e.state} (or {e.alt or 'nothing else'}), found {state}")
            continue
        if got is None:
            continue
        if got["body"] != e.body:
            problems.append(f"job {jid}: body {got['body'][:40]!r} != {e.body[:40]!r}")
        if got["tube"] != e.tube:
            problems.append(f"job {jid}: tube {got['tube']} != {e.tube}")
        if not e.alt and got["pri"] != e.pri:
            problems.append(f"job {jid}: pri {got['pri']} != {e.pri}")

    # anything not acknowledged must be one of the puts in flight at the crash, at most once
    unknown = {jid: j for jid, j in found.items() if jid not in model.jobs}
    bodies = [j["body"] for j in unknown.values()]
    for jid, j in unknown.items():
        if j["body"] not in inflight_puts:
            problems.append(f"job {jid} ({j['body'][:40]!r}) was never acknowledged nor in flight")
    if len(bodies) != len(set(bodies)):
        problems.append("an unacknowledged put appears twice")

    all_bodies = [j["body"] for j in found.values()]
    if len(all_bodies) != len(set(all_bodies)):
        dupes = {b for b in all_bodies if all_bodies.count(b) > 1}
        problems.append(f"duplicated jobs: {sorted(dupes)[:5]}")

    assert not problems, f"{len(problems)} problems after restart:\n" + "\n".join(problems[:30])

    # resolve in-flight outcomes to what survived, and adopt surviving in-flight puts
    for jid, e in model.jobs.items():
        got = found.get(jid)
        if e.alt:
            e.state = got["state"] if got else GONE
            if got:
                e.pri = got["pri"]
            e.alt = set()
    for jid, j in unknown.items():
        model.jobs[jid] = Expect(j["body"], j["tube"], j["pri"], j["state"])
    model.max_id_seen = max(model.max_id_seen, probe_id)


def crash_rounds(server, rounds: int, producers_per_round: int = 6, run_for=(1.0, 2.0),
                 **producer_args) -> Model:
    model = Model()
    rng = random.Random(20240601)
    total_acks = 0
    for rnd in range(rounds):
        killed, stop = threading.Event(), threading.Event()
        producers = [
            Producer(server.address, f"r{rnd}p{i}", f"crash-{i % 3}", rng.randrange(1 << 30),
                     killed, stop, **producer_args)
            for i in range(producers_per_round)
        ]
        for p in producers:
            p.start()
        time.sleep(rng.uniform(*run_for))
        killed.set()
        server.kill9()
        stop.set()
        for p in producers:
            p.join(60)
            assert not p.is_alive(), f"{p.name} is stuck after the server died"
        errors = [f"{p.name}: {p.error}" for p in producers if p.error]
        assert not errors, "\n".join(errors)
        acks = sum(p.acks for p in producers)
        assert acks > 0, f"round {rnd}: nothing was acknowledged before the kill"
        total_acks += acks
        inflight = model.absorb(producers)

        server.start(port=server.port)
        verify(server, model, inflight)
    live = [e for e in model.jobs.values() if e.state is not GONE]
    states = {s for s in (e.state for e in live)}
    # the scenario exercised what it claims to (cheap sanity, not a speed assertion)
    assert total_acks >= 10 and live
    print(f"{rounds} crash rounds: {total_acks} acknowledged operations, {len(model.jobs)} jobs, "
          f"{len(live)} live in states {sorted(states)}")
    return model


def test_kill9_with_fsync_always_loses_nothing_acknowledged(start_server):
    server = start_server(fsync="always")
    crash_rounds(server, rounds=3)


@pytest.mark.parametrize("fsync", ["interval=50", "never"])
def test_kill9_with_write_acks_loses_nothing_acknowledged(start_server, fsync):
    server = start_server(fsync=fsync)
    crash_rounds(server, rounds=2, run_for=(0.8, 1.5))


def test_kill9_while_compacting_loses_nothing(start_server):
    # small segments and an eager compactor: snapshots are written while jobs come and go,
    # so the kill can land in the middle of one
    server = start_server(
        fsync="always",
        extra_args=["--segment-bytes", "65536", "--compact-min-bytes", "65536"],
    )
    # mostly deletes, so the log holds far more than the live jobs and compaction kicks in
    crash_rounds(server, rounds=3, run_for=(1.5, 2.5), follow_up=0.95, delete_share=0.9)
    snapshots = [p for p in data_files(server.data_dir) if p.name.startswith("snap-")]
    assert snapshots, "the scenario meant to crash around compaction, but none happened"
