"""Helpers for the Python client's tests: the repository's own server launcher
(tests/http/http_testlib.py: the real binary on free loopback ports) and certificate maker
(tests/http/test_http_security.py), the package from this checkout's src/ (not an installed
copy, which could be stale), and waiters that are in place before a job can end.

No conftest.py on purpose: the repository's test folders import theirs by name (see
tests/http/http_testlib.py), and one more module of that name would make that ambiguous.
Test modules import the fixtures from here instead.
"""

from __future__ import annotations

import asyncio
import sys
import threading
import time
from pathlib import Path
from typing import Optional

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]
for path in (HERE.parent / "src", REPO / "tests" / "http", REPO / "tests"):
    sys.path.insert(0, str(path))

import pytest  # noqa: E402

import jobyard  # noqa: E402
from http_testlib import HttpServer, free_port, http, start_http  # noqa: E402,F401
from test_http_security import make_certificate  # noqa: E402,F401

ADMIN = "admin-token-for-python-client-0123"
READER = "reader-token-for-python-client-0123"
# Bounds how long a broken client or server can hang a test, never how fast a correct one is.
PATIENCE = 20.0


@pytest.fixture
def client(http: HttpServer):
    """A blocking client of a fresh server without tokens."""
    with jobyard.Client(http.url("")) as c:
        yield c


def wait_until(condition, what: str, timeout: float = PATIENCE) -> None:
    """Polls `condition` until it holds; fails the test naming `what` if it never does."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.01)


class Waiter:
    """Waits for a job's outcome on a thread of its own, and is known to the server as the
    job's watcher once constructed (outcomes are told only to requests already waiting)."""

    def __init__(self, client: jobyard.Client, job_id: int) -> None:
        self.outcome: Optional[jobyard.Outcome] = None
        self.error: Optional[BaseException] = None
        self._thread = threading.Thread(target=self._wait, args=(client, job_id), daemon=True)
        self._thread.start()
        wait_until(lambda: (client.job(job_id) or {}).get("watchers") == 1,
                   f"a watcher on job {job_id}")

    def _wait(self, client: jobyard.Client, job_id: int) -> None:
        try:
            self.outcome = client.wait(job_id, timeout=PATIENCE)
        except BaseException as e:  # noqa: BLE001 - reported by result()
            self.error = e

    def result(self) -> jobyard.Outcome:
        """The outcome heard (fails the test if the wait failed or is still running)."""
        self._thread.join(PATIENCE + 5)
        assert not self._thread.is_alive(), "the wait did not return"
        if self.error is not None:
            raise self.error
        assert self.outcome is not None
        return self.outcome


async def async_waiter(client: jobyard.AsyncClient, job_id: int) -> "asyncio.Task[jobyard.Outcome]":
    """A task waiting for a job's outcome, returned once the server knows it waits."""
    task = asyncio.ensure_future(client.wait(job_id, timeout=PATIENCE))
    deadline = time.monotonic() + PATIENCE
    while ((await client.job(job_id)) or {}).get("watchers") != 1:
        assert not task.done(), task
        assert time.monotonic() < deadline, f"no watcher on job {job_id}"
        await asyncio.sleep(0.01)
    return task
