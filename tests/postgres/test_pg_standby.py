"""Hot standbys on `--storage postgres://` (docs/postgres.md, *Standbys*): a standby follows
the log into its engine as the leader commits, reports its role, leader and lag in
`GET /v1/cluster`, and takes over after kill -9 of the leader replaying only the last
batches; a standby that joins late loads the newest snapshot, and one that compaction
passed by (stopped while the leader compacted) loads it again, both taking over with every
acknowledged job; a leader that loses PostgreSQL steps down (exit 75) within its bound
and, restarted, leads again once PostgreSQL is back, with every acknowledged job."""

from __future__ import annotations

import re
import signal
import socket
import time

import greenstalk
import pytest

from pg_testlib import Cluster, SupervisedNode

STEP_DOWN_EXIT = 75
# The leader's bound without renewals (HOLD_LIMIT in crates/storage/src/postgres/keeper.rs).
HOLD_LIMIT_S = 10
# Puts or deletes sent before their replies are read.
PIPELINE = 500

TOOK_OVER = re.compile(
    r"took over schema \S+ as (\S+) \(epoch (\d+)\): replayed (\d+) records in (\d+) "
    r"batches at takeover .*\((\d+) records applied in all while following\)"
)


@pytest.fixture
def cluster(jobyard_bin, pg_url, tmp_path):
    """Makes (without starting) a supervised cluster on the test's storage."""
    made = []

    def make(size=2, extra_args=()):
        c = Cluster(jobyard_bin, pg_url, tmp_path, size=size, extra_args=extra_args)
        made.append(c)
        return c

    yield make
    for c in made:
        c.stop()
        print(c.logs(60))


# -- a pipelined beanstalkd client, so tens of thousands of jobs take seconds -------------


def read_lines(conn: socket.socket, buf: bytearray, n: int) -> list:
    """Reads `n` reply lines (a RESERVED line with its body counts as one: `(line, body)`)."""
    out = []
    while len(out) < n:
        end = buf.find(b"\r\n")
        if end >= 0:
            line = bytes(buf[:end])
            if line.startswith(b"RESERVED"):
                size = int(line.split()[2])
                if len(buf) < end + 2 + size + 2:
                    pass  # the body is not all here yet
                else:
                    body = bytes(buf[end + 2:end + 2 + size])
                    del buf[:end + 2 + size + 2]
                    out.append((line, body))
                    continue
            else:
                del buf[:end + 2]
                out.append((line, None))
                continue
        chunk = conn.recv(1 << 16)
        assert chunk, f"the server closed the connection after {len(out)} of {n} replies"
        buf.extend(chunk)
    return out


def put_many(address, bodies) -> list:
    """Puts every body (acknowledged before this returns); returns the ids."""
    ids = []
    with socket.create_connection(address, timeout=60) as conn:
        buf = bytearray()
        for at in range(0, len(bodies), PIPELINE):
            chunk = bodies[at:at + PIPELINE]
            conn.sendall(b"".join(b"put 0 0 60 %d\r\n%s\r\n" % (len(b), b) for b in chunk))
            for line, _ in read_lines(conn, buf, len(chunk)):
                assert line.startswith(b"INSERTED "), line
                ids.append(int(line.split()[1]))
    return ids


def delete_many(address, ids) -> None:
    with socket.create_connection(address, timeout=60) as conn:
        buf = bytearray()
        for at in range(0, len(ids), PIPELINE):
            chunk = ids[at:at + PIPELINE]
            conn.sendall(b"".join(b"delete %d\r\n" % i for i in chunk))
            for line, _ in read_lines(conn, buf, len(chunk)):
                assert line == b"DELETED", line


def drain(address, expect: int) -> list:
    """Reserves and deletes every ready job of `default`; returns the bodies. Waits up to
    30 s for `expect` of them: a new leader may hold hand-outs for a moment (its lease
    renewal late on a busy machine), and what is missing then is found by the caller."""
    bodies = []
    deadline = time.monotonic() + 30
    with socket.create_connection(address, timeout=60) as conn:
        buf = bytearray()
        while True:
            conn.sendall(b"reserve-with-timeout 0\r\n" * PIPELINE)
            got = [(line, body) for line, body in read_lines(conn, buf, PIPELINE)
                   if line.startswith(b"RESERVED")]
            bodies.extend(body for _, body in got)
            if got:
                conn.sendall(b"".join(b"delete %s\r\n" % line.split()[1] for line, _ in got))
                for line, _ in read_lines(conn, buf, len(got)):
                    assert line == b"DELETED", line
            if len(got) < PIPELINE:
                if len(bodies) >= expect or time.monotonic() > deadline:
                    return bodies
                time.sleep(0.2)


# -- waiting on what the nodes say ---------------------------------------------------------


def wait_for(what: str, check, timeout: float = 30.0, nodes=()):
    deadline = time.monotonic() + timeout
    while True:
        got = check()
        if got:
            return got
        if time.monotonic() > deadline:
            tails = "\n".join(f"== {n.name}:\n{n.log_tail(25)}" for n in nodes)
            raise AssertionError(f"{what}: not within {timeout} s\n{tails}")
        time.sleep(0.1)


def caught_up_standby(node: SupervisedNode, leader: str):
    """The standby's /v1/cluster once it follows `leader` with no lag and lists both
    nodes, else None."""
    doc = node.cluster()
    if (doc and doc["role"] == "standby" and doc["leader"] == leader and doc["lag_ms"] == 0
            and {n["node"] for n in doc["nodes"]} == {leader, node.name}):
        return doc
    return None


def took_over(node: SupervisedNode) -> tuple:
    """(replayed at takeover, records applied in all) from the node's takeover line."""
    found = TOOK_OVER.findall(node.log_path.read_text(errors="replace"))
    assert found, node.log_tail()
    _, _, replayed, _, total = found[-1]
    return int(replayed), int(total)


# -- the tests -------------------------------------------------------------------------------


def test_a_standby_follows_the_log_and_takes_over_replaying_only_the_tail(cluster):
    c = cluster(size=2).start()
    leader, standby = c.nodes
    assert c.leader() is leader
    bodies = [b"job-%d" % i for i in range(3000)]
    ids = put_many(leader.beanstalk_address, bodies)
    delete_many(leader.beanstalk_address, ids[:1000])
    kept = set(bodies[1000:])

    doc = wait_for("the standby to follow with no lag",
                   lambda: caught_up_standby(standby, "n1"), nodes=c.nodes)
    assert doc["node"] == "n2" and doc["epoch"] == 1, doc
    assert {(n["node"], n["role"]) for n in doc["nodes"]} == {("n1", "leader"), ("n2", "standby")}
    # The leader refreshes its list every second.
    both = {("n1", "leader"), ("n2", "standby")}
    leader_doc = wait_for(
        "the leader to list its standby",
        lambda: (d := leader.cluster()) and {(n["node"], n["role"]) for n in d["nodes"]} == both
        and d, nodes=c.nodes)
    assert leader_doc["role"] == "leader" and leader_doc["lag_ms"] == 0, leader_doc

    # A few more after the standby caught up: the tail it may have to read at takeover.
    tail = [b"tail-%d" % i for i in range(5)]
    put_many(leader.beanstalk_address, tail)
    new = c.kill_leader(hold=True)
    assert new is standby
    print(f"failover (kill -9 to the new leader answering): {c.failovers[-1]:.2f} s")
    replayed, total = took_over(standby)
    print(f"takeover replayed {replayed} of {total} records")
    # 3000 puts and 1000 deletes were applied while following; the takeover read at most
    # the last few batches.
    assert total >= 4000, total
    assert replayed <= 100, (replayed, total)
    expected = kept | set(tail)
    assert sorted(drain(standby.beanstalk_address, len(expected))) == sorted(expected)


def wait_for_compaction(postgres, db: str, after_section: int, nodes) -> int:
    """Waits for a complete snapshot newer than `after_section` with the log rows it
    covers gone; returns its section."""

    def compacted():
        section = postgres.sql(
            "SELECT coalesce(max(section), 0) FROM jobyard.snapshots WHERE complete", db=db
        )[0][0]
        section = int(section)
        if section <= after_section:
            return None
        older = postgres.sql(f"SELECT count(*) FROM jobyard.log WHERE section < {section}",
                             db=db)[0][0]
        return section if int(older) == 0 else None

    return wait_for("a compaction", compacted, timeout=60, nodes=nodes)


def test_a_late_standby_loads_the_snapshot_and_one_compaction_passed_reloads(
        cluster, postgres, pg_url):
    db = pg_url.rsplit("/", 1)[1]
    c = cluster(size=2, extra_args=("--segment-bytes", "65536",
                                    "--compact-min-bytes", "262144"))
    leader, late = c.nodes
    leader.start()
    assert c.leader() is leader
    bodies = [b"early-%d" % i for i in range(20_000)]
    ids = put_many(leader.beanstalk_address, bodies)
    delete_many(leader.beanstalk_address, ids[::2])
    kept = set(bodies[1::2])
    first = wait_for_compaction(postgres, db, 0, c.nodes)

    # A standby joining now finds the snapshot and the batches after it.
    late.start()
    wait_for("the late standby to follow", lambda: caught_up_standby(late, "n1"),
             timeout=60, nodes=c.nodes)
    loaded = re.search(r"loaded (\d+) records of schema \S+ newest snapshot",
                       late.log_path.read_text(errors="replace"))
    assert loaded and int(loaded.group(1)) >= len(kept), late.log_tail()

    # Stopped while the leader writes and compacts again, it finds the batches it needed
    # gone and loads the newer snapshot into a fresh engine.
    late.proc.send_signal(signal.SIGSTOP)
    try:
        more = [b"more-%d" % i for i in range(10_000)]
        more_ids = put_many(leader.beanstalk_address, more)
        delete_many(leader.beanstalk_address, more_ids[: len(more_ids) - 10])
        kept |= set(more[-10:])
        wait_for_compaction(postgres, db, first, c.nodes)
    finally:
        late.proc.send_signal(signal.SIGCONT)
    wait_for("the passed standby to reload and follow",
             lambda: "compacted away" in late.log_path.read_text(errors="replace")
             and caught_up_standby(late, "n1"), timeout=60, nodes=c.nodes)

    after = [b"after-%d" % i for i in range(100)]
    put_many(leader.beanstalk_address, after)
    assert c.kill_leader(hold=True) is late
    replayed, total = took_over(late)
    print(f"late standby: takeover replayed {replayed} of {total} records")
    assert replayed <= 200, (replayed, total)
    expected = kept | set(after)
    assert sorted(drain(late.beanstalk_address, len(expected))) == sorted(expected)


def test_a_leader_that_loses_postgres_steps_down_within_the_bound(cluster, postgres):
    c = cluster(size=1)
    node = c.nodes[0]
    node.start()
    assert c.leader() is node
    with greenstalk.Client(node.beanstalk_address) as client:
        for i in range(50):
            client.put(f"acked-{i}")
    pending = socket.create_connection(node.beanstalk_address, timeout=60)
    postgres.stop()
    lost = time.monotonic()
    try:
        pending.sendall(b"put 0 0 60 6\r\nunsafe\r\n")
        wait_for("the leader to step down", lambda: STEP_DOWN_EXIT in node.exits,
                 timeout=HOLD_LIMIT_S + 30, nodes=c.nodes)
        took = time.monotonic() - lost
        print(f"stepped down {took:.1f} s after PostgreSQL stopped (bound {HOLD_LIMIT_S} s)")
        # Nothing it could not commit was acknowledged: the connection just closed.
        pending.settimeout(10)
        assert pending.recv(64) == b""
        assert "stepping down" in node.log_path.read_text(errors="replace")
    finally:
        pending.close()
        postgres.start()
    # The supervisor restarted it; it waited for PostgreSQL and leads again.
    assert c.leader(timeout=60) is node
    assert node.exits.count(STEP_DOWN_EXIT) == 1, node.exits
    got = drain(node.beanstalk_address, 50)
    assert sorted(got) == sorted(b"acked-%d" % i for i in range(50)), got
