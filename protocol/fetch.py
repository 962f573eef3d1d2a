"""What the proxy reads from and writes into Fetch requests, and the empty Fetch it answers.

The fixed fields sit at fixed offsets after the request header: replica_id (until v14),
max_wait_ms, min_bytes, max_bytes (v3+). Flexible versions change only the encoding of
later strings and arrays.
"""

from __future__ import annotations

import uuid
from struct import Struct
from struct import error as struct_error

from protocol.apis import FETCH, response_class
from protocol.errors import ProtocolError
from protocol.headers import RequestHeader, encode_response, response_body_offset
from protocol.primitives import read_length, read_string, skip_tagged_fields

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


_INT32 = Struct(">i")
_UUID = 16


def fetched_bytes(frame: bytes, version: int) -> dict[str | uuid.UUID, int]:
    """The record bytes a Fetch response returns from each topic (name, or id from v13):
    what a topic's consumer_byte_rate charges, read by the lengths, never a record. `frame`
    is the response as the client receives it, its size first."""
    flexible = version >= 12
    pos = response_body_offset(frame, FETCH, version)
    sizes: dict[str | uuid.UUID, int] = {}
    try:
        pos += 4 if version >= 1 else 0  # throttle_time_ms
        pos += 6 if version >= 7 else 0  # error_code, session_id
        topic_count, pos = read_length(frame, pos, flexible, _INT32)
        for _ in range(topic_count):
            topic: str | uuid.UUID
            if version >= 13:
                topic = uuid.UUID(bytes=bytes(frame[pos : pos + _UUID]))
                pos += _UUID
            else:
                name, pos = read_string(frame, pos, flexible)
                topic = name or ""
            partition_count, pos = read_length(frame, pos, flexible, _INT32)
            read = 0
            for _ in range(partition_count):
                pos += 4 + 2 + 8  # partition_index, error_code, high_watermark
                pos += 8 if version >= 4 else 0  # last_stable_offset
                pos += 8 if version >= 5 else 0  # log_start_offset
                if version >= 4:  # aborted_transactions: (producer_id, first_offset)
                    aborted, pos = read_length(frame, pos, flexible, _INT32)
                    for _ in range(max(aborted, 0)):
                        pos += 16
                        if flexible:
                            pos = skip_tagged_fields(frame, pos)
                pos += 4 if version >= 11 else 0  # preferred_read_replica
                length, pos = read_length(frame, pos, flexible, _INT32)
                if length > 0:
                    read += length
                    pos += length
                if flexible:
                    pos = skip_tagged_fields(frame, pos)
            if flexible:
                pos = skip_tagged_fields(frame, pos)
            sizes[topic] = sizes.get(topic, 0) + read
    except (IndexError, struct_error, UnicodeDecodeError) as exc:
        raise ProtocolError(f"Fetch response v{version} truncated or malformed") from exc
    if pos > len(frame):
        raise ProtocolError(f"Fetch response v{version} runs past its frame")
    return sizes
