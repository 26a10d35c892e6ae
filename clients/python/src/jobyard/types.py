"""The values the API hands back, typed: leased jobs of a queue or a flow stage, a job's
outcome, a worker pool's counts, and `Retry`, which a handler raises to give a job back."""

from __future__ import annotations

from dataclasses import dataclass, field as dataclass_field
from typing import Any, Dict, List, Optional

from .wire import field, get_bytes

__all__ = ["Job", "StageJob", "Outcome", "Summary", "Retry"]


@dataclass(frozen=True)
class Job:
    """A leased job of a plain queue. Its `worker` and `token` fence every call about this
    lease: once the lease is gone, a call with them is refused (`StaleTokenError`,
    `NotLeasedError`)."""

    #: The job's id, shared with the other protocols (the beanstalkd id).
    id: int
    #: The queue it was leased from.
    queue: str
    #: The worker session holding the lease.
    worker: str
    #: The fencing token: the job's attempt number, 1 on its first lease.
    token: int
    #: Its priority (0 is the most urgent).
    priority: int
    #: The body, as put.
    body: bytes
    #: The attributes given with the put (None when none).
    attributes: Any
    #: How long the lease lasts from its last heartbeat, in milliseconds.
    lease_ms: int
    #: When the lease ends, in milliseconds since the Unix epoch.
    deadline_ms: int
    #: The job's ttr in seconds.
    ttr: int

    @property
    def text(self) -> str:
        """The body decoded as UTF-8."""
        return self.body.decode()

    @classmethod
    def from_lease(cls, worker: str, job: Dict[str, Any]) -> "Job":
        """Reads the ``job`` object of a lease reply."""
        return cls(
            id=field(job, "id", int),
            queue=field(job, "queue", str),
            worker=worker,
            token=field(job, "token", int),
            priority=field(job, "priority", int),
            body=get_bytes(job, "body"),
            attributes=job.get("attributes"),
            lease_ms=field(job, "lease_ms", int),
            deadline_ms=field(job, "deadline_ms", int),
            ttr=field(job, "ttr", int),
        )


@dataclass(frozen=True)
class StageJob:
    """A leased job of a flow stage, fenced like `Job`."""

    #: ``<flow>:<uuidv7>`` (a child's is ``<stage>:<child>:<uuidv7>``).
    id: str
    #: The stage it was leased from.
    stage: str
    #: The worker session holding the lease.
    worker: str
    #: The fencing token.
    token: int
    #: What the stage's worker gets: ``{id, ...attributesToGet, retries, flowName, ...}``.
    input: Dict[str, Any]
    #: How long the lease lasts from its last heartbeat, in milliseconds.
    lease_ms: int
    #: When the lease ends, in milliseconds since the Unix epoch.
    deadline_ms: int

    @classmethod
    def from_lease(cls, worker: str, job: Dict[str, Any]) -> "StageJob":
        """Reads the ``job`` object of a stage lease reply."""
        return cls(
            id=field(job, "id", str),
            stage=field(job, "stage", str),
            worker=worker,
            token=field(job, "token", int),
            input=field(job, "input", dict),
            lease_ms=field(job, "lease_ms", int),
            deadline_ms=field(job, "deadline_ms", int),
        )


@dataclass(frozen=True)
class Outcome:
    """How a plain job ended, or that it has not ended yet."""

    #: ``ok``, ``failed``, ``deleted``, or ``pending`` when it did not end in time.
    status: str
    #: The result of an ``ok`` job (empty otherwise).
    result: bytes = b""
    #: The worker's error text of a ``failed`` job, if it gave one.
    error: Optional[str] = None
    #: The job's state while ``pending`` (``ready``, ``reserved``, ...).
    state: Optional[str] = None

    @property
    def ended(self) -> bool:
        """Whether the job ended (in any way)."""
        return self.status != "pending"

    @property
    def text(self) -> str:
        """The result decoded as UTF-8."""
        return self.result.decode()

    @classmethod
    def from_reply(cls, reply: Dict[str, Any]) -> "Outcome":
        """Reads a ``GET /v1/jobs/{id}/result`` reply."""
        if reply.get("ended") is not True:
            return cls("pending", state=reply.get("state"))
        status = field(reply, "status", str)
        return cls(status, result=get_bytes(reply, "result"), error=reply.get("error"))


@dataclass
class Summary:
    """What a worker pool did so far."""

    #: Jobs completed.
    completed: int = 0
    #: Jobs failed (the handler raised).
    failed: int = 0
    #: Jobs given back by `Retry`.
    retried: int = 0
    #: Reports refused because the lease was gone (stale token, not leased, not found).
    lost: int = 0
    #: The error text of each failure, newest last (at most the last 100).
    errors: List[str] = dataclass_field(default_factory=list)


class Retry(Exception):
    """Raised by a handler to give its job back instead of failing it: a plain job is
    released, ready again after `after` seconds; a flow job is delayed as long, with
    `reason` kept in its ``delayReason`` (the stage must be delayable)."""

    def __init__(self, after: float = 0.0, reason: str = "retry") -> None:
        super().__init__(reason)
        #: Seconds until the job is ready again.
        self.after = max(0.0, after)
        #: Why, for people (kept with a flow job).
        self.reason = reason
