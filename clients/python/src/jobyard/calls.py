"""Every API request as a value: its method, path, JSON body, how long the server may hold
it, and how to read its reply. The sync and the async client only send these, so what a
call means is written once (docs/http-api.md has the routes)."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any, Callable, Dict, Generic, List, Mapping, Optional, Sequence, Tuple
from typing import TypeVar, Union

from .types import Job, Outcome, StageJob
from .wire import Bytes, field, put_bytes, segment

T = TypeVar("T")

#: The longest wait (seconds) the server accepts in one request; longer waits are several.
MAX_WAIT = 60.0

#: A leased job of either kind.
Leased = Union[Job, StageJob]


@dataclass(frozen=True)
class Call(Generic[T]):
    """One request and how to read its reply."""

    method: str
    path: str
    parse: Callable[[Any], T]
    body: Optional[Dict[str, Any]] = None
    #: Seconds the server may hold the request before answering (a long poll).
    wait: float = 0.0
    #: Refusal codes that mean "nothing there": the call returns `absent_value` instead.
    absent: Tuple[str, ...] = ()
    absent_value: Any = None


def wait_ms(seconds: float) -> int:
    """A wait in whole milliseconds within the server's bounds."""
    return max(0, min(int(MAX_WAIT * 1000), math.ceil(seconds * 1000)))


def lease_ms(seconds: float) -> int:
    """A lease length in whole milliseconds, at least 1."""
    return max(1, math.ceil(seconds * 1000))


def _given(**fields: Any) -> Dict[str, Any]:
    return {k: v for k, v in fields.items() if v is not None}


def _ignore(_reply: Any) -> None:
    return None


# -- plain jobs -----------------------------------------------------------------------------


def put(
    queue: str,
    body: Bytes,
    priority: Optional[int],
    delay: Optional[int],
    ttr: Optional[int],
    attributes: Any,
) -> Call[int]:
    """``POST /v1/queues/{queue}/jobs``: the new job's id."""
    request = _given(priority=priority, delay=delay, ttr=ttr, attributes=attributes)
    put_bytes(request, "body", body)
    return Call("POST", f"/v1/queues/{segment(queue)}/jobs", lambda r: field(r, "id", int),
                request)


def job(job_id: int) -> Call[Optional[Dict[str, Any]]]:
    """``GET /v1/jobs/{id}``: its description, None once it ended."""
    return Call("GET", f"/v1/jobs/{job_id}", dict, absent=("not_found",))


def delete(job_id: int) -> Call[bool]:
    """``DELETE /v1/jobs/{id}``: whether it existed."""
    return Call("DELETE", f"/v1/jobs/{job_id}", lambda _: True, absent=("not_found",),
                absent_value=False)


def result(job_id: int, wait: float) -> Call[Outcome]:
    """``GET /v1/jobs/{id}/result``: its outcome if it ends within `wait` seconds."""
    ms = wait_ms(wait)
    return Call("GET", f"/v1/jobs/{job_id}/result?wait_ms={ms}", Outcome.from_reply,
                wait=ms / 1000)


def queue(name: str) -> Call[Dict[str, Any]]:
    """``GET /v1/queues/{queue}``: its counts."""
    return Call("GET", f"/v1/queues/{segment(name)}", dict)


def health() -> Call[Dict[str, Any]]:
    """``GET /v1/health``."""
    return Call("GET", "/v1/health", dict)


# -- worker sessions and leases -------------------------------------------------------------


def open_worker() -> Call[str]:
    """``POST /v1/workers``: the new session's id."""
    return Call("POST", "/v1/workers", lambda r: field(r, "worker", str), {})


def close_worker(worker: str) -> Call[int]:
    """``DELETE /v1/workers/{worker}``: how many leased jobs were made ready again."""
    return Call("DELETE", f"/v1/workers/{segment(worker)}", lambda r: field(r, "released", int),
                absent=("unknown_worker",), absent_value=0)


#: A lease reply: the worker session, and the job if one came.
LeaseReply = Tuple[str, Optional[T]]


def lease_reply(kind: Callable[[str, Dict[str, Any]], T]) -> Callable[[Any], LeaseReply[T]]:
    """Reads a lease reply (``{"worker", "job"}``) whose job is of `kind`."""

    def parse(reply: Any) -> LeaseReply[T]:
        worker = field(reply, "worker", str)
        job = reply.get("job")
        return worker, (kind(worker, job) if job is not None else None)

    return parse


def _lease_fields(worker: Optional[str], wait: float, lease: Optional[float]) -> Dict[str, Any]:
    return _given(worker=worker, wait_ms=wait_ms(wait),
                  lease_ms=lease_ms(lease) if lease is not None else None)


def queue_list(queues: Union[str, Sequence[str]]) -> List[str]:
    """One queue name or several, as a list."""
    return [queues] if isinstance(queues, str) else list(queues)


def lease(
    queues: Union[str, Sequence[str]], worker: Optional[str], wait: float,
    lease: Optional[float]
) -> Call[LeaseReply[Job]]:
    """``POST /v1/lease``: the most urgent ready job of `queues`, waiting up to `wait` s."""
    body = {"queues": queue_list(queues), **_lease_fields(worker, wait, lease)}
    return Call("POST", "/v1/lease", lease_reply(Job.from_lease), body, wait=body["wait_ms"] / 1000)


def lease_stage(
    stage: str, worker: Optional[str], wait: float, lease: Optional[float]
) -> Call[LeaseReply[StageJob]]:
    """``POST /v1/stages/{stage}/lease``: the best job of a flow stage."""
    body = _lease_fields(worker, wait, lease)
    return Call("POST", f"/v1/stages/{segment(stage)}/lease", lease_reply(StageJob.from_lease),
                body, wait=body["wait_ms"] / 1000)


def _path(job: Leased) -> str:
    if isinstance(job, StageJob):
        return f"/v1/flow-jobs/{segment(job.id)}"
    return f"/v1/jobs/{job.id}"


def _fence(job: Leased) -> Dict[str, Any]:
    return {"worker": job.worker, "token": job.token}


def heartbeat(job: Leased, lease: Optional[float]) -> Call[int]:
    """``POST .../heartbeat``: restarts the lease's clock; the new deadline (ms since epoch)."""
    body = {**_fence(job), **_given(lease_ms=lease_ms(lease) if lease is not None else None)}
    return Call("POST", f"{_path(job)}/heartbeat", lambda r: field(r, "deadline_ms", int), body)


def _with_next(body: Dict[str, Any], next_lease: Optional[Dict[str, Any]]) -> Dict[str, Any]:
    if next_lease is not None:
        body["next"] = next_lease
    return body


def complete(job: Leased, output: Any, next_lease: Optional[Dict[str, Any]] = None
             ) -> Call[Dict[str, Any]]:
    """``POST .../complete``: a plain job's result is bytes or text; a flow job's is a dict
    of fields to merge into its state (with an optional ``nextQueue``)."""
    body = _fence(job)
    if isinstance(job, StageJob):
        if output is not None:
            body["result"] = dict(output)
    elif output is not None:
        put_bytes(body, "result", output)
    return Call("POST", f"{_path(job)}/complete", dict, _with_next(body, next_lease))


def fail(job: Leased, error: Optional[str], next_lease: Optional[Dict[str, Any]] = None
         ) -> Call[Dict[str, Any]]:
    """``POST .../fail``: a plain job ends as failed; a flow job is retried while its stage
    allows, then recorded as failed."""
    body = {**_fence(job), **_given(error=error)}
    return Call("POST", f"{_path(job)}/fail", dict, _with_next(body, next_lease))


def release(job: Job, priority: Optional[int], delay: Optional[int]) -> Call[str]:
    """``POST /v1/jobs/{id}/release``: gives a plain job back; its new state."""
    body = {**_fence(job), **_given(priority=priority, delay=delay)}
    return Call("POST", f"{_path(job)}/release", lambda r: field(r, "state", str), body)


def delay(job: StageJob, ready_at_ms: int, reason: Optional[str],
          next_lease: Optional[Dict[str, Any]] = None) -> Call[Dict[str, Any]]:
    """``POST /v1/flow-jobs/{id}/delay``: puts a flow job off until `ready_at_ms`."""
    body = {**_fence(job), "ready_at_ms": ready_at_ms, **_given(reason=reason)}
    return Call("POST", f"{_path(job)}/delay", dict, _with_next(body, next_lease))


def now_ms() -> int:
    """Milliseconds since the Unix epoch."""
    return int(time.time() * 1000)


# -- flows ----------------------------------------------------------------------------------


def declare_flow(definition: Mapping[str, Any]) -> Call[bool]:
    """``POST /v1/flows``: whether it replaced an existing definition."""
    return Call("POST", "/v1/flows", lambda r: bool(r.get("replaced")), dict(definition))


def flows() -> Call[List[Dict[str, Any]]]:
    """``GET /v1/flows``: every definition."""
    return Call("GET", "/v1/flows", lambda r: list(field(r, "flows", list)))


def flow(name: str) -> Call[Dict[str, Any]]:
    """``GET /v1/flows/{flow}``: its definition and per-stage counts."""
    return Call("GET", f"/v1/flows/{segment(name)}", dict)


def create_flow_job(
    flow_name: str,
    params: Optional[Mapping[str, Any]],
    priority: Optional[int],
    idempotency_key: Optional[str],
) -> Call[str]:
    """``POST /v1/flows/{flow}/jobs``: the new (or, with a repeated key, first) job's id."""
    body = _given(params=dict(params) if params is not None else None, priority=priority,
                  idempotency_key=idempotency_key)
    return Call("POST", f"/v1/flows/{segment(flow_name)}/jobs", lambda r: field(r, "id", str),
                body)


def _view(fields: Optional[Sequence[str]], resolve_children: bool) -> str:
    query = []
    if resolve_children:
        query.append("resolve_children=true")
    if fields:
        query.append("fields=" + ",".join(segment(f) for f in fields))
    return "&".join(query)


def flow_job(job_id: str, fields: Optional[Sequence[str]], resolve_children: bool
             ) -> Call[Optional[Dict[str, Any]]]:
    """``GET /v1/flow-jobs/{id}``: the job and its state, None once deleted or purged."""
    query = _view(fields, resolve_children)
    path = f"/v1/flow-jobs/{segment(job_id)}" + (f"?{query}" if query else "")
    return Call("GET", path, dict, absent=("not_found",))


def flow_jobs_by_key(flow_name: str, key: str, value: Union[str, int],
                     fields: Optional[Sequence[str]], resolve_children: bool
                     ) -> Call[List[Dict[str, Any]]]:
    """``GET /v1/flows/{flow}/jobs?key=&value=``: jobs whose lookup attribute had `value`."""
    query = f"key={segment(key)}&value={segment(value)}"
    view = _view(fields, resolve_children)
    path = f"/v1/flows/{segment(flow_name)}/jobs?{query}" + (f"&{view}" if view else "")
    return Call("GET", path, lambda r: list(field(r, "jobs", list)))


def delete_flow_job(job_id: str) -> Call[bool]:
    """``DELETE /v1/flow-jobs/{id}``: whether it existed."""
    return Call("DELETE", f"/v1/flow-jobs/{segment(job_id)}", lambda _: True,
                absent=("not_found",), absent_value=False)


#: Flow job states in which the job will not move again.
FINAL_STATES = frozenset({"done", "failed"})
