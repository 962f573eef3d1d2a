"""Fetch: max_bytes capped in place, and the empty throttled answer clients can read."""

from __future__ import annotations

import pytest
from kafka.protocol.consumer import FetchRequest, FetchResponse

from localkafka.inprocess.wire import decode_request, decode_response, request_frame
from protocol.apis import FETCH
from protocol.fetch import empty_fetch_response, prepare_fetch
from protocol.frames import FrameSplitter
from protocol.headers import (
    RequestHeader,
    parse_request_header,
    request_body_offset,
    response_correlation_id,
)


def fetch_request(version: int, max_bytes: int, min_bytes: int = 1) -> bytes:
    body = FetchRequest(
        version=version,
        replica_id=-1,
        max_wait_ms=500,
        min_bytes=min_bytes,
        max_bytes=max_bytes,
        isolation_level=1,
        session_id=77,
        session_epoch=3,
        topics=[],
        forgotten_topics_data=[],
        rack_id="",
    )
    return request_frame(FETCH, version, body, correlation_id=9, client_id=b"consumer")


def fetch_at(frame: bytes) -> tuple[bytes, RequestHeader, int]:
    """A Fetch request, its header and where its body starts, as a handler has them."""
    header = parse_request_header(frame)
    return frame, header, request_body_offset(frame, header)


@pytest.mark.parametrize("version", [4, 11, 12, 15, 17])
def test_max_bytes_is_capped_and_nothing_else_changes(version: int) -> None:
    frame = fetch_request(version, max_bytes=52_428_800, min_bytes=5_000_000)
    capped, _ = prepare_fetch(*fetch_at(frame), 1_000_000)
    before, after = decode_request(FetchRequest, frame), decode_request(FetchRequest, capped)
    assert (after.max_bytes, after.min_bytes) == (1_000_000, 1_000_000)
    assert after.max_wait_ms == 500
    if version >= 7:
        assert (after.session_id, after.session_epoch) == (77, 3)
    after.max_bytes, after.min_bytes = before.max_bytes, before.min_bytes
    assert after == before
    small = fetch_request(version, max_bytes=500_000)
    assert prepare_fetch(*fetch_at(small), 1_000_000)[0] is small


@pytest.mark.parametrize("version", [4, 7, 12, 16])
def test_empty_response_carries_the_throttle_and_no_session(version: int) -> None:
    frame = empty_fetch_response(41, version, 1234)
    assert FrameSplitter().feed(frame) == [frame]
    assert response_correlation_id(frame) == 41
    response = decode_response(FetchResponse, frame, FETCH, version)
    assert response.throttle_time_ms == 1234
    assert list(response.responses) == []
    if version >= 7:
        assert (response.error_code, response.session_id) == (0, 0)


@pytest.mark.parametrize("version", [4, 12, 15])
def test_only_a_long_poll_may_wait(version: int) -> None:
    poll = fetch_request(version, max_bytes=1000, min_bytes=1)
    assert prepare_fetch(*fetch_at(poll), None) == (poll, True)
    at_once = fetch_request(version, max_bytes=1000, min_bytes=0)
    assert prepare_fetch(*fetch_at(at_once), None) == (at_once, False)
