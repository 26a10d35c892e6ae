"""Where the server is and how to reach it: the URL, the token and the CA, from arguments or
the environment, turned into what httpx needs. Shared by the sync and the async client so
both read the environment the same way."""

from __future__ import annotations

import os
import ssl
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Optional, Union
from urllib.parse import urlsplit

from .errors import ConfigError

__all__ = ["DEFAULT_URL", "CA", "Settings"]

#: The server's default HTTP listener.
DEFAULT_URL = "http://127.0.0.1:8080"

#: A CA to trust: a PEM file's path, or a ready `ssl.SSLContext`.
CA = Union[str, "os.PathLike[str]", ssl.SSLContext]


@dataclass(frozen=True)
class Settings:
    """Resolved connection settings."""

    #: The base URL without a trailing slash, e.g. ``https://jobs.internal:8080``.
    url: str
    #: Headers sent with every request (the bearer token, when there is one).
    headers: Dict[str, str]
    #: What httpx verifies the server's certificate with.
    verify: Union[bool, ssl.SSLContext]
    #: Seconds to connect, send and read, on top of any wait the server was asked for.
    timeout: float

    @classmethod
    def resolve(
        cls,
        url: Optional[str] = None,
        token: Optional[str] = None,
        ca: Optional[CA] = None,
        timeout: float = 30.0,
    ) -> "Settings":
        """Arguments first, then ``JOBYARD_URL``, ``JOBYARD_TOKEN`` and ``JOBYARD_CA_CERT``
        (as `jobyard ctl` reads them), then the defaults."""
        url = url or os.environ.get("JOBYARD_URL") or DEFAULT_URL
        token = token if token is not None else os.environ.get("JOBYARD_TOKEN") or None
        if ca is None:
            ca = os.environ.get("JOBYARD_CA_CERT") or None
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return cls(_check_url(url), headers, _trust(ca), timeout)


def _check_url(url: str) -> str:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(f"{url!r}: expected http://host:port or https://host:port")
    return url.rstrip("/")


def _trust(ca: Optional[CA]) -> Union[bool, ssl.SSLContext]:
    """The system's public roots when no CA is given; otherwise only that CA, as `jobyard
    ctl --ca-cert` does, so a private server is not also trusted on a public CA's word."""
    if ca is None:
        return True
    if isinstance(ca, ssl.SSLContext):
        return ca
    path = Path(ca)
    try:
        return ssl.create_default_context(cafile=str(path))
    except (OSError, ssl.SSLError) as e:
        raise ConfigError(f"cannot use {path} as a CA certificate: {e}") from e
