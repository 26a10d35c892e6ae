"""jobyard judged by greenstalk (PyPI), a beanstalkd client someone else wrote.

Each test starts a real server (fixture `server`) and drives it only through greenstalk's
public API; the replies must map onto greenstalk's own results and exceptions.
"""

from __future__ import annotations

import threading
import time

import greenstalk
import pytest

from jobyard_testlib import Raw


def wait_until(pred, timeout=15.0, interval=0.05):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(interval)
    return pred()


@pytest.fixture
def connect(server):
    clients = []

    def make(**kwargs) -> greenstalk.Client:
        c = greenstalk.Client(server.address, **kwargs)
        c._sock.settimeout(60)  # a hung server fails the test instead of hanging it
        clients.append(c)
        return c

    yield make
    for c in clients:
        try:
            c.close()
        except OSError:
            pass


@pytest.fixture
def client(connect) -> greenstalk.Client:
    return connect()


def test_put_reserve_delete(client):
    job_id = client.put("hello world")
    assert isinstance(job_id, int) and job_id > 0
    job = client.reserve(timeout=5)
    assert (job.id, job.body) == (job_id, "hello world")
    assert client.stats_job(job)["state"] == "reserved"
    client.delete(job)
    with pytest.raises(greenstalk.NotFoundError):
        client.peek(job_id)
    with pytest.raises(greenstalk.NotFoundError):
        client.delete(job_id)
    with pytest.raises(greenstalk.TimedOutError):
        client.reserve(timeout=0)


def test_ids_increase(client):
    ids = [client.put(f"job {i}") for i in range(20)]
    assert ids == sorted(ids) and len(set(ids)) == 20


def test_binary_bodies_round_trip(connect):
    c = connect(encoding=None)
    bodies = [b"", b"\r\n", b"a\r\nb\r\n", bytes(range(256)), b"\x00" * 1000, b"put 0 0 0 1\r\nx"]
    ids = [c.put(b) for b in bodies]
    for i, b in zip(ids, bodies):
        assert c.peek(i).body == b
    for i, b in zip(ids, bodies):
        job = c.reserve(timeout=5)
        assert (job.id, job.body) == (i, b)
        c.delete(job)


def test_reserve_timeout_raises_timed_out(client):
    t0 = time.monotonic()
    with pytest.raises(greenstalk.TimedOutError):
        client.reserve(timeout=1)
    # it really waited (no upper bound asserted: the machine may be loaded)
    assert time.monotonic() - t0 >= 0.9
    with pytest.raises(greenstalk.TimedOutError):
        client.reserve(timeout=0)


def test_blocking_reserve_is_woken_by_a_put(connect):
    worker, producer = connect(), connect()

    got = []
    t = threading.Thread(target=lambda: got.append(worker.reserve(timeout=30)))
    t.start()
    time.sleep(0.3)
    jid = producer.put("wake up")
    t.join(40)
    assert not t.is_alive()
    assert got and (got[0].id, got[0].body) == (jid, "wake up")


def test_priorities_order_then_fifo(client):
    order = [(500, "c"), (1, "a"), (2**32 - 1, "e"), (500, "d"), (0, "z"), (1, "b")]
    ids = {body: client.put(body, priority=pri) for pri, body in order}
    stats = client.stats_job(ids["e"])
    assert stats["pri"] == 2**32 - 1
    got = []
    for _ in order:
        job = client.reserve(timeout=5)
        got.append(job.body)
        client.delete(job)
    assert got == ["z", "a", "b", "c", "d", "e"]


def test_urgent_count(client):
    client.put("urgent", priority=10)
    client.put("normal", priority=5000)
    stats = client.stats_tube("default")
    assert stats["current-jobs-urgent"] == 1
    assert stats["current-jobs-ready"] == 2


def test_release_with_delay(client):
    jid = client.put("later", priority=7)
    job = client.reserve(timeout=5)
    assert job.id == jid
    client.release(job, priority=9, delay=2)
    s = client.stats_job(jid)
    assert s["state"] == "delayed"
    assert s["pri"] == 9
    assert s["releases"] == 1
    assert s["delay"] == 2
    with pytest.raises(greenstalk.TimedOutError):
        client.reserve(timeout=0)
    assert client.peek_delayed().id == jid
    job = client.reserve(timeout=20)  # becomes ready after ~2 s
    assert (job.id, job.body) == (jid, "later")
    assert client.stats_job(jid)["reserves"] == 2


def test_release_without_delay_and_not_reserved(client, connect):
    jid = client.put("x")
    job = client.reserve(timeout=5)
    other = connect()
    with pytest.raises(greenstalk.NotFoundError):
        other.release(job)  # reserved by someone else
    client.release(job)
    assert client.stats_job(jid)["state"] == "ready"
    with pytest.raises(greenstalk.NotFoundError):
        client.release(job)  # no longer reserved


def test_put_with_delay(client):
    jid = client.put("delayed", delay=100)
    s = client.stats_job(jid)
    assert s["state"] == "delayed"
    assert 0 < s["time-left"] <= 100
    assert client.peek_delayed().id == jid
    with pytest.raises(greenstalk.NotFoundError):
        client.peek_ready()
    with pytest.raises(greenstalk.TimedOutError):
        client.reserve(timeout=0)


def test_bury_and_kick(client):
    a = client.put("a")
    b = client.put("b")
    for _ in range(2):
        job = client.reserve(timeout=5)
        client.bury(job, priority=3)
    assert client.stats_job(a)["state"] == "buried"
    assert client.stats_job(a)["pri"] == 3
    assert client.stats_job(a)["buries"] == 1
    assert client.peek_buried().id == a  # oldest buried first
    assert client.stats_tube("default")["current-jobs-buried"] == 2
    with pytest.raises(greenstalk.TimedOutError):
        client.reserve(timeout=0)
    assert client.kick(1) == 1
    assert client.stats_job(a)["state"] == "ready"
    assert client.stats_job(a)["kicks"] == 1
    assert client.stats_job(b)["state"] == "buried"
    assert client.kick(100) == 1
    assert client.kick(100) == 0
    assert client.stats_job(b)["state"] == "ready"


def test_kick_moves_buried_before_delayed(client):
    d = client.put("d", delay=300)
    b = client.put("b")
    client.bury(client.reserve(timeout=5))
    assert client.kick(10) == 1  # only the buried one
    assert client.stats_job(b)["state"] == "ready"
    assert client.stats_job(d)["state"] == "delayed"
    assert client.kick(10) == 1  # now the delayed one
    assert client.stats_job(d)["state"] == "ready"


def test_kick_job(client):
    d = client.put("d", delay=300)
    b = client.put("b")
    client.bury(client.reserve(timeout=5))
    client.kick_job(d)
    client.kick_job(b)
    assert client.stats_job(d)["state"] == "ready"
    assert client.stats_job(b)["state"] == "ready"
    with pytest.raises(greenstalk.NotFoundError):
        client.kick_job(d)  # ready jobs cannot be kicked
    with pytest.raises(greenstalk.NotFoundError):
        client.kick_job(10**9)


def test_peek_variants(client):
    with pytest.raises(greenstalk.NotFoundError):
        client.peek_ready()
    with pytest.raises(greenstalk.NotFoundError):
        client.peek_delayed()
    with pytest.raises(greenstalk.NotFoundError):
        client.peek_buried()
    r1 = client.put("r1", priority=5)
    r0 = client.put("r0", priority=1)
    client.put("d1", delay=200)
    d0 = client.put("d0", delay=100)
    assert client.peek_ready().id == r0  # most urgent
    assert client.peek_delayed().id == d0  # soonest
    assert client.peek(r1).body == "r1"
    with pytest.raises(greenstalk.NotFoundError):
        client.peek(10**12)


def test_not_found_everywhere(client):
    missing = 987654321
    for call in (
        lambda: client.delete(missing),
        lambda: client.peek(missing),
        lambda: client.stats_job(missing),
        lambda: client.kick_job(missing),
        lambda: client.release(greenstalk.Job(missing, "")),
        lambda: client.bury(greenstalk.Job(missing, "")),
        lambda: client.touch(greenstalk.Job(missing, "")),
        lambda: client.reserve_job(missing),
    ):
        with pytest.raises(greenstalk.NotFoundError):
            call()
    # the connection is still usable afterwards
    assert client.put("still fine") > 0


def test_job_too_big(server, connect):
    c = connect(encoding=None)
    limit = 65535
    with pytest.raises(greenstalk.JobTooBigError):
        c.put(b"x" * (limit + 1))
    # the oversized body was discarded: the connection carries on in sync
    jid = c.put(b"y" * limit)  # exactly the limit is accepted
    assert len(c.peek(jid).body) == limit
    assert c.stats()["max-job-size"] == limit
    with pytest.raises(greenstalk.JobTooBigError):
        c.put(b"z" * (limit * 3))
    assert c.peek(c.put(b"small")).body == b"small"


def test_stats(client, connect):
    before = client.stats()
    assert before["max-job-size"] == 65535
    assert isinstance(before["version"], str) and before["version"]
    assert before["pid"] > 0
    for key in ("current-connections", "total-jobs", "cmd-put", "uptime", "current-tubes"):
        assert key in before, key
    other = connect()
    other.watch("elsewhere")
    jid = client.put("s", delay=50)
    client.put("r")
    client.bury(client.reserve(timeout=5))
    after = client.stats()
    assert after["cmd-put"] == before["cmd-put"] + 2
    assert after["total-jobs"] == before["total-jobs"] + 2
    assert after["current-jobs-delayed"] == before["current-jobs-delayed"] + 1
    assert after["current-jobs-buried"] == before["current-jobs-buried"] + 1
    assert after["current-connections"] >= 2
    assert after["cmd-watch"] == before["cmd-watch"] + 1
    assert after["cmd-bury"] == before["cmd-bury"] + 1
    assert client.stats_job(jid)["tube"] == "default"


def test_stats_job_fields(client):
    jid = client.put("fields", priority=42, ttr=30)
    s = client.stats_job(jid)
    assert s["id"] == jid
    assert s["tube"] == "default"
    assert s["state"] == "ready"
    assert s["pri"] == 42
    assert s["ttr"] == 30
    assert s["reserves"] == 0
    assert s["age"] >= 0
    job = client.reserve(timeout=5)
    s = client.stats_job(job)
    assert s["state"] == "reserved"
    assert s["reserves"] == 1
    assert 0 < s["time-left"] <= 30


def test_stats_tube(connect):
    producer = connect(use="stt")
    worker = connect(watch=["stt"])
    producer.put("one")
    producer.put("two", delay=100)
    s = producer.stats_tube("stt")
    assert s["name"] == "stt"
    assert s["current-jobs-ready"] == 1
    assert s["current-jobs-delayed"] == 1
    assert s["total-jobs"] == 2
    assert s["current-using"] == 1
    assert s["current-watching"] == 1
    job = worker.reserve(timeout=5)
    worker.delete(job)
    s = producer.stats_tube("stt")
    assert s["current-jobs-ready"] == 0
    assert s["cmd-delete"] == 1
    with pytest.raises(greenstalk.NotFoundError):
        producer.stats_tube("no-such-tube")


def test_use_watch_ignore(connect):
    producer = connect()
    producer.use("emails")
    assert producer.using() == "emails"
    jid = producer.put("mail")
    assert producer.stats_job(jid)["tube"] == "emails"

    worker = connect()
    assert worker.watching() == ["default"]
    with pytest.raises(greenstalk.TimedOutError):
        worker.reserve(timeout=0)  # watching only default
    assert worker.watch("emails") == 2
    assert worker.watch("emails") == 2  # idempotent
    assert worker.ignore("default") == 1
    assert worker.watching() == ["emails"]
    with pytest.raises(greenstalk.NotIgnoredError):
        worker.ignore("emails")  # the last watched tube
    job = worker.reserve(timeout=5)
    assert (job.id, job.body) == (jid, "mail")
    worker.delete(job)


def test_reserve_from_several_watched_tubes_by_priority(connect):
    p = connect()
    p.use("t-a")
    a = p.put("a", priority=50)
    p.use("t-b")
    b = p.put("b", priority=10)
    w = connect(watch=["t-a", "t-b"])
    assert sorted(w.watching()) == ["t-a", "t-b"]
    assert w.reserve(timeout=5).id == b
    assert w.reserve(timeout=5).id == a


def test_client_constructor_use_and_watch(connect):
    p = connect(use="ctor")
    w = connect(watch="ctor")
    assert p.using() == "ctor"
    assert w.watching() == ["ctor"]
    jid = p.put("via constructor")
    assert w.reserve(timeout=5).id == jid


def test_tubes_listing(connect):
    c = connect()
    assert "default" in c.tubes()
    c.use("listed-tube")
    c.put("keeps the tube alive")
    names = c.tubes()
    assert "default" in names and "listed-tube" in names
    assert len(names) == len(set(names))


def test_unreferenced_empty_tube_disappears(connect, server):
    c = connect(use="ephemeral")
    assert "ephemeral" in c.tubes()
    c.close()
    with Raw(server.address) as raw:

        def gone():
            reply = raw.cmd("list-tubes")
            assert reply.startswith(b"OK ")
            return b"ephemeral" not in raw.chunk(int(reply.split()[1]))

        assert wait_until(gone), "a tube nobody uses or watches and with no jobs should go away"


def test_touch(client, connect):
    jid = client.put("slow", ttr=10)
    job = client.reserve(timeout=5)
    time.sleep(2.5)
    left_before = client.stats_job(jid)["time-left"]
    assert left_before <= 8
    client.touch(job)
    left_after = client.stats_job(jid)["time-left"]
    assert left_after > left_before  # the TTR started over
    other = connect()
    with pytest.raises(greenstalk.NotFoundError):
        other.touch(job)  # not reserved by this connection
    client.release(job)
    with pytest.raises(greenstalk.NotFoundError):
        client.touch(job)  # not reserved at all


def test_ttr_expiry_hands_the_job_out_again(connect):
    first, second = connect(), connect()
    jid = first.put("ttr", ttr=1)
    job = first.reserve(timeout=5)
    assert job.id == jid
    again = second.reserve(timeout=30)  # after the 1 s TTR runs out
    assert again.id == jid
    s = second.stats_job(jid)
    assert s["timeouts"] >= 1
    assert s["reserves"] == 2
    with pytest.raises(greenstalk.NotFoundError):
        first.delete(job)  # its reservation is gone
    second.delete(again)


def test_disconnect_releases_reserved_job(connect):
    first, second = connect(), connect()
    jid = first.put("orphan")
    assert first.reserve(timeout=5).id == jid
    first.close()
    job = second.reserve(timeout=30)
    assert job.id == jid


def test_reserve_job_by_id(client):
    a = client.put("a", priority=0)
    b = client.put("b", priority=100)
    job = client.reserve_job(b)
    assert (job.id, job.body) == (b, "b")
    with pytest.raises(greenstalk.NotFoundError):
        client.reserve_job(b)  # already reserved
    assert client.reserve(timeout=5).id == a


def test_pause_tube(client):
    jid = client.put("paused")
    client.pause_tube("default", 2)
    assert client.stats_tube("default")["pause"] == 2
    with pytest.raises(greenstalk.TimedOutError):
        client.reserve(timeout=0)
    assert client.reserve(timeout=20).id == jid


def test_state_survives_clean_restart(server, connect):
    c = connect(use="persist")
    ready = c.put("ready", priority=5)
    delayed = c.put("delayed", delay=3600)
    c.watch("persist")
    buried = c.put("buried")
    reserved = c.put("reserved")
    deleted = c.put("deleted")
    c.delete(deleted)
    c.bury(c.reserve_job(buried), priority=77)
    assert c.reserve_job(reserved).id == reserved
    c.close()
    server.restart()

    c = connect(watch="persist")
    c.use("persist")
    assert c.stats_job(ready)["state"] == "ready"
    assert c.stats_job(ready)["pri"] == 5
    assert c.stats_job(delayed)["state"] == "delayed"
    assert c.stats_job(buried)["state"] == "buried"
    assert c.stats_job(buried)["pri"] == 77
    assert c.stats_job(reserved)["state"] == "ready"  # a restart hands it out again
    assert c.peek(reserved).body == "reserved"
    with pytest.raises(greenstalk.NotFoundError):
        c.peek(deleted)
    assert c.stats_tube("persist")["current-jobs-ready"] == 2
    new = c.put("new")
    assert new > deleted
