"""The blocking API's worker pool: the asyncio pool (pool.py) on an event loop of its own
thread, with the handlers on a thread pool. So the blocking API gets the same loop (and a
stop that ends a long poll at once instead of waiting it out) without a second copy of it."""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Generic, Optional, Tuple

from .aio import AsyncClient
from .kinds import J, Kind
from .pool import AsyncWorkerPool
from .settings import Settings
from .types import Summary

__all__ = ["WorkerPool"]


class WorkerPool(Generic[J]):
    """Running workers: made by `Client.worker` / `Client.stage_worker`, already started.
    Stop them with `stop` (or use ``with``); until then they run in background threads."""

    def __init__(
        self,
        settings: Settings,
        kind: Kind[J],
        handler: Callable[[J], Any],
        concurrency: int,
        poll_wait: float,
        lease: Optional[float],
    ) -> None:
        concurrency = max(1, concurrency)
        self._handlers = ThreadPoolExecutor(concurrency, thread_name_prefix="jobyard-handler")
        self._loop = asyncio.new_event_loop()
        # A daemon thread: a pool never stopped must not keep the process alive at exit.
        self._thread = threading.Thread(target=self._loop.run_forever, name="jobyard-pool",
                                        daemon=True)
        self._thread.start()
        self._final: Optional[Summary] = None
        self._lock = threading.Lock()

        async def start() -> Tuple[AsyncClient, AsyncWorkerPool[J]]:
            client = AsyncClient.from_settings(settings)
            run = self._runner(handler)
            pool = AsyncWorkerPool(client.send, kind, run, concurrency, poll_wait, lease)
            return client, pool.start()

        started: Tuple[AsyncClient, AsyncWorkerPool[J]] = self._call(start())
        self._client, self._pool = started

    def _runner(self, handler: Callable[[J], Any]) -> Callable[[J], "asyncio.Future[Any]"]:
        loop, handlers = self._loop, self._handlers

        def run(job: J) -> "asyncio.Future[Any]":
            return loop.run_in_executor(handlers, handler, job)

        return run

    def _call(self, coroutine: Any, timeout: Optional[float] = None) -> Any:
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result(timeout)

    def stop(self) -> Summary:
        """Stops leasing, waits for running handlers to finish and report, ends the worker
        sessions and the pool's threads; returns the final counts. Calling it again returns
        the same counts."""
        with self._lock:
            if self._final is None:
                self._final = self._call(self._stop())
                self._loop.call_soon_threadsafe(self._loop.stop)
                self._thread.join()
                self._loop.close()
                self._handlers.shutdown()
            return self._final

    async def _stop(self) -> Summary:
        summary = await self._pool.stop()
        await self._client.aclose()
        return summary

    @property
    def summary(self) -> Summary:
        """The counts so far."""
        return self._final if self._final is not None else self._pool.summary

    def __enter__(self) -> "WorkerPool[J]":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()
