"""A client for jobyard's HTTP API (docs/http-api.md): put jobs on any queue and wait for
their outcome, lease them with fencing tokens, run worker pools, and drive flows, with a
blocking `Client` and an asyncio `AsyncClient` of the same methods.

    import jobyard

    with jobyard.Client("http://127.0.0.1:8080") as client:
        with client.worker("emails", lambda job: job.body.upper(), concurrency=4):
            ...                          # the pool serves "emails" until the block ends

    with jobyard.Client() as client:    # JOBYARD_URL, JOBYARD_TOKEN, JOBYARD_CA_CERT
        job_id = client.put("emails", "hello")
        print(client.wait(job_id, timeout=60).result)

README.md (beside this package's pyproject.toml) has the whole tour.
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
