"""The asyncio client: one `httpx.AsyncClient` (a connection pool) for one event loop. It
has the blocking `Client`'s methods (client.py) as coroutines; worker pools run as tasks."""

from __future__ import annotations

import asyncio
import time
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, TypeVar, Union

import httpx

from . import calls
from .calls import Call
from .errors import transport_error
from .kinds import J, Kind, QueueKind, StageKind
from .pool import DEFAULT_POLL_WAIT, AsyncWorkerPool, run_async_handler
from .settings import CA, Settings
from .transport import read_reply, timeout_for
from .types import Job, Outcome, StageJob
from .wire import Bytes

__all__ = ["AsyncClient"]

T = TypeVar("T")

#: Longest pause between two looks at a flow job while waiting for it to finish.
FLOW_POLL_MAX = 0.5


class AsyncClient:
    """A handle on one jobyard server's HTTP API, for asyncio.

    `url`, `token` and `ca` default to ``JOBYARD_URL`` (else ``http://127.0.0.1:8080``),
    ``JOBYARD_TOKEN`` and ``JOBYARD_CA_CERT``. `ca` is a PEM file's path or an
    `ssl.SSLContext`; given, it is the only CA trusted. `timeout` (seconds) bounds connecting
    and each request, on top of any wait the server is asked for. Nothing is sent until the
    first call. Use it as an async context manager, or `aclose` it.
    """

    def __init__(
        self,
        url: Optional[str] = None,
        *,
        token: Optional[str] = None,
        ca: Optional[CA] = None,
        timeout: float = 30.0,
    ) -> None:
        self._open(Settings.resolve(url, token, ca, timeout))

    @classmethod
    def from_settings(cls, settings: Settings) -> "AsyncClient":
        """A client for settings already resolved (a sync `WorkerPool` uses its `Client`'s)."""
        client = cls.__new__(cls)
        client._open(settings)
        return client

    def _open(self, settings: Settings) -> None:
        self.settings = settings
        self._http = httpx.AsyncClient(
            base_url=settings.url,
            headers=settings.headers,
            verify=settings.verify,
            timeout=settings.timeout,
        )

    async def send(self, call: Call[T]) -> T:
        """Sends one request and reads its reply (the methods below are made of these)."""
        try:
            response = await self._http.request(
                call.method, call.path, json=call.body, timeout=timeout_for(self.settings, call)
            )
        except httpx.HTTPError as e:
            raise transport_error(e, self.settings.url) from e
        return read_reply(call, response)

    async def aclose(self) -> None:
        """Closes the kept connections."""
        await self._http.aclose()

    async def __aenter__(self) -> "AsyncClient":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()

    # -- plain jobs -------------------------------------------------------------------------

    async def put(
        self,
        queue: str,
        body: Bytes = b"",
        *,
        priority: Optional[int] = None,
        delay: Optional[int] = None,
        ttr: Optional[int] = None,
        attributes: Any = None,
    ) -> int:
        """Puts a job on `queue` and returns its id once it is durable. `priority`: 0 is the
        most urgent (server default 1024); `delay`: seconds before it is ready; `ttr`:
        seconds a lease lasts (default 60); `attributes`: any JSON kept with the job."""
        return await self.send(calls.put(queue, body, priority, delay, ttr, attributes))

    async def job(self, job_id: int) -> Optional[Dict[str, Any]]:
        """Describes a job (state, attempts, attributes, a body preview); None once it ended."""
        return await self.send(calls.job(job_id))

    async def delete(self, job_id: int) -> bool:
        """Deletes a job that is not leased; False if it no longer exists."""
        return await self.send(calls.delete(job_id))

    async def wait(self, job_id: int, timeout: float = 30.0) -> Outcome:
        """Waits up to `timeout` seconds for a job to end, by whatever protocol ends it.
        Only a waiter present at the end hears the outcome (the server keeps none), so start
        waiting before the job can finish; the outcome is ``pending`` if it did not end."""
        deadline = time.monotonic() + timeout
        while True:
            outcome = await self.send(calls.result(job_id, max(0.0, deadline - time.monotonic())))
            if outcome.ended or time.monotonic() >= deadline:
                return outcome

    async def queue(self, name: str) -> Dict[str, Any]:
        """A queue's counts (``ready``, ``reserved``, ``delayed``, ``buried``, totals...)."""
        return await self.send(calls.queue(name))

    async def health(self) -> Dict[str, Any]:
        """The server's health: ``{"status": "ok"|"draining", "version", "workers"}``."""
        return await self.send(calls.health())

    # -- worker sessions and fenced leases -------------------------------------------------

    async def open_worker(self) -> str:
        """Opens a worker session (leases belong to it); returns its id."""
        return await self.send(calls.open_worker())

    async def close_worker(self, worker: str) -> int:
        """Ends a worker session; the jobs it holds are ready again. Returns how many."""
        return await self.send(calls.close_worker(worker))

    async def lease(
        self,
        queues: Union[str, Sequence[str]],
        *,
        worker: Optional[str] = None,
        wait: float = 0.0,
        lease: Optional[float] = None,
    ) -> Optional[Job]:
        """Leases the most urgent ready job of `queues`, waiting up to `wait` seconds (at
        most 60) for one. The job carries its fencing `token` and `worker`: pass it to
        `complete`, `fail`, `heartbeat` or `release`. `lease`: seconds the lease lasts
        (default: the job's ttr). Without `worker` a new session is opened for the job (and
        ended again when none came)."""
        opened, job = await self.send(calls.lease(queues, worker, wait, lease))
        if job is None and worker is None:
            await self.close_worker(opened)
        return job

    async def heartbeat(self, job: Union[Job, StageJob], *, lease: Optional[float] = None) -> int:
        """Extends a lease by `lease` seconds from now (default: the job's ttr, a stage's
        ``leaseMs``); returns the new deadline in ms since the epoch. Raises
        `StaleTokenError` / `NotLeasedError` once the lease is gone."""
        return await self.send(calls.heartbeat(job, lease))

    async def complete(self, job: Union[Job, StageJob], result: Any = None) -> Dict[str, Any]:
        """Ends a leased job successfully. A plain job's `result` is bytes or text, handed
        to its waiters; a flow job's is a dict of fields to merge (optionally with
        ``nextQueue``). Returns the server's reply (a flow job's: where it is now)."""
        return await self.send(calls.complete(job, result))

    async def fail(self, job: Union[Job, StageJob], error: Optional[str] = None) -> Dict[str, Any]:
        """Fails a leased job with `error` (a flow job is retried while its stage allows)."""
        return await self.send(calls.fail(job, error))

    async def release(
        self, job: Job, *, priority: Optional[int] = None, delay: Optional[int] = None
    ) -> str:
        """Gives a leased plain job back, ready now or after `delay` seconds, optionally with
        a new priority; returns its state (``ready`` or ``delayed``)."""
        return await self.send(calls.release(job, priority, delay))

    async def delay(self, job: StageJob, after: float, *, reason: Optional[str] = None
              ) -> Dict[str, Any]:
        """Puts a leased flow job off for `after` seconds (Guild's ``DelayError``)."""
        ready_at_ms = calls.now_ms() + int(after * 1000)
        return await self.send(calls.delay(job, ready_at_ms, reason))

    # -- worker pools -----------------------------------------------------------------------

    def worker(
        self,
        queues: Union[str, Sequence[str]],
        handler: Callable[[Job], Any],
        *,
        concurrency: int = 1,
        poll_wait: float = DEFAULT_POLL_WAIT,
        lease: Optional[float] = None,
    ) -> AsyncWorkerPool[Job]:
        """Starts a pool of tasks on the running loop, running `handler` on jobs of
        `queues`, `concurrency` at once. The handler (a coroutine function; a plain function
        runs on the loop) returns the result (bytes, text or None); an exception fails the
        job with its text; `Retry` gives the job back. Leases are heartbeated while the
        handler runs. ``await pool.stop()`` (or leaving an ``async with`` block) lets running
        handlers finish and report before it returns."""
        kind = QueueKind(calls.queue_list(queues))
        return self._pool(kind, handler, concurrency, poll_wait, lease)

    def stage_worker(
        self,
        stage: str,
        handler: Callable[[StageJob], Any],
        *,
        concurrency: int = 1,
        poll_wait: float = DEFAULT_POLL_WAIT,
        lease: Optional[float] = None,
    ) -> AsyncWorkerPool[StageJob]:
        """Starts a pool on one flow stage (``<stage>:<child>`` for a child stage). The
        handler gets a `StageJob` (its ``input`` is what Guild's worker function gets) and
        returns the fields to merge into the job's state, or None; otherwise as `worker`."""
        return self._pool(StageKind(stage), handler, concurrency, poll_wait, lease)

    def _pool(self, kind: Kind[J], handler: Callable[[J], Any], concurrency: int,
              poll_wait: float, lease: Optional[float]) -> AsyncWorkerPool[J]:
        async def run(job: J) -> Any:
            return await run_async_handler(handler, job)

        pool = AsyncWorkerPool(self.send, kind, run, concurrency, poll_wait, lease)
        return pool.start()

    # -- flows ------------------------------------------------------------------------------

    async def declare_flow(self, definition: Mapping[str, Any]) -> bool:
        """Declares a flow, or replaces its definition (docs/http-api.md, "Flows"); returns
        whether it replaced one."""
        return await self.send(calls.declare_flow(definition))

    async def flows(self) -> List[Dict[str, Any]]:
        """Every declared flow's definition."""
        return await self.send(calls.flows())

    async def flow(self, name: str) -> Dict[str, Any]:
        """A flow's definition and per-stage counts."""
        return await self.send(calls.flow(name))

    async def create_flow_job(
        self,
        flow: str,
        params: Optional[Mapping[str, Any]] = None,
        *,
        priority: Optional[int] = None,
        idempotency_key: Optional[str] = None,
    ) -> str:
        """Creates a job in `flow`'s first stage with `params` as its state; returns its id.
        Creating again with the same `idempotency_key` returns the first job's id."""
        return await self.send(calls.create_flow_job(flow, params, priority, idempotency_key))

    async def flow_job(
        self,
        job_id: str,
        *,
        fields: Optional[Sequence[str]] = None,
        resolve_children: bool = False,
    ) -> Optional[Dict[str, Any]]:
        """A flow job: ``{id, flow, stage, state, priority, fields, ...}``, its state's keys
        limited to `fields` when given; None once deleted or purged."""
        return await self.send(calls.flow_job(job_id, fields, resolve_children))

    async def flow_jobs_by_key(
        self,
        flow: str,
        key: str,
        value: Union[str, int],
        *,
        fields: Optional[Sequence[str]] = None,
        resolve_children: bool = False,
    ) -> List[Dict[str, Any]]:
        """The jobs of `flow` whose lookup attribute `key` had `value` at creation."""
        return await self.send(calls.flow_jobs_by_key(flow, key, value, fields, resolve_children))

    async def delete_flow_job(self, job_id: str) -> bool:
        """Deletes a flow job with its children; False if it did not exist."""
        return await self.send(calls.delete_flow_job(job_id))

    async def wait_flow_job(self, job_id: str, timeout: float = 30.0) -> Optional[Dict[str, Any]]:
        """Waits up to `timeout` seconds for a flow job to finish (state ``done`` or
        ``failed``) and returns it as last seen (check its ``state``); None if it was
        deleted. The server keeps finished flow jobs, so this may start at any time."""
        deadline = time.monotonic() + timeout
        pause = 0.02
        while True:
            job = await self.flow_job(job_id)
            left = deadline - time.monotonic()
            if job is None or job.get("state") in calls.FINAL_STATES or left <= 0:
                return job
            await asyncio.sleep(min(pause, left))
            pause = min(pause * 2, FLOW_POLL_MAX)

    async def lease_stage(
        self,
        stage: str,
        *,
        worker: Optional[str] = None,
        wait: float = 0.0,
        lease: Optional[float] = None,
    ) -> Optional[StageJob]:
        """Leases the best job of a flow stage, waiting up to `wait` seconds; as `lease`."""
        opened, job = await self.send(calls.lease_stage(stage, worker, wait, lease))
        if job is None and worker is None:
            await self.close_worker(opened)
        return job
