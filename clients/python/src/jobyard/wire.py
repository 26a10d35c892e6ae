"""How values travel in the API's JSON: bytes as a UTF-8 string or, for anything else,
standard padded base64 under a ``*_base64`` key; names as percent-encoded path segments."""

from __future__ import annotations

import base64
import binascii
from typing import Any, Dict, Mapping, Union
from urllib.parse import quote

from .errors import ProtocolError

#: What a caller may hand in as bytes: text is sent as its UTF-8.
Bytes = Union[bytes, bytearray, memoryview, str]


def as_bytes(value: Bytes) -> bytes:
    """`value` as bytes (text as UTF-8)."""
    return value.encode() if isinstance(value, str) else bytes(value)


def put_bytes(obj: Dict[str, Any], key: str, value: Bytes) -> None:
    """Sets ``obj[key]`` to the text when it is UTF-8, else ``obj[key_base64]``."""
    if isinstance(value, str):
        obj[key] = value
        return
    raw = bytes(value)
    try:
        obj[key] = raw.decode("utf-8")
    except UnicodeDecodeError:
        obj[f"{key}_base64"] = base64.b64encode(raw).decode("ascii")


def get_bytes(obj: Mapping[str, Any], key: str) -> bytes:
    """Reads ``obj[key]`` or ``obj[key_base64]``; absent (or null) is empty."""
    text = obj.get(key)
    if isinstance(text, str):
        return text.encode()
    encoded = obj.get(f"{key}_base64")
    if not isinstance(encoded, str):
        return b""
    try:
        return base64.b64decode(encoded, validate=True)
    except binascii.Error as e:
        raise ProtocolError(f"{key}_base64 is not base64: {e}") from e


def segment(name: Union[str, int]) -> str:
    """`name` percent-encoded for one path segment (queue names may hold ``/``, ``%``, ``?``)."""
    return quote(str(name), safe="")


def field(obj: Any, key: str, kind: type) -> Any:
    """``obj[key]``, which the server always sends with that type."""
    value = obj.get(key) if isinstance(obj, dict) else None
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise ProtocolError(f"`{key}` missing or not {kind.__name__} in {obj!r}")
    return value
