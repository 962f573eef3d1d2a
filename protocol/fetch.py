"""What the proxy reads from and writes into Fetch requests, and the empty Fetch it answers.

The fixed fields sit at fixed offsets after the request header: replica_id (until v14),
max_wait_ms, min_bytes, max_bytes (v3+). Flexible versions change only the encoding of
later strings and arrays.
"""

from __future__ import annotations

from struct import Struct

from protocol.apis import FETCH, response_class
from protocol.errors import ProtocolError
from protocol.headers import RequestHeader, encode_response, request_body_offset

_MIN_MAX_BYTES = Struct(">ii")
_MAX_WAIT_MIN_BYTES = Struct(">ii")
#: FetchMetadata: a session id of 0 is "no session"
INVALID_SESSION_ID = 0


def _max_wait_offset(frame: bytes, header: RequestHeader) -> int:
    pos = request_body_offset(frame, header)
    return pos + 4 if header.api_version <= 14 else pos  # replica_id


def _min_bytes_offset(frame: bytes, header: RequestHeader) -> int:
    return _max_wait_offset(frame, header) + 4


def long_poll_ms(frame: bytes, header: RequestHeader) -> int:
    """How long the broker may hold this Fetch waiting for data (0 unless min_bytes > 0).

    Kafka charges a request's thread time, and a Fetch parked in purgatory uses none; the
    proxy cannot tell waiting from working, so this much of a Fetch's time is not charged.
    """
    pos = _max_wait_offset(frame, header)
    if pos + _MAX_WAIT_MIN_BYTES.size > len(frame):
        raise ProtocolError("Fetch request truncated before min_bytes")
    max_wait_ms, min_bytes = _MAX_WAIT_MIN_BYTES.unpack_from(frame, pos)
    return max(int(max_wait_ms), 0) if min_bytes > 0 else 0


def cap_fetch_max_bytes(frame: bytes, header: RequestHeader, cap: int) -> bytes:
    """The request with max_bytes (and min_bytes) at most `cap`, as Kafka caps a client's
    fetch to the bytes its consumer quota allows in one quota window."""
    if header.api_version < 3:
        return frame
    pos = _min_bytes_offset(frame, header)
    if pos + _MIN_MAX_BYTES.size > len(frame):
        raise ProtocolError("Fetch request truncated before max_bytes")
    min_bytes, max_bytes = _MIN_MAX_BYTES.unpack_from(frame, pos)
    if max_bytes <= cap:
        return frame
    patched = bytearray(frame)
    _MIN_MAX_BYTES.pack_into(patched, pos, min(min_bytes, cap), cap)
    return bytes(patched)


def empty_fetch_response(correlation_id: int, version: int, throttle_ms: int) -> bytes:
    """Kafka's throttled Fetch answer (FetchContext.getThrottledResponse): no partitions.

    Kafka keeps an incremental fetch's session id there, because its broker advanced the
    session's epoch for the throttled request. The proxy answers without the broker seeing
    the request, so its answer carries session id 0 instead: the client closes the session
    on its side and opens a new one with its next fetch, rather than failing on the epoch.
    """
    cls = response_class(FETCH)
    try:
        body = cls(
            version=version,
            throttle_time_ms=throttle_ms,
            error_code=0,
            session_id=INVALID_SESSION_ID,
            responses=[],
        ).encode(version=version)
    except ValueError as exc:  # a version the codec does not know
        raise ProtocolError(f"cannot answer Fetch v{version}: {exc}") from exc
    return encode_response(correlation_id, FETCH, version, bytes(body))
