"""A client for jobyard's HTTP API (docs/http-api.md): put jobs on any queue and wait for
their outcome, lease them with fencing tokens, run worker pools, and drive flows, with a
blocking `Client` and an asyncio `AsyncClient` of the same methods.

    import jobyard

    with jobyard.Client("http://127.0.0.1:8080") as client:
        job_id = client.put("emails", "hello")
        with client.worker("emails", lambda job: job.body.upper(), concurrency=4):
            print(client.wait(job_id).result)
"""

from .aio import AsyncClient
from .client import Client
from .errors import (
    ApiError,
    AuthError,
    ConfigError,
    JobyardError,
    NotFoundError,
    NotLeasedError,
    ProtocolError,
    StaleTokenError,
    TLSError,
    TransportError,
)
from .pool import AsyncWorkerPool
from .settings import DEFAULT_URL
from .sync_pool import WorkerPool
from .types import Job, Outcome, Retry, StageJob, Summary

__version__ = "0.1.0"

__all__ = [
    "AsyncClient",
    "AsyncWorkerPool",
    "ApiError",
    "AuthError",
    "Client",
    "ConfigError",
    "DEFAULT_URL",
    "Job",
    "JobyardError",
    "NotFoundError",
    "NotLeasedError",
    "Outcome",
    "ProtocolError",
    "Retry",
    "StageJob",
    "StaleTokenError",
    "Summary",
    "TLSError",
    "TransportError",
    "WorkerPool",
]
