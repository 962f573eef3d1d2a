"""KIP-936 on the Produce handler and the connection core, on a virtual clock.

producer_ids_rate = 2 per ten-second window for every user: a bucket of 2, so three unseen
producer ids are admitted (check, then record) and the fourth finds -1 token, 5 s short.
"""

from __future__ import annotations

import struct

from localkafka.inprocess.harness import (
    RecordingTransport,
    VirtualClock,
    connect,
    handler_channel,
    handler_request,
    proxy_context,
)
from localkafka.inprocess.wire import decode_response, produce_request, record_batch
from protocol.apis import DECODED, PRODUCE
from protocol.headers import parse_request_header, response_correlation_id
from proxy.enforcement import Enforcement
from proxy.handlers.base import Answer, Channel, Drop, Forward, Outcome
from proxy.handlers.registry import HANDLERS
from proxy.runtime.context import ProxyContext
from quotas.engine import QuotaEngine
from quotas.entities import DEFAULT, QuotaEntity, QuotaType
from quotas.managers import ClientSensors
from quotas.settings import ProducerIdCacheSettings, QuotaConfig, QuotaLimits, QuotaSettings
from quotas.stats import MetricConfig

REQUEST, RESPONSE = DECODED[PRODUCE]
SETTINGS = QuotaSettings(
    producer_ids=MetricConfig(samples=11, window_ms=10_000),
    producer_id_cache=ProducerIdCacheSettings(layer_count=4, false_positive_rate=0.001),
)
EVERY_USER = {QuotaType.PRODUCER_IDS: {QuotaEntity(DEFAULT): 2.0}}
ONLY_BOB = {QuotaType.PRODUCER_IDS: {QuotaEntity("bob"): 2.0}}
SHADOW = frozenset({QuotaType.PRODUCER_IDS})


def produce(producer_id: int, correlation_id: int = 1, acks: int = -1) -> bytes:
    batch = record_batch(producer_id)
    return produce_request(9, {0: batch, 1: batch}, correlation_id=correlation_id, acks=acks)


def channel(
    limits: QuotaLimits = EVERY_USER, shadow: frozenset[QuotaType] = frozenset()
) -> Channel:
    enforcement = Enforcement(QuotaEngine(QuotaConfig(SETTINGS, limits)), shadow)
    return handler_channel(proxy_context(enforcement))


def enforcement(s: Channel) -> Enforcement:
    assert isinstance(s.runtime, ProxyContext)
    return s.runtime.quotas


def user_sensors(s: Channel) -> ClientSensors:
    return next(enforcement(s).engine.producer_ids.sensors())


def decide(s: Channel, frame: bytes, now_ms: int = 0) -> tuple[Outcome, int]:
    """The Produce handler's outcome, and the mute the connection applies at once."""
    request = handler_request(s, frame, now_ms)
    outcome = HANDLERS[PRODUCE].on_request(s, request)
    return outcome, enforcement(s).settlement.settle_now(request, now_ms)


def request(s: Channel, frame: bytes, now_ms: int = 0) -> Outcome:
    return decide(s, frame, now_ms)[0]


def test_three_new_ids_pass_the_fourth_is_refused_and_known_ids_stay_free() -> None:
    s = channel()
    for producer_id in (1, 2, 3, 1, 2):
        assert isinstance(request(s, produce(producer_id)), Forward)
    refused, mute = decide(s, produce(4))
    assert isinstance(refused, Answer) and mute == 5000
    answer = decode_response(RESPONSE, refused.response, PRODUCE, 9)
    assert answer.throttle_time_ms == 5000
    assert [(p.index, p.error_code) for p in answer.responses[0].partition_responses] == [
        (0, 89),
        (1, 89),
    ]
    assert isinstance(request(s, produce(3)), Forward)  # still free


def test_a_producer_that_is_not_idempotent_is_never_counted() -> None:
    s = channel()
    for _ in range(10):
        assert isinstance(request(s, produce(-1)), Forward)
    ids = enforcement(s).engine.producer_ids
    assert ids.tokens(user_sensors(s), 0) == 2 and ids.tracked_users == 0


def test_a_refused_request_with_acks_0_is_dropped_and_counted() -> None:
    s = channel()
    for producer_id in (1, 2, 3):
        request(s, produce(producer_id, acks=0))
    assert decide(s, produce(4, acks=0)) == (Drop(), 5000)
    assert user_sensors(s).dropped_requests == 1


def test_shadow_mode_lets_the_id_through_and_counts_the_throttle() -> None:
    s = channel(shadow=SHADOW)
    for producer_id in (1, 2, 3, 4):
        assert isinstance(request(s, produce(producer_id)), Forward)
    sensors = user_sensors(s)
    assert sensors.shadow_throttles == 1
    assert enforcement(s).engine.producer_ids.tokens(sensors, 0) == -2  # charged: it went through


def test_a_user_without_the_quota_is_untouched() -> None:
    s = channel(ONLY_BOB)
    frames = [produce(producer_id) for producer_id in range(1, 10)]
    outcomes = [request(s, frame) for frame in frames]
    assert [o.frame for o in outcomes if isinstance(o, Forward)] == frames


def test_the_refusal_goes_out_in_order_and_mutes_the_connection() -> None:
    clock = VirtualClock()
    quotas = Enforcement(QuotaEngine(QuotaConfig(SETTINGS, EVERY_USER)))
    conn, client, upstream = connect(quotas, clock, RecordingTransport(), RecordingTransport())
    conn.requests_received(b"".join(produce(p, correlation_id=p) for p in (1, 2, 3)))
    conn.requests_received(produce(4, correlation_id=4) + produce(1, correlation_id=5))
    forwarded = [parse_request_header(frame).correlation_id for frame in upstream.written]
    assert forwarded == [1, 2, 3]  # 4 answered here; 5 waits out the throttle
    assert client.written == []  # the refusal waits for the responses before it
    conn.responses_received(b"".join(struct.pack(">iib", 5, cid, 0) for cid in (1, 2, 3)))
    assert [response_correlation_id(frame) for frame in client.written] == [1, 2, 3, 4]
    clock.advance(5000 * 1_000_000 - 1)
    assert len(upstream.written) == 3
    clock.advance(1)
    assert [parse_request_header(f).correlation_id for f in upstream.written] == [1, 2, 3, 5]


def test_a_producer_on_one_connection_stays_known_across_layer_rotations() -> None:
    """A connection remembers that its producer's id is in the user's current layer and skips
    the filter while that layer is current; across six windows of sending every 2 s the id
    must still be carried into each new layer, so another connection finds it known."""
    s = channel()
    for now in range(0, 60_000, 2_000):
        assert isinstance(request(s, produce(1), now), Forward)
    ids = enforcement(s).engine.producer_ids
    assert isinstance(s.runtime, ProxyContext)
    other = handler_channel(s.runtime)
    assert isinstance(request(other, produce(1), 60_000), Forward)
    assert ids.tokens(user_sensors(s), 60_000) == 2  # known: nothing charged
