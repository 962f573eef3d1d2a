"""Round trips into request time, alone: a pipelined request starts when the one before it
was answered, responses read at once share the first one's round trip, and the time spent
connecting upstream is nobody's request time."""

from __future__ import annotations

from localkafka.inprocess.wire import request_frame
from protocol.apis import METADATA
from protocol.headers import parse_request_header
from proxy.handlers.base import Request
from proxy.handlers.registry import ROUTES
from proxy.runtime.in_flight import InFlight
from proxy.runtime.round_trips import RoundTrips
from quotas.principal import Principal
from quotas.thread_time import ThreadTimes

MS = 1_000_000


def request(received_ns: int) -> Request:
    frame = request_frame(METADATA, 12, b"\x01\x00\x00\x00")
    header = parse_request_header(frame)
    return Request(frame, header, ROUTES[METADATA], Principal("u", "app", 0), received_ns)


def charged(round_trips: RoundTrips, entry: Request, now_ns: int) -> int:
    return round_trips.charge(entry, 100, now_ns)


def test_a_pipelined_request_starts_when_the_one_before_it_is_answered() -> None:
    trips = RoundTrips(ThreadTimes())
    queue = InFlight()
    first, second = request(0), request(0)
    queue.add(first)
    queue.add(second)
    trips.read(10 * MS, 1, queue)
    alone = charged(trips, first, 10 * MS)
    trips.read(10 * MS + 50_000, 1, queue)
    behind = charged(trips, second, 10 * MS + 50_000)
    # the first waited 10 ms (bounded by its kind); the second only 0.05 ms, not 10.05
    assert behind <= 50_000 < alone


def test_responses_read_at_once_share_the_first_ones_round_trip() -> None:
    shared, apart = RoundTrips(ThreadTimes()), RoundTrips(ThreadTimes())
    queue = InFlight()
    entries = [request(0) for _ in range(4)]
    for entry in entries:
        queue.add(entry)
    shared.read(400_000, 4, queue)
    charges = [charged(shared, entry, 400_000) for entry in entries]
    assert charges == [100_000] * 4  # 0.4 ms over four, not 0.4 ms and then nothing
    apart.read(400_000, 1, queue)
    assert [charged(apart, entry, 400_000) for entry in entries][1:] == [0, 0, 0]


def test_the_time_spent_connecting_upstream_is_not_request_time() -> None:
    trips = RoundTrips(ThreadTimes())
    early = request(0)  # read before the upstream connection was up
    trips.connected("broker-1:9092", 30 * MS)
    trips.read(30 * MS + 100_000, 1, InFlight())
    assert charged(trips, early, 30 * MS + 100_000) == 100_000


def test_an_own_request_answered_moves_the_start_of_the_next() -> None:
    trips = RoundTrips(ThreadTimes())
    trips.own_answered(20 * MS)
    trips.read(20 * MS + 70_000, 1, InFlight())
    assert charged(trips, request(0), 20 * MS + 70_000) == 70_000
