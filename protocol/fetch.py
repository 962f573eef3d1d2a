"""What the proxy reads from and writes into Fetch requests, and the empty Fetch it answers.

The fixed fields sit at fixed offsets after the request header: replica_id (until v14),
max_wait_ms, min_bytes, max_bytes (v3+). Flexible versions change only the encoding of
later strings and arrays.
"""

from __future__ import annotations

from struct import Struct

from protocol.apis import FETCH, response_class
from protocol.errors import ProtocolError
from protocol.headers import RequestHeader, encode_response

_WAIT_MIN_MAX = Struct(">iii")  # max_wait_ms, min_bytes, max_bytes (v3+)
_INT32_PAIR = Struct(">ii")  # max_wait_ms, min_bytes before v3; min_bytes, max_bytes to patch
#: FetchMetadata: a session id of 0 is "no session"
INVALID_SESSION_ID = 0


def prepare_fetch(
    frame: bytes, header: RequestHeader, body_offset: int, max_bytes_cap: int | None
) -> tuple[bytes, bool]:
    """(the request to send upstream, whether the broker may hold it waiting for data).

    With a cap, max_bytes (and min_bytes) become at most the cap, as Kafka caps a client's
    fetch to the bytes its consumer quota allows in one quota window.

    A long poll (max_wait_ms > 0 and min_bytes > 0) may wait in the broker's purgatory for
    data, and Kafka charges a request's thread time, of which a parked Fetch uses none.
    """
    pos = body_offset
    if header.api_version <= 14:
        pos += 4  # replica_id
    layout = _WAIT_MIN_MAX if header.api_version >= 3 else _INT32_PAIR
    if pos + layout.size > len(frame):
        raise ProtocolError("Fetch request truncated in its fixed fields")
    max_wait_ms, min_bytes, *max_bytes = layout.unpack_from(frame, pos)
    long_poll = max_wait_ms > 0 and min_bytes > 0
    if max_bytes_cap is not None and max_bytes and max_bytes[0] > max_bytes_cap:
        patched = bytearray(frame)
        _INT32_PAIR.pack_into(patched, pos + 4, min(min_bytes, max_bytes_cap), max_bytes_cap)
        frame = bytes(patched)
    return frame, long_poll


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
