"""Reading a reply the same way whichever client sent the request: JSON on success, a
typed refusal otherwise; and the per-request timeout that leaves room for a long poll."""

from __future__ import annotations

from typing import Any, TypeVar

import httpx

from .calls import Call
from .errors import ProtocolError, refusal
from .settings import Settings

T = TypeVar("T")


def timeout_for(settings: Settings, call: Call[Any]) -> httpx.Timeout:
    """The client's timeout, with the read allowed to last as long as the server may hold
    the request on top of it."""
    return httpx.Timeout(settings.timeout, read=settings.timeout + call.wait)


def read_reply(call: Call[T], response: httpx.Response) -> T:
    """The parsed reply, ``call.absent_value`` for a refusal that means "nothing there", or
    the refusal raised as the most specific `ApiError`."""
    status = response.status_code
    try:
        payload = response.json()
    except ValueError:
        raise ProtocolError(
            f"status {status} from {response.request.url}, not JSON: {response.text[:200]!r}",
            status,
        ) from None
    if 200 <= status < 300:
        return call.parse(payload)
    error = payload.get("error") if isinstance(payload, dict) else None
    if not isinstance(error, dict):
        raise ProtocolError(f"status {status} without an error object: {payload!r}", status)
    code, message = str(error.get("code", "")), str(error.get("message", ""))
    if code in call.absent:
        return call.absent_value  # type: ignore[no-any-return]
    raise refusal(status, code, message)
