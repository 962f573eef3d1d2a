"""The in-flight queue alone: order, the proxy's own requests numbered apart, local answers
released in order, and a response checked against the request it answers."""

from __future__ import annotations

import pytest

from localkafka.inprocess.wire import request_frame, response_frame
from protocol.apis import METADATA
from protocol.errors import ProtocolError
from protocol.headers import parse_request_header
from proxy.handlers.base import Request
from proxy.handlers.registry import ROUTES
from proxy.runtime.in_flight import MAX_IN_FLIGHT, InFlight, OwnRequest
from quotas.principal import Principal


def request(correlation_id: int, received_ns: int = 0) -> Request:
    frame = request_frame(METADATA, 12, b"\x01\x00\x00\x00", correlation_id)
    header = parse_request_header(frame)
    return Request(frame, header, ROUTES[METADATA], Principal("u", "app", 0), received_ns)


def answer(correlation_id: int) -> bytes:
    return response_frame(METADATA, 12, b"", correlation_id)


def test_responses_are_taken_in_order_and_checked_against_their_requests() -> None:
    queue = InFlight()
    first, second = request(7), request(8)
    assert not queue.add(first) and not queue.add(second)
    assert queue.answered(answer(7)) is first
    with pytest.raises(ProtocolError, match="correlation id 9, expected 8"):
        queue.answered(answer(9))
    with pytest.raises(ProtocolError, match="without an outstanding request"):
        queue.answered(answer(8))


def test_the_queue_is_full_at_the_limit() -> None:
    queue = InFlight()
    added = [queue.add(request(i)) for i in range(MAX_IN_FLIGHT)]
    assert added == [False] * (MAX_IN_FLIGHT - 1) + [True] and queue.full
    queue.answered(answer(0))
    assert not queue.full and len(queue) == MAX_IN_FLIGHT - 1


def test_the_proxys_own_requests_are_numbered_apart_and_answer_their_asker() -> None:
    queue = InFlight()
    asked: list[bytes] = []
    ids = [queue.own(asked.append) for _ in range(2)]
    assert ids == [0x7F000001, 0x7F000002]
    entry = queue.answered(answer(ids[0]))
    assert isinstance(entry, OwnRequest) and entry.on_answer == asked.append
    with pytest.raises(ProtocolError, match="expected 2130706434"):
        queue.answered(answer(1))


def test_local_answers_go_once_every_earlier_response_has() -> None:
    queue = InFlight()
    waiting, local, later = request(1), request(2), request(3)
    local.local_response = b"answered here"
    later.local_response = b"and this"
    for entry in (waiting, local, later):
        queue.add(entry)
    out: list[bytes] = []
    queue.take_local_responses(out)
    assert out == []  # behind the broker's response to 1
    queue.answered(answer(1))
    queue.take_local_responses(out)
    assert out == [b"answered here", b"and this"] and len(queue) == 0


def test_reading_stays_stopped_while_a_request_that_stops_it_waits() -> None:
    queue = InFlight()
    plain, stopping = request(1), request(2)
    stopping.stops_reading = True
    queue.add(plain)
    queue.add(stopping)
    assert queue.stops_reading()
    queue.answered(answer(1))
    assert queue.stops_reading()
    queue.answered(answer(2))
    assert not queue.stops_reading()


def test_the_oldest_request_says_when_it_was_read() -> None:
    queue = InFlight()
    assert queue.oldest_received_ns() is None
    queue.own(lambda _: None)
    assert queue.oldest_received_ns() == 0  # the proxy's own: read at no client's time
    queue.answered(answer(0x7F000001))
    queue.add(request(1, received_ns=5_000))
    assert queue.oldest_received_ns() == 5_000
