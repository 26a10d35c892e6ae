"""Plain jobs through the client against the real server: put, describe, wait for the
result, delete; the blocking and the asyncio client; settings from the environment."""

from __future__ import annotations

import asyncio

import pytest

from pyclient_testlib import (  # noqa: F401
    Waiter, async_waiter, client, free_port, http, start_http,
)

import jobyard


def test_put_get_and_result_round_trip(client):
    job_id = client.put("emails", "hello", priority=7, ttr=30, attributes={"to": "ann"})
    described = client.job(job_id)
    assert described["state"] == "ready" and described["queue"] == "emails"
    assert (described["priority"], described["ttr"]) == (7, 30)
    assert described["attributes"] == {"to": "ann"} and described["body_preview"] == "hello"

    waiter = Waiter(client, job_id)
    job = client.lease("emails", wait=5)
    assert (job.id, job.body, job.priority, job.token) == (job_id, b"hello", 7, 1)
    assert job.attributes == {"to": "ann"}
    client.complete(job, "sent")
    outcome = waiter.result()
    assert (outcome.status, outcome.result, outcome.ended) == ("ok", b"sent", True)
    # Ended jobs are not kept.
    assert client.job(job_id) is None
    with pytest.raises(jobyard.NotFoundError) as refused:
        client.wait(job_id, timeout=0)
    assert refused.value.status == 404 and refused.value.code == "not_found"


def test_bytes_that_are_not_utf8_travel_intact(client):
    body, result = bytes(range(256)), b"\xff\xfe\x00ok"
    job_id = client.put("binary", body)
    waiter = Waiter(client, job_id)
    job = client.lease(["other", "binary"], wait=5)
    assert job.body == body and job.queue == "binary"
    client.complete(job, result)
    assert waiter.result().result == result


def test_delay_pending_wait_and_delete(client):
    job_id = client.put("later", b"x", delay=30)
    assert client.job(job_id)["state"] == "delayed"
    assert client.lease("later") is None
    pending = client.wait(job_id, timeout=0.2)
    assert (pending.status, pending.state, pending.ended) == ("pending", "delayed", False)
    assert client.delete(job_id) is True
    assert client.delete(job_id) is False
    assert client.queue("later")["delayed"] == 0


def test_async_client_round_trip(http):
    async def scenario():
        async with jobyard.AsyncClient(http.url("")) as client:
            job_id = await client.put("async-q", "ping", priority=3)
            assert (await client.job(job_id))["state"] == "ready"
            waiter = await async_waiter(client, job_id)
            job = await client.lease("async-q", wait=5)
            assert (job.id, job.text, job.priority) == (job_id, "ping", 3)
            await client.complete(job, job.text.replace("i", "o"))
            outcome = await asyncio.wait_for(waiter, 30)
            assert (outcome.status, outcome.text) == ("ok", "pong")
            assert (await client.health())["status"] == "ok"
            assert await client.job(job_id) is None

    asyncio.run(scenario())


def test_url_and_token_come_from_the_environment(start_http, monkeypatch):
    token = "env-token-for-the-python-client-0123"
    srv = start_http(["--http-token", token], token=token)
    monkeypatch.setenv("JOBYARD_URL", srv.url(""))
    monkeypatch.setenv("JOBYARD_TOKEN", token)
    with jobyard.Client() as client:
        assert client.job(client.put("env", "x"))["queue"] == "env"
    # An explicit argument wins over the environment.
    with jobyard.Client(token="not-the-token-of-this-server") as client:
        with pytest.raises(jobyard.AuthError):
            client.health()


def test_bad_urls_are_refused_before_anything_is_sent():
    for url in ("ftp://127.0.0.1:1", "not a url", "http://"):
        with pytest.raises(jobyard.ConfigError):
            jobyard.Client(url)


def test_an_unreachable_server_is_a_transport_error():
    with jobyard.Client(f"http://127.0.0.1:{free_port()}", timeout=5) as client:
        with pytest.raises(jobyard.TransportError) as failed:
            client.put("q", "x")
    assert not isinstance(failed.value, jobyard.TLSError)
    assert failed.value.is_transient and "unreachable" in str(failed.value)
