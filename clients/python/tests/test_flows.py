"""Flows through the client: declare, create, read, stage workers (blocking and asyncio)
carrying a job to its end, waiting for it, lookups, failures, and a stage's fenced lease."""

from __future__ import annotations

import asyncio

import pytest

from pyclient_testlib import PATIENCE, client, http, start_http, wait_until  # noqa: F401

import jobyard

GREET = {
    "name": "greet",
    "lookupAttributes": ["userId"],
    "stages": [
        {"name": "hello", "next": "bye", "attributesToGet": ["who"]},
        {"name": "bye", "attributesToGet": ["who", "greeting"], "maxRetries": 1},
    ],
}


def test_a_flow_job_goes_through_its_stages_with_stage_workers(client):
    assert client.declare_flow(GREET) is False
    assert client.declare_flow(GREET) is True
    assert [f["name"] for f in client.flows()] == ["greet"]
    job_id = client.create_flow_job("greet", {"who": "ann", "userId": 7})
    assert job_id.startswith("greet:")
    created = client.flow_job(job_id)
    assert (created["stage"], created["state"]) == ("hello", "waiting")
    assert created["fields"]["who"] == "ann"
    assert [j["id"] for j in client.flow_jobs_by_key("greet", "userId", 7)] == [job_id]

    def hello(job: jobyard.StageJob):
        return {"greeting": f"hello {job.input['who']}"}

    def bye(job: jobyard.StageJob):
        return {"farewell": job.input["greeting"].replace("hello", "bye")}

    with client.stage_worker("hello", hello, poll_wait=5), \
            client.stage_worker("bye", bye, poll_wait=5):
        done = client.wait_flow_job(job_id, timeout=PATIENCE)
    assert done["state"] == "done"
    assert done["fields"]["greeting"] == "hello ann"
    assert done["fields"]["farewell"] == "bye ann"
    assert done["fields"]["done"] is True
    only = client.flow_job(job_id, fields=["farewell"])
    assert only["fields"] == {"farewell": "bye ann"}
    assert client.delete_flow_job(job_id) is True
    assert client.flow_job(job_id) is None and client.delete_flow_job(job_id) is False


def test_a_stage_handler_that_raises_fails_the_flow_job_after_its_retries(client):
    client.declare_flow(GREET)
    job_id = client.create_flow_job("greet", {"who": "bob"})
    tries = []

    def bye(job: jobyard.StageJob):
        tries.append(job.input["retries"])
        raise KeyError("mailbox")

    with client.stage_worker("hello", lambda job: {"greeting": "hi"}, poll_wait=5), \
            client.stage_worker("bye", bye, poll_wait=5) as pool:
        failed = client.wait_flow_job(job_id, timeout=PATIENCE)
    assert failed["state"] == "failed" and tries == [0, 1]
    assert failed["fields"]["failedQueue"] == "bye"
    assert failed["fields"]["failedErrorMsg"] == "'mailbox'"
    assert pool.summary.failed == 2


def test_a_stage_lease_is_fenced_too(client):
    client.declare_flow(GREET)
    job_id = client.create_flow_job("greet", {"who": "cy"})
    first = client.lease_stage("hello", lease=0.2, wait=5)
    assert (first.id, first.stage, first.token) == (job_id, "hello", 1)
    assert first.input["who"] == "cy"
    # The lease runs out: the job is failed, as the stage allows no retries.
    wait_until(lambda: client.flow_job(job_id)["state"] == "failed", "the lease to run out")
    assert client.flow_job(job_id)["fields"]["failedErrorMsg"] == "hello lock time exceeded"
    with pytest.raises(jobyard.StaleTokenError):
        client.complete(first, {"greeting": "late"})
    assert "greeting" not in client.flow_job(job_id)["fields"]


def test_flows_with_the_async_client(http):
    async def scenario():
        async with jobyard.AsyncClient(http.url("")) as client:
            await client.declare_flow(GREET)
            job_id = await client.create_flow_job("greet", {"who": "dee"}, priority=1,
                                                  idempotency_key="dee-1")
            assert await client.create_flow_job("greet", {"who": "dee"},
                                                idempotency_key="dee-1") == job_id

            async def hello(job: jobyard.StageJob):
                await asyncio.sleep(0)
                return {"greeting": f"hey {job.input['who']}"}

            async with client.stage_worker("hello", hello, poll_wait=5), \
                    client.stage_worker("bye", lambda job: None, poll_wait=5):
                done = await client.wait_flow_job(job_id, timeout=PATIENCE)
            assert done["state"] == "done" and done["fields"]["greeting"] == "hey dee"
            stage_counts = {s["stage"]: s for s in (await client.flow("greet"))["stages"]}
            assert stage_counts["bye"]["done"] == 1

    asyncio.run(scenario())
