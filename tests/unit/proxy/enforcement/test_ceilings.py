"""A broker's ceilings as the handlers and the connection charge them: a Fetch's response
bytes, then the next Fetch answered empty with the throttle; every request of a requests
ceiling; nothing charged on a connection to another broker."""

from __future__ import annotations

from kafka.protocol.consumer import FetchResponse
from kafka.protocol.producer import ProduceRequest

from localkafka.inprocess.harness import handler_channel, handler_request, proxy_context, responded
from localkafka.inprocess.wire import decode_response, request_frame, response_frame
from protocol.apis import FETCH, PRODUCE
from proxy.enforcement import Enforcement
from proxy.handlers.base import Answer, Channel, Forward
from proxy.handlers.registry import HANDLERS
from quotas.disk_guard import Reading
from quotas.engine import QuotaEngine
from quotas.entities import QuotaEntity, QuotaType
from quotas.settings import QuotaConfig, QuotaSettings
from tests.unit.proxy.handlers.test_handlers import fetch

HOT = 1
CEILING = {QuotaEntity(broker=str(HOT)): 1000.0}


def channel(
    limits: dict[QuotaType, dict[QuotaEntity, float]], broker: int
) -> tuple[Channel, Enforcement]:
    """A connection to `broker`, and the enforcement it charges."""
    enforcement = Enforcement(QuotaEngine(QuotaConfig(QuotaSettings(), limits)))
    connected = handler_channel(proxy_context(enforcement))
    connected.broker = broker
    return connected, enforcement


def produce_to(topic: str, size: int, client_id: bytes = b"app") -> bytes:
    """A Produce v7 of `size` record bytes into the topic's partition 0."""
    body = ProduceRequest(
        version=7,
        transactional_id=None,
        acks=1,
        timeout_ms=1000,
        topic_data=[(topic, [(0, b"x" * size)])],
    )
    return request_frame(PRODUCE, 7, body, 1, client_id)


def records(size: int) -> bytes:
    response = FetchResponse(
        version=11,
        throttle_time_ms=0,
        error_code=0,
        session_id=0,
        responses=[("t", [(0, 0, 10, 10, 0, None, -1, b"x" * size)])],
    )
    return response_frame(FETCH, 11, response)


def test_a_fetch_past_its_share_of_the_broker_is_answered_empty() -> None:
    """5 kB read from a broker whose ceiling is 1 kB a second: the scope is over, its one
    principal's share is the whole ceiling, and the bucket is 4 s in debt."""
    handler, (hot, _) = HANDLERS[FETCH], channel({QuotaType.FETCH_CEILING: CEILING}, HOT)
    first = handler_request(hot, fetch(10**6))
    outcome = handler.on_request(hot, first)
    assert isinstance(outcome, Forward) and outcome.frame == fetch(10**6)  # never capped
    handler.on_response(hot, records(5000), responded(first, 10))
    assert first.verdict is not None and 3900 < first.verdict.throttle_ms <= 4100
    again = handler_request(hot, fetch(10**6), 20)
    refused = handler.on_request(hot, again)
    assert isinstance(refused, Answer)
    empty = decode_response(FetchResponse, refused.response, FETCH, 11)
    assert empty.throttle_time_ms > 3900 and list(empty.responses) == []
    # the same principal reading another broker is not charged at all
    cold, _ = channel({QuotaType.FETCH_CEILING: CEILING}, HOT + 1)
    request = handler_request(cold, fetch(10**6))
    handler.on_request(cold, request)
    handler.on_response(cold, records(5000), responded(request, 10))
    assert request.verdict is None


def test_every_request_to_the_broker_counts_against_its_requests_ceiling() -> None:
    """Two requests a second: twenty at once press the ceiling, and the one after a solve
    is throttled and stops its connection's reading; a connection to another broker goes on."""
    limits = {QuotaType.REQUEST_CEILING: {QuotaEntity(broker=str(HOT)): 2.0}}
    hot, enforcement = channel(limits, HOT)
    guards = enforcement.guards
    assert guards.request_ceiling
    commits = [request_frame(8, 7, b"", n) for n in range(30)]
    throttled = []
    for n, frame in enumerate(commits):
        request = handler_request(hot, frame, n * 20)
        guards.charge(request, hot.broker)
        if request.verdict is not None:
            throttled.append((n, request.verdict.throttle_ms, request.stops_reading))
    assert throttled and all(0 < ms <= 10_000 and stops for _, ms, stops in throttled)
    assert throttled[0][0] >= 13  # the first solve after the scope is over, at 250 ms
    cold, cold_enforcement = channel(limits, HOT + 1)
    cold_guards = cold_enforcement.guards
    for n, frame in enumerate(commits):
        request = handler_request(cold, frame, n * 20)
        cold_guards.charge(request, cold.broker)
        assert request.verdict is None


def test_a_produce_into_a_guarded_directorys_partition_is_held_and_others_go() -> None:
    """Broker 1's /data under its soft limit holds partition t-0: a Produce writing it is
    charged to that directory's ceiling (the minimum, found low at its first reading under
    the hard limit), one writing another topic is not; an exempt principal never is."""
    limits = {
        QuotaType.DISK_SOFT_LIMIT: {QuotaEntity(broker=str(HOT)): 100e6},
        QuotaType.DISK_HARD_LIMIT: {QuotaEntity(broker=str(HOT)): 50e6},
        QuotaType.CEILING_EXEMPT: {QuotaEntity(client_id="ops"): 1.0},
    }
    s, enforcement = channel(limits, HOT)
    guard = enforcement.engine.disk.guard
    guard.read(HOT, [Reading("/data", 200_000_000, 10_000_000, frozenset({("t", 0)}))], 0)
    enforcement.disk_read()
    assert enforcement.produce.disk_guard
    handler = HANDLERS[PRODUCE]
    held = handler_request(s, produce_to("t", 50_000), 0)
    outcome = handler.on_request(s, held)
    assert isinstance(outcome, Forward) and outcome.stops_reading
    assert held.verdict is not None and held.verdict.throttle_ms > 0
    elsewhere = handler_request(s, produce_to("u", 50_000), 1)
    outcome = handler.on_request(s, elsewhere)
    assert isinstance(outcome, Forward) and not outcome.stops_reading
    assert elsewhere.verdict is None
    exempt = handler_request(s, produce_to("t", 50_000, b"ops"), 2)
    handler.on_request(s, exempt)
    assert exempt.verdict is None
    guard.read(HOT, [Reading("/data", 200_000_000, 150_000_000, frozenset({("t", 0)}))], 1000)
    enforcement.disk_read()
    assert not enforcement.produce.disk_guard  # let go above its soft limit
