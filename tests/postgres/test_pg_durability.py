"""`--storage postgres://`: every acknowledged job survives kill -9 of the server, with its
state, priority, delay and TTR (beanstalkd's and Gearman's background jobs), also when
PostgreSQL restarts under the server, and what the log holds stays proportional to the live
data (compaction into a snapshot table)."""

from __future__ import annotations

import re
import subprocess
import threading
import time

import greenstalk

from jobyard_testlib import Raw, free_port

N_READY = 300


def put_mixed(client: greenstalk.Client) -> dict:
    """Ready jobs of several priorities and TTRs, delayed ones and buried ones; returns
    what each id must be after a restart."""
    expected = {}
    for i in range(N_READY):
        pri, ttr = i % 7, 30 + i % 5
        jid = client.put(b"ready-%d" % i, priority=pri, ttr=ttr)
        expected[jid] = ("ready", pri, ttr, b"ready-%d" % i)
    for i in range(20):
        jid = client.put(b"delayed-%d" % i, priority=50, delay=3600, ttr=90)
        expected[jid] = ("delayed", 50, 90, b"delayed-%d" % i)
    client.use("buried")
    client.watch("buried")
    client.ignore("default")
    for i in range(10):
        client.put(b"buried-%d" % i, priority=7, ttr=40)
    for _ in range(10):
        job = client.reserve(timeout=5)
        client.bury(job, priority=8)
        expected[job.id] = ("buried", 8, 40, job.body)
    return expected


def check_jobs(address, expected: dict) -> None:
    with Raw(address) as raw:
        found = raw.jobs(expected)
        assert set(found) == set(expected), "acknowledged jobs were lost"
        for jid, (state, pri, ttr, body) in expected.items():
            job = found[jid]
            assert (job["state"], job["pri"], job["body"]) == (state, pri, body), jid
            reply = raw.cmd("stats-job %d" % jid)
            stats = raw.chunk(int(reply.split()[1])).decode()
            assert f"ttr: {ttr}\n" in stats, (jid, stats)


def test_acknowledged_jobs_survive_kill9(start_pg_server, postgres, pg_url):
    srv = start_pg_server()
    with greenstalk.Client(srv.address, encoding=None) as client:
        expected = put_mixed(client)
    srv.restart(crash=True)
    check_jobs(srv.address, expected)
    # Once more, after writing on top of the recovered log.
    with greenstalk.Client(srv.address, encoding=None) as client:
        jid = client.put(b"after", priority=3, ttr=11)
        expected[jid] = ("ready", 3, 11, b"after")
    srv.restart(crash=True)
    check_jobs(srv.address, expected)
    db = pg_url.rsplit("/", 1)[1]
    meta = dict(postgres.sql("SELECT key, value FROM jobyard.meta", db=db))
    assert meta["schema_version"] == "4" and meta["cluster_id"], meta


def test_the_log_is_compacted_into_a_snapshot(start_pg_server, postgres, pg_url):
    srv = start_pg_server(
        extra_args=("--segment-bytes", "4096", "--compact-min-bytes", "16384")
    )
    db = pg_url.rsplit("/", 1)[1]
    with greenstalk.Client(srv.address, encoding=None) as client:
        kept = {client.put(b"kept-%d" % i, priority=5): b"kept-%d" % i for i in range(20)}
        for i in range(3000):
            client.delete(client.put(b"x" * 100))
    deadline = time.monotonic() + 30
    while True:
        done = postgres.sql(
            "SELECT count(*) FROM jobyard.snapshots WHERE complete", db=db
        )[0][0]
        rows, size = postgres.sql(
            "SELECT count(*), coalesce(sum(length(records)), 0) FROM jobyard.log", db=db
        )[0]
        # 3000 puts and deletes wrote over 400 kB; what is kept must be far less.
        if int(done) >= 1 and int(size) < 100_000:
            break
        assert time.monotonic() < deadline, (done, rows, size, srv.log_tail())
        time.sleep(0.5)
    # `log` is partitioned by section: a compaction drops the partitions it covers whole
    # (log_s0, made at start, among them) rather than leaving their rows dead.
    while True:
        snap = int(postgres.sql(
            "SELECT max(section) FROM jobyard.snapshots WHERE complete", db=db)[0][0])
        parts = [r[0] for r in postgres.sql(
            "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
            "WHERE i.inhparent = 'jobyard.log'::regclass", db=db)]
        sections = [int(p[len("log_s"):]) for p in parts if p.startswith("log_s")]
        if snap > 0 and "log_s0" not in parts and all(s >= snap for s in sections):
            break
        assert time.monotonic() < deadline, (snap, parts)
        time.sleep(0.5)
    srv.restart(crash=True)
    expected = {jid: ("ready", 5, 60, body) for jid, body in kept.items()}
    check_jobs(srv.address, expected)


def gearman_tool(tool: str, port: int, *args: str) -> str:
    out = subprocess.run(
        [tool, "-h", "127.0.0.1", "-p", str(port), *args],
        capture_output=True, timeout=60, check=True,
    )
    return out.stdout.decode()


def test_gearman_background_jobs_survive_kill9(start_pg_server):
    gport = free_port()
    srv = start_pg_server(extra_args=("--gearman-listen", f"127.0.0.1:{gport}"))
    for i in range(5):
        gearman_tool("gearman", gport, "-b", "-f", "pg_bg", f"job{i}")
    srv.restart(crash=True)
    status = gearman_tool("gearadmin", gport, "--status")
    assert "pg_bg\t5\t0\t0" in status.splitlines(), status
    # A worker gets every one of them, bodies intact.
    bodies = gearman_tool("gearman", gport, "-w", "-f", "pg_bg", "-c", "5")
    assert sorted(re.findall(r"job\d", bodies)) == [f"job{i}" for i in range(5)], bodies


def test_postgres_restarted_under_the_server_loses_nothing(start_pg_server, postgres):
    srv = start_pg_server()
    expected = {}
    with greenstalk.Client(srv.address, encoding=None) as client:
        for i in range(50):
            expected[client.put(b"before-%d" % i, priority=1)] = ("ready", 1, 60, b"before-%d" % i)
    postgres.stop()
    acked = []

    def put_while_down():
        # Not acknowledged while PostgreSQL is away; acknowledged once it is back.
        with greenstalk.Client(srv.address, encoding=None) as client:
            acked.append(client.put(b"during", priority=2))

    putter = threading.Thread(target=put_while_down)
    putter.start()
    time.sleep(1.5)
    assert not acked, "a put was acknowledged while PostgreSQL was down"
    postgres.start()
    putter.join(60)
    assert acked, srv.log_tail()
    expected[acked[0]] = ("ready", 2, 60, b"during")
    srv.restart(crash=True)
    check_jobs(srv.address, expected)
