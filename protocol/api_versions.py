"""Capping ApiVersions so a client never negotiates a version the proxy cannot decode.

For each API the proxy decodes, the advertised max_version becomes min(broker, proxy); every
other API is advertised as the broker sends it, since the proxy forwards those as bytes.
"""

from __future__ import annotations

from collections.abc import Mapping
from struct import Struct

from protocol.apis import API_VERSIONS, response_class
from protocol.codec import decode_response
from protocol.errors import ProtocolError
from protocol.headers import encode_response, response_body_offset
from protocol.rewrite import reframe

_INT16 = Struct(">h")
_UNSUPPORTED_VERSION = 35


def cap_api_versions(frame: bytes, api_version: int, caps: Mapping[int, int]) -> bytes | None:
    """The capped response frame, or None when nothing needs capping.

    An error response (UNSUPPORTED_VERSION is written in the v0 layout whatever the request's
    version) is forwarded untouched: its version range is the one the client retries with.
    """
    offset = response_body_offset(frame, API_VERSIONS, api_version)
    if len(frame) < offset + 2:
        raise ProtocolError("ApiVersions response truncated")
    if _INT16.unpack_from(frame, offset)[0] != 0:
        return None
    msg = decode_response(frame, offset, API_VERSIONS, api_version)
    changed = False
    for entry in msg.api_keys:
        cap = caps.get(entry.api_key)
        if cap is not None and entry.max_version > cap:
            entry.max_version = cap
            changed = True
    if not changed:
        return None
    return reframe(frame, offset, bytes(msg.encode()))


def unsupported_version_response(correlation_id: int, max_version: int) -> bytes:
    """What a broker answers to an ApiVersions request newer than it knows (KIP-511).

    The proxy answers this itself when a client's ApiVersions version is above what the proxy
    decodes; the client then retries with the highest version both sides support.
    """
    cls = response_class(API_VERSIONS)
    body: bytes = cls(
        version=0,
        error_code=_UNSUPPORTED_VERSION,
        api_keys=[
            cls.ApiVersion(
                version=0,
                api_key=API_VERSIONS,
                min_version=0,
                max_version=max_version,
            )
        ],
    ).encode(version=0)
    return encode_response(correlation_id, API_VERSIONS, 0, body)
