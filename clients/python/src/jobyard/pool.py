"""A pool of workers on asyncio: N slots, each with its own worker session (the server takes
one lease request per session at a time), leasing with a long poll, running the handler
while heartbeating, and reporting with the lease's fencing token.

A flow stage job's report also asks for the slot's next job (``next``, with no wait): while
jobs keep coming a slot makes one request per job, and when none is ready it goes back to
its long poll.

Stopping is graceful: slots waiting for a job give up the wait at once (the server makes a
job handed out in that instant ready again), slots running a handler let it finish and
report, then every session is ended. The sync `WorkerPool` runs this same loop on a thread
of its own, with the handlers on a thread pool.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from typing import Any, Awaitable, Callable, Dict, Generic, List, Optional, TypeVar

from . import calls
from .calls import Call
from .errors import ApiError, JobyardError, NotFoundError, NotLeasedError, StaleTokenError
from .kinds import J, Kind
from .types import Retry, Summary

__all__ = ["AsyncWorkerPool", "DEFAULT_POLL_WAIT"]

T = TypeVar("T")

log = logging.getLogger("jobyard")

#: Seconds one lease request waits on the server when no job is ready.
DEFAULT_POLL_WAIT = 20.0
#: Seconds to pause after a failed call before trying again, so a down server is not hammered.
RETRY_PAUSE = 0.5
#: How many failures' texts a summary keeps.
KEPT_ERRORS = 100

#: Sends a call and returns its parsed reply (`AsyncClient.send`).
Send = Callable[[Call[Any]], Awaitable[Any]]
#: Runs the user's handler on one job and returns its output (or raises what it raised).
Run = Callable[[Any], Awaitable[Any]]


class _Stopped(Exception):
    """The pool was asked to stop while a slot waited."""


class AsyncWorkerPool(Generic[J]):
    """Running workers: made by `AsyncClient.worker` / `AsyncClient.stage_worker`. Stop them
    with `stop` (or use ``async with``); dropping the pool leaves them running."""

    def __init__(
        self,
        send: Send,
        kind: Kind[J],
        run: Run,
        concurrency: int = 1,
        poll_wait: float = DEFAULT_POLL_WAIT,
        lease: Optional[float] = None,
    ) -> None:
        self._send = send
        self._kind: Kind[J] = kind
        self._run = run
        self._concurrency = max(1, concurrency)
        self._poll_wait = min(max(0.0, poll_wait), calls.MAX_WAIT)
        self._lease = lease
        self._stopping = asyncio.Event()
        self._summary = Summary()
        self._tasks: List["asyncio.Task[None]"] = []

    def start(self) -> "AsyncWorkerPool[J]":
        """Starts the slots on the running event loop (once)."""
        if not self._tasks:
            self._tasks = [asyncio.ensure_future(self._slot()) for _ in range(self._concurrency)]
        return self

    async def stop(self) -> Summary:
        """Stops leasing, waits for running handlers to finish and report, ends the worker
        sessions; returns the final counts."""
        self._stopping.set()
        await asyncio.gather(*self._tasks)
        return self.summary

    @property
    def summary(self) -> Summary:
        """The counts so far (a copy)."""
        s = self._summary
        return Summary(s.completed, s.failed, s.retried, s.lost, list(s.errors))

    async def __aenter__(self) -> "AsyncWorkerPool[J]":
        return self.start()

    async def __aexit__(self, *exc: Any) -> None:
        await self.stop()

    # -- one slot ---------------------------------------------------------------------------

    async def _slot(self) -> None:
        worker: Optional[str] = None
        # A job handed out with the last report's reply, run before leasing again.
        handed: Optional[J] = None
        try:
            while not self._stopping.is_set():
                if handed is not None:
                    handed = await self._work(handed)
                    continue
                if worker is None:
                    worker = await self._open_session()
                    continue
                try:
                    worker, job = await self._until_stopped(
                        self._send(self._kind.lease(worker, self._poll_wait, self._lease)))
                except _Stopped:
                    break
                except ApiError as e:
                    if e.code == "unknown_worker":
                        worker = None
                        continue
                    log.warning("lease refused; retrying: %s", e)
                    await self._pause()
                    continue
                except JobyardError as e:
                    log.warning("lease failed; retrying: %s", e)
                    await self._pause()
                    continue
                if job is not None:
                    handed = await self._work(job)
        finally:
            # A job handed out with a report as the stop came was not started: ending the
            # session makes it ready again for another worker.
            if worker is not None:
                try:
                    await self._send(calls.close_worker(worker))
                except JobyardError as e:
                    log.warning("could not end worker session %s: %s", worker, e)

    async def _open_session(self) -> Optional[str]:
        try:
            return await self._send(calls.open_worker())  # type: ignore[no-any-return]
        except JobyardError as e:
            log.warning("could not open a worker session; retrying: %s", e)
            await self._pause()
            return None

    async def _until_stopped(self, request: Awaitable[T]) -> T:
        """Awaits `request` unless the pool is asked to stop first: then the request is
        cancelled (its connection closed, so the server drops the wait) and `_Stopped`
        raised."""
        task = asyncio.ensure_future(request)
        stop = asyncio.ensure_future(self._stopping.wait())
        try:
            await asyncio.wait({task, stop}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stop.cancel()
        if task.done():
            return task.result()
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        raise _Stopped

    async def _pause(self) -> None:
        """Sleeps `RETRY_PAUSE`, or less if asked to stop."""
        try:
            await asyncio.wait_for(self._stopping.wait(), RETRY_PAUSE)
        except asyncio.TimeoutError:
            pass

    async def _work(self, job: J) -> Optional[J]:
        """Runs the handler while heartbeating, then reports. A stop does not interrupt a
        running handler. Returns the next job when the report's reply brought one."""
        running = asyncio.ensure_future(self._run(job))
        beat = max(job.lease_ms / 2000, 0.001)
        while True:
            done, _ = await asyncio.wait({running}, timeout=beat)
            if done:
                break
            try:
                await self._send(calls.heartbeat(job, self._lease))
            except JobyardError as e:
                log.warning("heartbeat of job %s refused: %s", job.id, e)
        return await self._report(job, running)

    def _next_lease(self) -> Optional[Dict[str, Any]]:
        """``next`` of a report: the next job if one is ready now. No wait, so the report's
        answer (and a stop) is never held up; an idle slot goes back to its long poll."""
        if not self._kind.leases_next or self._stopping.is_set():
            return None
        following: Dict[str, Any] = {"wait_ms": 0}
        if self._lease is not None:
            following["lease_ms"] = calls.lease_ms(self._lease)
        return following

    async def _report(self, job: J, handled: "asyncio.Future[Any]") -> Optional[J]:
        following = self._next_lease()
        counts = self._summary
        try:
            output = handled.result()
        except Retry as retry:
            report: Call[Any] = self._kind.retry(job, retry, following)
        except Exception as e:  # noqa: BLE001 - any handler error fails its job
            report = self._kind.failure(job, _error_text(e), following)
        else:
            report = self._kind.success(job, output, following)
        try:
            reply = await self._send(report)
        except (StaleTokenError, NotLeasedError, NotFoundError) as e:
            counts.lost += 1
            log.warning("report on job %s refused, the lease was gone: %s", job.id, e)
            return None
        except JobyardError as e:
            log.warning("could not report on job %s: %s", job.id, e)
            return None
        self._count(report)
        return self._kind.next_job(reply) if isinstance(reply, dict) else None

    def _count(self, report: Call[Any]) -> None:
        """Counts a report the server took by the verb sent, which is not always what the
        handler meant: an output of the wrong type is reported as a failure."""
        counts = self._summary
        verb = report.path.rsplit("/", 1)[-1]
        if verb == "complete":
            counts.completed += 1
        elif verb == "fail":
            counts.failed += 1
            counts.errors = (counts.errors + [str((report.body or {}).get("error", ""))])[
                -KEPT_ERRORS:]
        else:
            counts.retried += 1


def _error_text(e: Exception) -> str:
    """What a failed job's waiters are told: the exception's text (its type when empty)."""
    return str(e) or type(e).__name__


async def run_async_handler(handler: Callable[[Any], Any], job: Any) -> Any:
    """Calls `handler` and awaits what it returns when that is awaitable, so a plain
    function works as an async pool's handler too (it then runs on the event loop)."""
    output = handler(job)
    if inspect.isawaitable(output):
        output = await output
    return output
