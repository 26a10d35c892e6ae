"""Worker pools against the real server, blocking and asyncio: N handlers at once and never
more, a graceful stop that lets running handlers finish and report, failures reported with
the exception's text, and Retry giving a job back."""

from __future__ import annotations

import asyncio
import threading
import time

from pyclient_testlib import (  # noqa: F401
    PATIENCE, Waiter, async_waiter, client, http, start_http,
)

import jobyard


class InFlight:
    """Counts handlers running at once, and the most seen."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.now = self.most = 0

    def __enter__(self) -> None:
        with self.lock:
            self.now += 1
            self.most = max(self.most, self.now)

    def __exit__(self, *exc) -> None:
        with self.lock:
            self.now -= 1


def test_a_pool_runs_its_concurrency_of_handlers_at_once(client):
    ids = [client.put("batch", f"job-{i}") for i in range(4)]
    waiters = [Waiter(client, i) for i in ids]
    # Each handler waits for all four to be running: fewer at once breaks the barrier.
    together = threading.Barrier(4, timeout=PATIENCE)
    running = InFlight()

    def handler(job: jobyard.Job) -> str:
        with running:
            together.wait()
            return job.text.upper()

    with client.worker("batch", handler, concurrency=4, poll_wait=5) as pool:
        outcomes = [w.result() for w in waiters]
    assert [o.text for o in outcomes] == [f"JOB-{i}" for i in range(4)]
    assert running.most == 4
    assert pool.summary.completed == 4 and pool.summary.failed == 0


def test_a_pool_never_runs_more_than_its_concurrency(client):
    ids = [client.put("narrow", str(i)) for i in range(5)]
    waiters = [Waiter(client, i) for i in ids]
    running = InFlight()

    def handler(job: jobyard.Job) -> bytes:
        with running:
            time.sleep(0.15)
        return job.body

    with client.worker("narrow", handler, concurrency=2, poll_wait=5):
        assert [w.result().status for w in waiters] == ["ok"] * 5
    assert running.most == 2


def test_stop_lets_a_running_handler_finish_and_report(client):
    job_id = client.put("slow", "work")
    waiter = Waiter(client, job_id)
    started, finish = threading.Event(), threading.Event()

    def handler(job: jobyard.Job) -> str:
        started.set()
        assert finish.wait(PATIENCE)
        return "finished"

    pool = client.worker("slow", handler, concurrency=2, poll_wait=20)
    assert started.wait(PATIENCE)
    summaries = []
    stopping = threading.Thread(target=lambda: summaries.append(pool.stop()))
    stopping.start()
    time.sleep(0.3)
    # The stop waits for the handler, which has not reported yet.
    assert stopping.is_alive() and not summaries
    assert client.job(job_id)["state"] == "reserved"
    finish.set()
    stopping.join(PATIENCE)
    assert not stopping.is_alive()
    assert summaries[0].completed == 1
    assert waiter.result().text == "finished"
    # Every session ended with the pool, and nothing is left leased.
    assert client.health()["workers"] == 0
    assert client.queue("slow")["reserved"] == 0


def test_stop_of_an_idle_pool_ends_its_long_polls_at_once(client):
    pool = client.worker("idle", lambda job: None, concurrency=3, poll_wait=30)
    wait_for_polls = time.monotonic() + PATIENCE
    while client.queue("idle")["waiting_workers"] < 3:
        assert time.monotonic() < wait_for_polls, "the slots never started polling"
        time.sleep(0.02)
    began = time.monotonic()
    pool.stop()
    assert time.monotonic() - began < 5
    assert client.queue("idle")["waiting_workers"] == 0
    # A job put after the stop stays ready: no abandoned wait took it.
    job_id = client.put("idle", "after")
    time.sleep(0.2)
    assert client.job(job_id)["state"] == "ready"


def test_a_handler_that_raises_fails_its_job_with_the_text(client):
    job_id = client.put("fragile", "x")
    waiter = Waiter(client, job_id)

    def handler(job: jobyard.Job) -> str:
        raise RuntimeError(f"disk full while handling job {job.id}")

    with client.worker("fragile", handler) as pool:
        outcome = waiter.result()
    assert outcome.status == "failed"
    assert outcome.error == f"disk full while handling job {job_id}"
    assert pool.summary.failed == 1 and pool.summary.completed == 0
    assert pool.summary.errors == [outcome.error]


def test_retry_gives_the_job_back_for_another_attempt(client):
    job_id = client.put("flaky", "x")
    waiter = Waiter(client, job_id)
    attempts = []

    def handler(job: jobyard.Job) -> str:
        attempts.append(job.token)
        if len(attempts) == 1:
            raise jobyard.Retry(after=0)
        return f"attempt {job.token}"

    with client.worker("flaky", handler, poll_wait=5) as pool:
        outcome = waiter.result()
    assert attempts == [1, 2] and outcome.text == "attempt 2"
    assert (pool.summary.retried, pool.summary.completed) == (1, 1)


def test_async_pool_concurrency_graceful_stop_and_failure(http):
    async def scenario():
        async with jobyard.AsyncClient(http.url("")) as client:
            ids = [await client.put("aio", str(i)) for i in range(3)]
            bad = await client.put("aio", "bad")
            waits = [await async_waiter(client, i) for i in ids + [bad]]
            arrived, release = [], asyncio.Event()

            async def handler(job: jobyard.Job) -> str:
                if job.text == "bad":
                    raise ValueError("no such recipient: bad")
                arrived.append(job.id)
                if len(arrived) == 3:
                    release.set()
                # All three must be running at once to get past this.
                await asyncio.wait_for(release.wait(), PATIENCE)
                return f"done {job.text}"

            pool = client.worker("aio", handler, concurrency=4, poll_wait=20)
            outcomes = await asyncio.wait_for(asyncio.gather(*waits), PATIENCE + 5)
            assert [o.text for o in outcomes[:3]] == ["done 0", "done 1", "done 2"]
            assert (outcomes[3].status, outcomes[3].error) == ("failed", "no such recipient: bad")

            summary = await pool.stop()
            assert (summary.completed, summary.failed) == (3, 1)

            # A graceful stop while a handler runs: it finishes and reports first.
            slow_id = await client.put("aio", "slow")
            slow_wait = await async_waiter(client, slow_id)
            finish = asyncio.Event()
            handler_started = asyncio.Event()

            async def slow_handler(job: jobyard.Job) -> str:
                handler_started.set()
                await asyncio.wait_for(finish.wait(), PATIENCE)
                return "slow done"

            second = client.worker("aio", slow_handler, concurrency=2, poll_wait=20)
            await asyncio.wait_for(handler_started.wait(), PATIENCE)
            stopping = asyncio.ensure_future(second.stop())
            await asyncio.sleep(0.3)
            assert not stopping.done() and not slow_wait.done()
            finish.set()
            assert (await asyncio.wait_for(stopping, PATIENCE)).completed == 1
            assert (await slow_wait).text == "slow done"
            assert (await client.health())["workers"] == 0

    asyncio.run(scenario())
