"""Enforcement decisions: Kafka's order, the empty-fetch check, shadow mode, and topic quotas."""

from __future__ import annotations

import math

from localkafka.inprocess.wire import request_frame
from protocol.apis import FETCH, METADATA, PRODUCE
from protocol.headers import parse_request_header
from proxy.enforcement import Enforcement
from proxy.handlers.base import Request
from proxy.handlers.registry import ROUTES
from quotas.engine import QuotaEngine
from quotas.entities import DEFAULT, QuotaEntity, QuotaType
from quotas.settings import QuotaConfig, QuotaSettings
from quotas.stats import MetricConfig
from quotas.verdicts import Verdict

WINDOWS = QuotaSettings(client=MetricConfig(samples=2, window_ms=1000))
LIMITS = {
    QuotaType.PRODUCE: {QuotaEntity(client_id=DEFAULT): 1000.0},
    QuotaType.FETCH: {QuotaEntity(client_id=DEFAULT): 1000.0},
    QuotaType.REQUEST: {QuotaEntity(client_id=DEFAULT): 10.0},
}


def engine() -> QuotaEngine:
    return QuotaEngine(QuotaConfig(WINDOWS, LIMITS))


#: (ms, api_key, request bytes, response bytes, elapsed ns): a client over both quotas
TRAFFIC = [
    (t, PRODUCE if t % 3 else METADATA, 400, 50, 3_000_000 + 1000 * t) for t in range(0, 4000, 37)
]


def app(enforcement: Enforcement, api_key: int, now: int) -> Request:
    """A request of the client every test here charges, resolved afresh as a new connection
    would, read at `now`."""
    frame = request_frame(api_key, 0)
    principal = enforcement.sensors.principal(None, "ANONYMOUS", "app")
    return Request(frame, parse_request_header(frame), ROUTES[api_key], principal, now * 10**6)


def answer(
    enforcement: Enforcement, api: int, request: int, response: int, elapsed_ns: int, now: int
) -> int:
    """A request read and answered at `now`: Produce bytes are charged on reading."""
    read = app(enforcement, api, now)
    if api == PRODUCE:
        enforcement.produce.charge(read, request)
    elif api == FETCH:
        enforcement.fetch.charge(read, response)
    return enforcement.settlement.settle(read, elapsed_ns, now)


def replay(enforcement: Enforcement) -> list[int]:
    return [answer(enforcement, *request[1:], request[0]) for request in TRAFFIC]


def throttle_averages(enforcement: Enforcement, now: int) -> list[float]:
    engine = enforcement.engine
    return [
        next(engine_manager.sensors()).throttle_time.measure(engine_manager.config, now)
        for engine_manager in (engine.produce, engine.request)
    ]


def test_shadow_mode_decides_the_same_throttles_and_applies_none() -> None:
    enforcing = Enforcement(engine())
    shadow = Enforcement(engine(), frozenset(QuotaType))
    enforced = replay(enforcing)
    assert replay(shadow) == [0] * len(TRAFFIC)
    throttled = [ms for ms in enforced if ms]
    assert len(throttled) > 10
    sensors = [next(m.sensors()) for m in (shadow.engine.produce, shadow.engine.request)]
    assert sum(s.shadow_throttles for s in sensors) == len(throttled)
    assert sum(s.throttles for s in sensors) == 0  # nothing applied
    applied = [next(m.sensors()) for m in (enforcing.engine.produce, enforcing.engine.request)]
    assert sum(s.throttles for s in applied) == len(throttled)
    assert sum(s.shadow_throttles for s in applied) == 0
    # Kafka's throttle-time metrics show the decisions either way
    end = TRAFFIC[-1][0]
    for enforced_avg, shadow_avg in zip(
        throttle_averages(enforcing, end), throttle_averages(shadow, end), strict=True
    ):
        assert not math.isnan(enforced_avg)
        assert enforced_avg == shadow_avg


def test_shadowing_one_quota_type_still_enforces_the_others() -> None:
    only_request = Enforcement(engine(), frozenset({QuotaType.PRODUCE}))
    produce_only = [answer(only_request, PRODUCE, 5000, 50, 0, now) for now in range(0, 2000, 100)]
    assert produce_only == [0] * len(produce_only)
    assert next(only_request.engine.produce.sensors()).shadow_throttles == len(produce_only)
    slow = answer(only_request, METADATA, 10, 10, 900_000_000, 2000)
    assert slow > 0


def owed_and_cap(enforcement: Enforcement, now: int) -> tuple[int, int | None]:
    fetch = app(enforcement, FETCH, now)
    throttle = enforcement.fetch.owed(fetch)
    return throttle, None if throttle else enforcement.fetch.cap(fetch)


def test_fetch_over_quota_is_refused_before_going_upstream() -> None:
    enforcement = Enforcement(engine())
    # under quota: the fetch may return what the quota allows in one window
    assert owed_and_cap(enforcement, 0) == (0, 1000)
    first = answer(enforcement, FETCH, 100, 4000, 0, 10)
    assert first > 0  # the response that crossed the quota carries the throttle
    throttle, max_bytes = owed_and_cap(enforcement, 20)
    assert throttle > 0 and max_bytes is None
    # nothing was recorded by the check: the owed throttle shrinks as time passes
    later, _ = owed_and_cap(enforcement, 1500)
    assert 0 < later < throttle
    assert owed_and_cap(enforcement, 4100) == (0, 1000)
    shadow = Enforcement(engine(), frozenset({QuotaType.FETCH}))
    answer(shadow, FETCH, 100, 4000, 0, 10)
    shadowed = app(shadow, FETCH, 20)
    assert (shadow.fetch.owed(shadowed), shadow.fetch.cap(shadowed)) == (0, None)
    # shadowed, each fetch is decided once: when its response is recorded
    answer(shadow, FETCH, 100, 10, 0, 30)
    assert next(shadow.engine.fetch.sensors()).shadow_throttles == 2


def test_a_tie_is_recorded_as_request_time_as_kafka_does() -> None:
    enforcement = Enforcement(engine())
    decisions = (enforcement.engine.produce, enforcement.engine.request)
    sensors = [manager.sensors_for("u", "c", 0) for manager in decisions]
    applied = enforcement.settlement._settle(
        0, Verdict(decisions[1], sensors[1], 500), Verdict(decisions[0], sensors[0], 500)
    )
    assert applied == 500
    assert sensors[1].throttle_time.measure(WINDOWS.client, 0) == 500
    assert math.isnan(sensors[0].throttle_time.measure(WINDOWS.client, 0))


def test_a_throttled_produce_holds_the_connection_unless_shadowed() -> None:
    enforcement = Enforcement(engine())
    first = app(enforcement, PRODUCE, 0)
    # under its quota: no verdict to hold the connection or to settle
    assert not enforcement.produce.charge(first, 500) and first.verdict is None
    over = app(enforcement, PRODUCE, 1)
    assert enforcement.produce.charge(over, 5000)
    verdict = over.verdict
    assert verdict is not None and verdict.throttle_ms > 0
    # the verdict taken on reading is the one the response carries, answered at once
    assert enforcement.settlement.settle(over, 0, 1) == verdict.throttle_ms
    shadow = Enforcement(engine(), frozenset({QuotaType.PRODUCE}))
    shadowed = app(shadow, PRODUCE, 0)
    assert not shadow.produce.charge(shadowed, 9000)
    verdict = shadowed.verdict
    assert verdict is not None and verdict.throttle_ms > 0
    assert shadow.settlement.settle_now(shadowed, 0) == 0


def test_the_throttle_applied_under_a_shadowed_larger_one_is_recorded() -> None:
    enforcement = Enforcement(engine(), frozenset({QuotaType.PRODUCE}))
    produce = app(enforcement, PRODUCE, 0)
    enforcement.produce.charge(produce, 50_000)
    applied = enforcement.settlement.settle(produce, 300_000_000, 0)
    assert produce.verdict is not None and 0 < applied < produce.verdict.throttle_ms
    request_sensors = next(enforcement.engine.request.sensors())
    assert request_sensors.throttle_time.measure(WINDOWS.client, 0) == applied
    assert request_sensors.throttles == 1
    produce_sensors = next(enforcement.engine.produce.sensors())
    assert (produce_sensors.shadow_throttles, produce_sensors.throttles) == (1, 0)


def topic_engine(limit: float) -> QuotaEngine:
    return QuotaEngine(QuotaConfig(WINDOWS, {QuotaType.PRODUCE: {QuotaEntity(topic="t"): limit}}))


def test_a_topic_quota_in_shadow_mode_decides_and_applies_nothing() -> None:
    for shadowed in (frozenset(), frozenset({QuotaType.PRODUCE})):
        enforcement = Enforcement(topic_engine(1000.0), shadowed)
        held = []
        for now in range(0, 2000, 100):
            request = app(enforcement, PRODUCE, now)
            held.append(enforcement.produce.charge_topics(request, {"t": 500, "u": 500}))
            enforcement.settlement.settle(request, 0, now)
        (sensors,) = enforcement.engine.topic_produce.sensors()
        if shadowed:
            assert not any(held) and sensors.throttles == 0 and sensors.shadow_throttles > 10
        else:
            assert sum(held) > 10 and sensors.throttles == sum(held)


def test_a_topic_quota_changed_live_judges_the_next_request_on_it() -> None:
    enforcement = Enforcement(topic_engine(1000.0))
    request = app(enforcement, PRODUCE, 0)
    assert enforcement.produce.charge_topics(request, {"t": 3000})
    limits = {QuotaType.PRODUCE: {QuotaEntity(topic="t"): 1e9}}
    enforcement.apply_limits(limits)
    assert not enforcement.produce.charge_topics(app(enforcement, PRODUCE, 1), {"t": 3000})
    enforcement.apply_limits({})
    assert not enforcement.produce.topic_quotas  # no topic is sized any more
