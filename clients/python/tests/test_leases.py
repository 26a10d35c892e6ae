"""Fenced leases through the client: the token a lease hands out, heartbeats, release, and
the clear refusals once a lease is gone (a stale token, a lease that ran out)."""

from __future__ import annotations

import time

import pytest

from pyclient_testlib import Waiter, client, http, start_http, wait_until  # noqa: F401

import jobyard


def test_a_stale_token_is_refused_after_the_job_was_leased_again(client):
    job_id = client.put("fenced", "payload")
    first = client.lease("fenced", lease=0.2)
    assert (first.id, first.token) == (job_id, 1)
    second = client.lease("fenced", wait=5)
    assert (second.id, second.token) == (job_id, 2) and second.worker != first.worker

    for late in (lambda: client.complete(first, "late result"),
                 lambda: client.heartbeat(first),
                 lambda: client.fail(first, "late failure")):
        with pytest.raises(jobyard.StaleTokenError) as refused:
            late()
        assert (refused.value.status, refused.value.code) == (409, "stale_token")
        assert "stale" in refused.value.message

    waiter = Waiter(client, job_id)
    client.complete(second, "current result")
    assert waiter.result().text == "current result"


def test_a_lease_that_ran_out_is_not_leased_any_more(client):
    client.put("expiring", "x")
    job = client.lease("expiring", lease=0.2)
    wait_until(lambda: client.job(job.id)["state"] == "ready", "the lease to run out")
    with pytest.raises(jobyard.NotLeasedError) as refused:
        client.complete(job, "too late")
    assert refused.value.code == "not_leased"
    assert client.job(job.id)["state"] == "ready"


def test_heartbeats_keep_a_lease_and_release_gives_the_job_back(client):
    job_id = client.put("kept", "x", ttr=1)
    worker = client.open_worker()
    job = client.lease("kept", worker=worker, lease=1.0)
    assert job.worker == worker and job.lease_ms == 1000
    # Longer than the lease in all, so without the heartbeats it would run out.
    for _ in range(3):
        time.sleep(0.4)
        deadline = client.heartbeat(job, lease=1.0)
        assert deadline >= job.deadline_ms
    assert client.job(job_id)["state"] == "reserved"
    assert client.release(job, priority=3, delay=0) == "ready"
    again = client.lease("kept", worker=worker)
    assert (again.token, again.priority) == (2, 3)
    # Ending the session gives back what it holds.
    assert client.close_worker(worker) == 1
    assert client.job(job_id)["state"] == "ready"
    assert client.lease("nothing-here") is None
    # A lease without a session of its own, when nothing came, leaves no session behind.
    assert client.health()["workers"] == 0
