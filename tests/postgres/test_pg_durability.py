"""`--storage postgres://`: every acknowledged job survives kill -9 of the server, with its
state, priority, delay and TTR, and what the log holds stays proportional to the live data
(compaction into a snapshot table)."""

from __future__ import annotations

import time

import greenstalk

from jobyard_testlib import Raw

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
    assert meta["schema_version"] == "1" and meta["cluster_id"], meta


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
    srv.restart(crash=True)
    expected = {jid: ("ready", 5, 60, body) for jid, body in kept.items()}
    check_jobs(srv.address, expected)
