"""What differs between a pool of plain queue workers and one of flow stage workers: where
they lease, and how a handler's return value, exception or `Retry` becomes a report. The
pool's loop (pool.py) is the same for both."""

from __future__ import annotations

import math
from typing import Any, Dict, Generic, Optional, Sequence, TypeVar, Union

from . import calls
from .calls import Call, LeaseReply
from .types import Job, Retry, StageJob

J = TypeVar("J", bound=Union[Job, StageJob])


class Kind(Generic[J]):
    """How a pool leases and reports one kind of job."""

    #: Whether a report may ask for the worker's next job in the same request (``next``),
    #: saving a lease round trip per job while jobs keep coming.
    leases_next = False

    def lease(self, worker: str, wait: float, lease: Optional[float]) -> Call[LeaseReply[J]]:
        """The lease request of one slot."""
        raise NotImplementedError

    def success(self, job: J, output: Any, next_lease: Optional[Dict[str, Any]]
                ) -> Call[Dict[str, Any]]:
        """The report of a handler that returned `output`."""
        raise NotImplementedError

    def failure(self, job: J, error: str, next_lease: Optional[Dict[str, Any]]
                ) -> Call[Dict[str, Any]]:
        """The report of a handler that raised."""
        return calls.fail(job, error, next_lease)

    def retry(self, job: J, retry: Retry, next_lease: Optional[Dict[str, Any]]
              ) -> Call[Any]:
        """The report of a handler that raised `Retry`."""
        raise NotImplementedError

    def next_job(self, reply: Dict[str, Any]) -> Optional[J]:
        """The job a report's reply handed out with it (``next``), if any."""
        return None


class QueueKind(Kind[Job]):
    """Plain jobs of one or more queues; a handler returns bytes, text or None."""

    def __init__(self, queues: Sequence[str]) -> None:
        self.queues = list(queues)

    def lease(self, worker: str, wait: float, lease: Optional[float]) -> Call[LeaseReply[Job]]:
        """``POST /v1/lease`` on the pool's queues."""
        return calls.lease(self.queues, worker, wait, lease)

    def success(self, job: Job, output: Any, next_lease: Optional[Dict[str, Any]]
                ) -> Call[Dict[str, Any]]:
        """Completes with the output as the result; anything but bytes or text fails."""
        if output is None or isinstance(output, (bytes, bytearray, memoryview, str)):
            return calls.complete(job, output)
        return calls.fail(job, f"the handler returned {type(output).__name__}, "
                               "not bytes, str or None")

    def retry(self, job: Job, retry: Retry, next_lease: Optional[Dict[str, Any]]) -> Call[Any]:
        """Releases the job, ready after the retry's delay (whole seconds, rounded up)."""
        return calls.release(job, None, math.ceil(retry.after))


class StageKind(Kind[StageJob]):
    """Jobs of one flow stage; a handler returns the fields to merge (a dict) or None."""

    leases_next = True

    def __init__(self, stage: str) -> None:
        self.stage = stage
        self._read_next = calls.lease_reply(StageJob.from_lease)

    def lease(self, worker: str, wait: float, lease: Optional[float]
              ) -> Call[LeaseReply[StageJob]]:
        """``POST /v1/stages/{stage}/lease``."""
        return calls.lease_stage(self.stage, worker, wait, lease)

    def success(self, job: StageJob, output: Any, next_lease: Optional[Dict[str, Any]]
                ) -> Call[Dict[str, Any]]:
        """Completes with the output merged into the job's state; a non-dict fails."""
        if output is None or isinstance(output, dict):
            return calls.complete(job, output, next_lease)
        return calls.fail(job, f"the handler returned {type(output).__name__}, not a dict or "
                               "None", next_lease)

    def retry(self, job: StageJob, retry: Retry, next_lease: Optional[Dict[str, Any]]
              ) -> Call[Any]:
        """Delays the job by the retry's delay, with its reason."""
        ready_at_ms = calls.now_ms() + math.ceil(retry.after * 1000)
        return calls.delay(job, ready_at_ms, retry.reason, next_lease)

    def next_job(self, reply: Dict[str, Any]) -> Optional[StageJob]:
        """The job of the reply's ``next``."""
        following = reply.get("next")
        return self._read_next(following)[1] if isinstance(following, dict) else None
