"""kafka-python's codec behind one door: a body it cannot decode is a ProtocolError.

The codec raises assorted exceptions (struct.error, ValueError, IndexError, its own) on
malformed or truncated bodies; the proxy treats them all alike, by closing the one connection
that sent the bytes, so they are turned into ProtocolError here and nowhere else.
"""

from __future__ import annotations

from typing import Any

from protocol.apis import DECODED
from protocol.errors import ProtocolError


def decode_request(frame: bytes, offset: int, api_key: int, api_version: int) -> Any:
    """A request body decoded by kafka-python's codec for its API and version."""
    return _decode(api_key, 0, frame, offset, api_version)


def decode_response(frame: bytes, offset: int, api_key: int, api_version: int) -> Any:
    """A response body decoded by kafka-python's codec for its API and version."""
    return _decode(api_key, 1, frame, offset, api_version)


def _decode(api_key: int, side: int, frame: bytes, offset: int, version: int) -> Any:
    try:
        return DECODED[api_key][side].decode(memoryview(frame)[offset:], version=version)
    except Exception as exc:  # the codec's assorted errors on malformed bodies
        kind = ("request", "response")[side]
        raise ProtocolError(f"undecodable api_key={api_key} v{version} {kind}: {exc}") from exc
