"""What can go wrong talking to jobyard, split by who is to blame: the server refused (with a
stable code to branch on), the network or TLS failed, the reply made no sense, or the client
was set up wrongly."""

from __future__ import annotations

import ssl
from typing import Dict, Optional, Type

import httpx

__all__ = [
    "JobyardError",
    "ConfigError",
    "ApiError",
    "AuthError",
    "NotFoundError",
    "StaleTokenError",
    "NotLeasedError",
    "TransportError",
    "TLSError",
    "ProtocolError",
]


class JobyardError(Exception):
    """Base of every error this package raises."""

    @property
    def is_transient(self) -> bool:
        """Whether the same call may succeed later (the server was unreachable, busy or
        stopping), as opposed to a refusal that will repeat."""
        return False


class ConfigError(JobyardError, ValueError):
    """The client's settings are unusable: a URL that is not http(s)://host:port, or a CA
    file that cannot be read."""


class ApiError(JobyardError):
    """The server refused the request. Branch on `code`: the codes of docs/http-api.md
    ("Errors") keep their meaning across versions; `message` is for people."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(f"jobyard refused ({status} {code}): {message}")
        #: The HTTP status, e.g. 409.
        self.status = status
        #: The server's stable error code, e.g. ``stale_token``.
        self.code = code
        #: The server's explanation.
        self.message = message

    @property
    def is_transient(self) -> bool:
        """503s (draining, shutting down, too many sessions) may pass."""
        return self.status == 503


class AuthError(ApiError):
    """The token is missing (``auth_required``), unknown (``bad_token``) or may only read
    (``forbidden``)."""


class NotFoundError(ApiError):
    """No such job (``not_found``): it never existed, or it ended."""


class StaleTokenError(ApiError):
    """The fencing token is not the job's current attempt (``stale_token``): that lease is
    gone and the job was leased again since, so this holder's word no longer counts."""


class NotLeasedError(ApiError):
    """The job is not leased by this worker (``not_leased``): the lease ran out and nobody
    took the job since, or another worker holds it."""


class TransportError(JobyardError):
    """The request did not reach the server, or its answer did not come back."""

    @property
    def is_transient(self) -> bool:
        """A network failure may pass."""
        return True


class TLSError(TransportError):
    """The TLS handshake failed: most often the server's certificate is not signed by a CA
    the client trusts (pass ``ca=``), or names another host."""

    @property
    def is_transient(self) -> bool:
        """A certificate the client does not trust will not become trusted by retrying."""
        return False


class ProtocolError(JobyardError):
    """The server answered something this client does not understand (the URL may point at
    something that is not jobyard)."""

    def __init__(self, message: str, status: Optional[int] = None) -> None:
        super().__init__(message)
        #: The HTTP status of the odd reply, when there was one.
        self.status = status


_BY_CODE: Dict[str, Type[ApiError]] = {
    "auth_required": AuthError,
    "bad_token": AuthError,
    "forbidden": AuthError,
    "not_found": NotFoundError,
    "stale_token": StaleTokenError,
    "not_leased": NotLeasedError,
}


def refusal(status: int, code: str, message: str) -> ApiError:
    """The most specific `ApiError` for a refusal's code."""
    return _BY_CODE.get(code, ApiError)(status, code, message)


def transport_error(error: httpx.HTTPError, url: str) -> TransportError:
    """A `TransportError` (a `TLSError` when the handshake failed) for an httpx failure."""
    cause: Optional[BaseException] = error
    while cause is not None:
        if isinstance(cause, ssl.SSLError):
            return TLSError(f"TLS with {url} failed: {cause}")
        cause = cause.__cause__ or cause.__context__
    return TransportError(f"jobyard unreachable at {url}: {error!r}")
