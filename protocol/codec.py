"""kafka-python's codec behind one door: a body it cannot decode is a ProtocolError, and so
is a null where the schema allows none.

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
    try:
        return DECODED[api_key][0].decode(memoryview(frame)[offset:], version=api_version)
    except Exception as exc:  # the codec's assorted errors on malformed bodies
        raise _undecodable(api_key, api_version, "request", exc) from exc


def decode_response(frame: bytes, offset: int, api_key: int, api_version: int) -> Any:
    """A response body decoded by kafka-python's codec for its API and version. Called for
    every response whose addresses are rewritten, so it decodes itself rather than through
    a shared helper: one call less per response."""
    try:
        return DECODED[api_key][1].decode(memoryview(frame)[offset:], version=api_version)
    except Exception as exc:  # the codec's assorted errors on malformed bodies
        raise _undecodable(api_key, api_version, "response", exc) from exc


def _undecodable(api_key: int, version: int, kind: str, exc: Exception) -> ProtocolError:
    return ProtocolError(f"undecodable api_key={api_key} v{version} {kind}: {exc}")


def non_null_array(items: Any) -> Any:
    """A non-nullable array field as decoded: the codec reads a null one (length -1) as
    None, which a schema that allows none makes a malformed request."""
    if items is None:
        raise ProtocolError("a null array where the schema allows none")
    return items


def non_null_string(text: Any) -> str:
    """A non-nullable string field as decoded (None is a malformed request, as above)."""
    if not isinstance(text, str):
        raise ProtocolError("a null string where the schema allows none")
    return text
