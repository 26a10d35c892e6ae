"""Transactional enqueue (docs/postgres.md): rows an application commits into
`jobyard.enqueue` become jobs exactly once, woken by NOTIFY; a rolled-back insert queues
nothing; a row whose unique key matches a live job makes no second one; rows the server
cannot take land in `enqueue_rejected` with a reason; and across a kill -9 of the leader
under continuous inserts, every committed row is a job exactly once."""

from __future__ import annotations

import collections
import socket
import struct
import threading
import time
import urllib.request

import greenstalk

from jobyard_testlib import HOST, free_port
from pg_testlib import Standby

# The consumer's fallback check (crates/broker/src/enqueue.rs FALLBACK_CHECK).
FALLBACK_S = 5.0


def db_of(url: str) -> str:
    return url.rsplit("/", 1)[1]


def sql(postgres, pg_url, query):
    return postgres.sql(query, db=db_of(pg_url))


def wait_until(check, timeout=30.0, what="condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def enqueue_rows(postgres, pg_url) -> int:
    return int(sql(postgres, pg_url, "SELECT count(*) FROM jobyard.enqueue")[0][0])


def drain(address, tube, expect_at_most=100000):
    """Reserves and deletes every job of `tube`; returns their bodies."""
    bodies = []
    with greenstalk.Client(address, use=tube, watch=tube) as client:
        while len(bodies) <= expect_at_most:
            try:
                job = client.reserve(timeout=1)
            except greenstalk.TimedOutError:
                break
            bodies.append(job.body)
            client.delete(job)
    return bodies


def test_a_committed_row_becomes_a_job_with_its_settings_and_is_gone(
    postgres, pg_url, start_pg_server
):
    srv = start_pg_server()
    sql(postgres, pg_url, """
        BEGIN;
        INSERT INTO jobyard.enqueue (queue, body, priority, ttr_seconds)
            VALUES ('emails', '{"to": "a@example.com"}', 7, 0);
        INSERT INTO jobyard.enqueue (queue, body_bytes, delay_seconds)
            VALUES ('emails', '\\x00ff'::bytea, 2);
        COMMIT;""")
    with greenstalk.Client(srv.address, use="emails", watch="emails", encoding=None) as c:
        job = c.reserve(timeout=10)
        assert job.body == b'{"to": "a@example.com"}'
        stats = c.stats_job(job)
        assert stats["pri"] == 7
        assert stats["ttr"] == 1, "a TTR of 0 is taken as 1 second, as beanstalkd does"
        c.delete(job)
        delayed = c.peek_delayed()
        assert delayed.body == b"\x00\xff"
        stats = c.stats_job(delayed)
        assert stats["state"] == "delayed" and stats["delay"] == 2, stats
        assert stats["pri"] == 1024 and stats["ttr"] == 60, stats
        job = c.reserve(timeout=10)
        assert job.body == b"\x00\xff"
        c.delete(job)
    assert enqueue_rows(postgres, pg_url) == 0


def test_a_rolled_back_insert_queues_nothing(postgres, pg_url, start_pg_server):
    srv = start_pg_server()
    sql(postgres, pg_url, """
        BEGIN;
        INSERT INTO jobyard.enqueue (queue, body) VALUES ('emails', 'rolled back');
        ROLLBACK;""")
    # A committed row after it: once it is a job, the rolled-back one had its chance.
    sql(postgres, pg_url, "INSERT INTO jobyard.enqueue (queue, body) VALUES ('emails', 'kept')")
    wait_until(lambda: enqueue_rows(postgres, pg_url) == 0, what="the committed row")
    assert drain(srv.address, "emails") == ["kept"]


def test_rows_committed_while_no_server_ran_are_taken_at_start(
    postgres, pg_url, start_pg_server
):
    first = start_pg_server()  # makes the tables
    first.stop()
    sql(postgres, pg_url, "INSERT INTO jobyard.enqueue (queue, body) VALUES ('late', 'waited')")
    srv = start_pg_server()
    with greenstalk.Client(srv.address, use="late", watch="late") as client:
        # Well within the fallback check: found by the look at start, not by polling.
        job = client.reserve(timeout=int(FALLBACK_S / 2))
        assert job.body == "waited"
        client.delete(job)


def test_every_row_of_big_and_concurrent_transactions_is_a_job_exactly_once(
    postgres, pg_url, start_pg_server
):
    srv = start_pg_server()
    # One transaction of more rows than the consumer reads at once (1,000).
    sql(postgres, pg_url, """
        INSERT INTO jobyard.enqueue (queue, body)
            SELECT 'bulk', 'big-' || g FROM generate_series(1, 1200) g""")
    # And many small transactions at the same time.
    errors = []

    def writer(w):
        try:
            for i in range(8):
                sql(postgres, pg_url, f"""
                    BEGIN;
                    INSERT INTO jobyard.enqueue (queue, body) VALUES ('bulk', 'w{w}-{i}-a');
                    INSERT INTO jobyard.enqueue (queue, body) VALUES ('bulk', 'w{w}-{i}-b');
                    COMMIT;""")
        except Exception as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    wait_until(lambda: enqueue_rows(postgres, pg_url) == 0, timeout=60, what="every row")
    bodies = collections.Counter(drain(srv.address, "bulk"))
    expected = {f"big-{g}" for g in range(1, 1201)}
    expected |= {f"w{w}-{i}-{x}" for w in range(6) for i in range(8) for x in "ab"}
    assert set(bodies) == expected
    assert [b for b, n in bodies.items() if n > 1] == []


def gearman_submit_bg(port: int, function: bytes, unique: bytes, data: bytes) -> int:
    """Sends one SUBMIT_JOB_BG; returns the reply's packet type (8: JOB_CREATED)."""
    body = function + b"\0" + unique + b"\0" + data
    with socket.create_connection((HOST, port), timeout=10) as s:
        s.sendall(b"\0REQ" + struct.pack(">II", 18, len(body)) + body)
        head = b""
        while len(head) < 12:
            head += s.recv(12 - len(head))
    return struct.unpack(">I", head[4:8])[0]


def test_a_row_whose_unique_key_matches_a_live_job_makes_no_second_one(
    postgres, pg_url, start_pg_server
):
    gearman = free_port()
    srv = start_pg_server(extra_args=("--gearman-listen", f"{HOST}:{gearman}"))
    sql(postgres, pg_url, """
        INSERT INTO jobyard.enqueue (queue, body, unique_key) VALUES ('mail', 'first', 'k1')""")
    wait_until(lambda: enqueue_rows(postgres, pg_url) == 0, what="the first row")
    # Gearman's unique ids are the same keys: a background job of the function with the
    # row's key coalesces into the row's job.
    assert gearman_submit_bg(gearman, b"mail", b"k1", b"from gearman") == 8  # JOB_CREATED
    sql(postgres, pg_url, """
        INSERT INTO jobyard.enqueue (queue, body, unique_key) VALUES
            ('mail', 'second', 'k1'),
            ('other', 'same key, other queue', 'k1'),
            ('mail', 'another key', 'k2')""")
    wait_until(lambda: enqueue_rows(postgres, pg_url) == 0, what="the other rows")
    assert sorted(drain(srv.address, "mail")) == ["another key", "first"]
    assert drain(srv.address, "other") == ["same key, other queue"]
    # The first job is gone: its key makes a job again.
    sql(postgres, pg_url, """
        INSERT INTO jobyard.enqueue (queue, body, unique_key) VALUES ('mail', 'third', 'k1')""")
    wait_until(lambda: enqueue_rows(postgres, pg_url) == 0, what="the third row")
    assert drain(srv.address, "mail") == ["third"]


def test_a_commit_wakes_the_consumer_well_before_its_fallback_check(
    postgres, pg_url, start_pg_server
):
    srv = start_pg_server()
    with greenstalk.Client(srv.address, use="fast", watch="fast") as client:
        # Three tries: a fallback check cannot land within the bound after each commit.
        for i in range(3):
            time.sleep(0.3 + i * 0.7)
            committed = time.monotonic()
            sql(postgres, pg_url, f"INSERT INTO jobyard.enqueue (queue, body) VALUES ('fast', 'n{i}')")
            job = client.reserve(timeout=int(FALLBACK_S * 2))
            took = time.monotonic() - committed
            client.delete(job)
            print(f"commit to reserved: {took * 1000:.0f} ms")
            assert job.body == f"n{i}"
            assert took < FALLBACK_S / 4, f"{took:.2f} s: woken by polling, not NOTIFY?"


def test_rows_the_server_cannot_take_are_moved_to_enqueue_rejected_with_a_reason(
    postgres, pg_url, start_pg_server
):
    http = free_port()
    srv = start_pg_server(
        extra_args=("--max-job-size", "10", "--http-listen", f"{HOST}:{http}")
    )
    sql(postgres, pg_url, """
        INSERT INTO jobyard.enqueue (queue, body) VALUES
            ('ok', 'fits'),
            ('ok', 'eleven byte'),
            ('two words', 'x'),
            ('flows/stage', 'x'),
            ('ok', 'fits too')""")
    wait_until(lambda: enqueue_rows(postgres, pg_url) == 0, what="every row settled")
    assert sorted(drain(srv.address, "ok")) == ["fits", "fits too"]
    rejected = sql(postgres, pg_url, """
        SELECT queue, body, reason FROM jobyard.enqueue_rejected ORDER BY id""")
    assert [(q, b) for q, b, _ in rejected] == [
        ("ok", "eleven byte"), ("two words", "x"), ("flows/stage", "x"),
    ]
    reasons = [r for _, _, r in rejected]
    assert "--max-job-size" in reasons[0], reasons
    assert "whitespace" in reasons[1], reasons
    assert "flow" in reasons[2], reasons
    assert "rejected" in srv.log_tail(100)
    with urllib.request.urlopen(f"http://{HOST}:{http}/metrics", timeout=10) as reply:
        metrics = reply.read().decode()
    assert "jobyard_enqueue_consumed_total 2\n" in metrics, metrics
    assert "jobyard_enqueue_rejected_total 3\n" in metrics, metrics


def test_exactly_once_across_a_kill9_of_the_leader_under_continuous_inserts(
    postgres, pg_url, start_pg_server, pg_node
):
    leader = start_pg_server()
    standby = Standby(pg_node())
    assert standby.waiting(), "the second node did not become a standby"
    inserted = []
    stop = threading.Event()
    errors = []

    def insert_forever():
        n = 0
        try:
            while not stop.is_set():
                rows = [f"r{n + i}" for i in range(10)]
                values = ", ".join(f"('fo', '{r}')" for r in rows)
                sql(postgres, pg_url, f"INSERT INTO jobyard.enqueue (queue, body) VALUES {values}")
                inserted.extend(rows)  # committed: psql returned
                n += 10
                time.sleep(0.01)
        except Exception as e:  # reported below
            errors.append(e)

    inserting = threading.Thread(target=insert_forever)
    inserting.start()
    try:
        wait_until(lambda: len(inserted) >= 300, what="inserts before the kill")
        leader.kill9()
        killed_with = len(inserted)
        assert standby.took_over(30), standby.server.log_tail()
        wait_until(lambda: len(inserted) >= killed_with + 200, what="inserts after the takeover")
    finally:
        stop.set()
        inserting.join()
    assert not errors, errors
    wait_until(lambda: enqueue_rows(postgres, pg_url) == 0, timeout=60, what="every row")
    bodies = collections.Counter(drain(standby.server.address, "fo"))
    assert len(inserted) == len(set(inserted))
    missing = set(inserted) - set(bodies)
    doubled = [b for b, n in bodies.items() if n > 1]
    print(f"{len(inserted)} rows inserted, {len(bodies)} jobs, {killed_with} before the kill")
    assert not missing, sorted(missing)[:20]
    assert not doubled, doubled[:20]
    assert set(bodies) == set(inserted)
