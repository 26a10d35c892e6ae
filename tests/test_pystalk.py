"""jobyard judged by pystalk (PyPI, EasyPost's beanstalkd client).

pystalk reads replies with fixed-size recv()s and parses YAML with PyYAML, so it checks the
exact reply framing and that stats bodies are YAML a real parser accepts.
"""

from __future__ import annotations

import time

import pytest
from pystalk import BeanstalkClient, BeanstalkConnectionError, BeanstalkError, ProductionPool

from jobyard_testlib import HOST, free_port

SOCKET_TIMEOUT = 60  # pystalk requires reserve timeouts below this


@pytest.fixture
def connect(server):
    clients = []

    def make(**kwargs) -> BeanstalkClient:
        kwargs.setdefault("socket_timeout", SOCKET_TIMEOUT)
        c = BeanstalkClient(server.address[0], server.address[1], **kwargs)
        clients.append(c)
        return c

    yield make
    for c in clients:
        try:
            c.close()
        except OSError:
            pass


@pytest.fixture
def client(connect) -> BeanstalkClient:
    return connect()


def put_id(reply) -> int:
    """pystalk's put_job returns (status, id)."""
    status, jid = reply
    assert status == b"INSERTED"
    assert isinstance(jid, int) and jid > 0
    return jid


def test_put_reserve_delete(client):
    jid = put_id(client.put_job("hello"))
    job = client.reserve_job(5)
    assert job.job_id == jid
    assert job.job_data == b"hello"
    client.delete_job(job.job_id)
    with pytest.raises(BeanstalkError) as e:
        client.reserve_job(0)
    assert e.value.message == "TIMED_OUT"
    with pytest.raises(BeanstalkError) as e:
        client.delete_job(jid)
    assert e.value.message == "NOT_FOUND"


def test_auto_decode_and_bytes(connect):
    c = connect(auto_decode=True)
    jid = put_id(c.put_job("h\u00e9llo \u2713".encode("utf-8")))
    job = c.reserve_job(5)
    assert job.job_id == jid and job.job_data == "h\u00e9llo \u2713"
    c.delete_job(job)  # a Job works where an id is expected


def test_large_body(client):
    body = bytes(range(256)) * 200  # 51200 bytes, binary, needs many recv()s
    jid = put_id(client.put_job(body))
    job = client.reserve_job(5)
    assert job.job_id == jid and job.job_data == body


def test_reserve_timeout_is_an_error(client):
    t0 = time.monotonic()
    with pytest.raises(BeanstalkError) as e:
        client.reserve_job(1)
    assert e.value.message == "TIMED_OUT"
    assert time.monotonic() - t0 >= 0.9


def test_reserve_iter_drains_ready_jobs_in_priority_order(client):
    ids = {}
    for pri, body in [(30, b"c"), (10, b"a"), (20, b"b")]:
        ids[body] = put_id(client.put_job(body, pri=pri))
    seen = []
    for job in client.reserve_iter():
        seen.append(job.job_data)
        client.delete_job(job)
    assert seen == [b"a", b"b", b"c"]


def test_release_with_delay(client):
    jid = put_id(client.put_job("again"))
    job = client.reserve_job(5)
    assert client.release_job(job.job_id, pri=11, delay=2) == b"RELEASED"
    s = client.stats_job(jid)
    assert s["state"] == "delayed"
    assert s["pri"] == 11
    assert s["releases"] == 1
    assert client.peek_delayed().job_id == jid
    job = client.reserve_job(20)
    assert job.job_id == jid


def test_bury_and_kick_jobs(client):
    a = put_id(client.put_job("a"))
    b = put_id(client.put_job("b"))
    for _ in range(2):
        assert client.bury_job(client.reserve_job(5), pri=5) == b"BURIED"
    assert client.stats_job(a)["state"] == "buried"
    assert client.peek_buried().job_id == a
    assert client.stats()["current-jobs-buried"] >= 2
    assert client.kick_jobs(1) == (b"KICKED", 1)
    assert client.stats_job(a)["state"] == "ready"
    assert client.kick_jobs(10) == (b"KICKED", 1)
    assert client.stats_job(b)["state"] == "ready"
    assert client.kick_jobs(10) == (b"KICKED", 0)


def test_kick_job(client):
    jid = put_id(client.put_job("d", delay=500))
    assert client.stats_job(jid)["state"] == "delayed"
    client.kick_job(jid)
    assert client.stats_job(jid)["state"] == "ready"
    with pytest.raises(BeanstalkError) as e:
        client.kick_job(jid)
    assert e.value.message == "NOT_FOUND"


def test_peek(client):
    with pytest.raises(BeanstalkError) as e:
        client.peek_ready()
    assert e.value.message == "NOT_FOUND"
    jid = put_id(client.put_job(b"peeked", pri=3))
    job = client.peek_ready()
    assert (job.job_id, job.job_data) == (jid, b"peeked")
    assert client.stats_job(jid)["state"] == "ready"  # peeking does not reserve


def test_stats_are_yaml(client):
    before = client.stats()
    put_id(client.put_job("x"))
    after = client.stats()
    assert after["cmd-put"] == before["cmd-put"] + 1
    assert after["total-jobs"] == before["total-jobs"] + 1
    assert after["current-jobs-ready"] == before["current-jobs-ready"] + 1
    assert after["max-job-size"] == 65535
    assert after["current-connections"] >= 1
    assert "version" in after and "uptime" in after


def test_stats_job_and_tube(client):
    jid = put_id(client.put_job_into("pys-tube", "body", pri=123, ttr=45))
    s = client.stats_job(jid)
    assert s["id"] == jid
    assert s["tube"] == "pys-tube"
    assert s["state"] == "ready"
    assert s["pri"] == 123
    assert s["ttr"] == 45
    t = client.stats_tube("pys-tube")
    assert t["name"] == "pys-tube"
    assert t["current-jobs-ready"] == 1
    assert t["total-jobs"] == 1
    with pytest.raises(BeanstalkError) as e:
        client.stats_tube("nobody-here")
    assert e.value.message == "NOT_FOUND"
    with pytest.raises(BeanstalkError) as e:
        client.stats_job(10**9)
    assert e.value.message == "NOT_FOUND"


def test_put_job_into_restores_the_used_tube(client):
    jid = put_id(client.put_job_into("side", "s"))
    assert client.current_tube == "default"
    other = put_id(client.put_job("d"))
    assert client.stats_job(jid)["tube"] == "side"
    assert client.stats_job(other)["tube"] == "default"


def test_using_context_manager(client):
    with client.using("ctx-tube") as inserter:
        a = put_id(inserter.put_job("one"))
        b = put_id(inserter.put_job("two", pri=1))
    assert client.current_tube == "default"
    assert "ctx-tube" in client.list_tubes()
    assert client.stats_tube("ctx-tube")["current-jobs-ready"] == 2
    client.watch("ctx-tube")  # pystalk ignores default on the first watch
    assert client.watchlist == {"ctx-tube"}
    assert client.reserve_job(5).job_id == b
    assert client.reserve_job(5).job_id == a


def test_watch_ignore_and_watchlist(connect):
    producer = connect()
    jid_a = put_id(producer.put_job_into("w-a", "a"))
    jid_b = put_id(producer.put_job_into("w-b", "b"))
    worker = connect()
    worker.watchlist = ["w-a", "w-b"]
    assert worker.watchlist == {"w-a", "w-b"}
    got = {worker.reserve_job(5).job_id, worker.reserve_job(5).job_id}
    assert got == {jid_a, jid_b}
    worker.ignore("w-b")
    assert worker.watchlist == {"w-a"}
    put_id(producer.put_job_into("w-b", "b2"))
    with pytest.raises(BeanstalkError) as e:
        worker.reserve_job(0)
    assert e.value.message == "TIMED_OUT"


def test_list_tubes(client):
    put_id(client.put_job_into("listed-1", "x"))
    put_id(client.put_job_into("listed-2", "x"))
    tubes = client.list_tubes()
    assert isinstance(tubes, list)
    assert {"default", "listed-1", "listed-2"} <= set(tubes)


def test_pause_and_unpause(client):
    jid = put_id(client.put_job("p"))
    assert client.pause_tube("default", 60) == b"PAUSED"
    with pytest.raises(BeanstalkError) as e:
        client.reserve_job(0)
    assert e.value.message == "TIMED_OUT"
    assert client.unpause_tube("default") == b"PAUSED"
    assert client.reserve_job(5).job_id == jid


def test_job_too_big(client):
    with pytest.raises(BeanstalkError) as e:
        client.put_job(b"x" * 65536)
    assert e.value.message == "JOB_TOO_BIG"
    # the connection stays in sync after the refused body
    assert put_id(client.put_job(b"x" * 65535)) > 0


def test_release_and_bury_need_a_reservation(client, connect):
    jid = put_id(client.put_job("r"))
    for call in (lambda: client.release_job(jid), lambda: client.bury_job(jid)):
        with pytest.raises(BeanstalkError) as e:
            call()
        assert e.value.message == "NOT_FOUND"
    job = client.reserve_job(5)
    other = connect()
    with pytest.raises(BeanstalkError) as e:
        other.delete_job(job)  # reserved by another connection
    assert e.value.message == "NOT_FOUND"
    client.delete_job(job)


def test_from_uri_and_ping(server):
    c = BeanstalkClient.from_uri(f"beanstalk://{server.address[0]}:{server.address[1]}",
                                 socket_timeout=SOCKET_TIMEOUT)
    try:
        assert c.ping()
        assert put_id(c.put_job("uri")) > 0
    finally:
        c.close()


def test_reconnect_after_restart_keeps_use_watch_and_jobs(server, connect):
    c = connect()
    c.use("survivor")
    c.watch("survivor")
    jid = put_id(c.put_job("persisted", pri=9))
    c.close()  # pystalk reconnects by itself on the next call
    server.restart()
    c.port = server.address[1]
    assert c.stats_job(jid)["state"] == "ready"
    job = c.reserve_job(5)  # re-established watch on 'survivor'
    assert (job.job_id, job.job_data) == (jid, b"persisted")
    new = put_id(c.put_job("after restart"))  # re-established use
    assert new > jid
    assert c.stats_job(new)["tube"] == "survivor"


def test_production_pool_skips_a_dead_server(server):
    dead = f"beanstalk://{HOST}:{free_port()}"
    live = f"beanstalk://{server.address[0]}:{server.address[1]}"
    pool = ProductionPool.from_uris([dead, live], socket_timeout=10, initial_shuffle=False)
    pool.use("pooled")
    results = [pool.put_job(f"p{i}") for i in range(5)]
    ids = [put_id(r) for r in results]
    assert len(set(ids)) == 5
    c = BeanstalkClient(server.address[0], server.address[1], socket_timeout=SOCKET_TIMEOUT)
    try:
        assert c.stats_tube("pooled")["current-jobs-ready"] == 5
    finally:
        c.close()


def test_connection_refused_is_a_connection_error():
    c = BeanstalkClient(HOST, free_port(), socket_timeout=5)
    with pytest.raises(BeanstalkConnectionError):
        c.stats()
