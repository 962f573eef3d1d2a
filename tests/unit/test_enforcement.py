"""Enforcement decisions: Kafka's order, the empty-fetch check, and shadow mode."""

from __future__ import annotations

import math

from protocol.apis import FETCH, METADATA, PRODUCE
from proxy.enforcement import Decision, Enforcer, Principal
from quotas.engine import QuotaEngine
from quotas.entities import DEFAULT, QuotaEntity, QuotaType
from quotas.settings import QuotaConfig, QuotaSettings
from quotas.stats import MetricConfig

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


def app(enforcer: Enforcer) -> Principal:
    """The client every test here charges, resolved afresh as a new connection would."""
    return enforcer.principal("ANONYMOUS", "app")


def answer(
    enforcer: Enforcer, api: int, request: int, response: int, elapsed_ns: int, now: int
) -> int:
    """A request read and answered at `now`: Produce bytes are charged on reading."""
    if api == PRODUCE:
        bandwidth = enforcer.on_produce(app(enforcer), request, now)
    elif api == FETCH:
        bandwidth = enforcer.on_fetch_response(app(enforcer), response, now)
    else:
        bandwidth = None
    return enforcer.settle_response(app(enforcer), api, bandwidth, elapsed_ns, now)


def replay(enforcer: Enforcer) -> list[int]:
    return [answer(enforcer, *request[1:], request[0]) for request in TRAFFIC]


def throttle_averages(enforcer: Enforcer, now: int) -> list[float]:
    engine = enforcer.engine
    return [
        next(engine_manager.sensors()).throttle_time.measure(engine_manager.config, now)
        for engine_manager in (engine.produce, engine.request)
    ]


def test_shadow_mode_decides_the_same_throttles_and_applies_none() -> None:
    enforcing = Enforcer(engine())
    shadow = Enforcer(engine(), frozenset(QuotaType))
    enforced = replay(enforcing)
    assert replay(shadow) == [0] * len(TRAFFIC)
    throttled = [ms for ms in enforced if ms]
    assert len(throttled) > 10
    sensors = [next(m.sensors()) for m in (shadow.engine.produce, shadow.engine.request)]
    assert sum(s.shadow_throttles for s in sensors) == len(throttled)
    # Kafka's throttle-time metrics show the decisions either way
    end = TRAFFIC[-1][0]
    for enforced_avg, shadow_avg in zip(
        throttle_averages(enforcing, end), throttle_averages(shadow, end), strict=True
    ):
        assert not math.isnan(enforced_avg)
        assert enforced_avg == shadow_avg


def test_shadowing_one_quota_type_still_enforces_the_others() -> None:
    only_request = Enforcer(engine(), frozenset({QuotaType.PRODUCE}))
    produce_only = [answer(only_request, PRODUCE, 5000, 50, 0, now) for now in range(0, 2000, 100)]
    assert produce_only == [0] * len(produce_only)
    assert next(only_request.engine.produce.sensors()).shadow_throttles == len(produce_only)
    slow = answer(only_request, METADATA, 10, 10, 900_000_000, 2000)
    assert slow > 0


def test_fetch_over_quota_is_refused_before_going_upstream() -> None:
    enforcer = Enforcer(engine())
    # under quota: the fetch may return what the quota allows in one window
    assert enforcer.before_fetch(app(enforcer), 0) == (0, 1000)
    first = answer(enforcer, FETCH, 100, 4000, 0, 10)
    assert first > 0  # the response that crossed the quota carries the throttle
    throttle, max_bytes = enforcer.before_fetch(app(enforcer), 20)
    assert throttle > 0 and max_bytes is None
    # nothing was recorded by the check: the owed throttle shrinks as time passes
    later, _ = enforcer.before_fetch(app(enforcer), 1500)
    assert 0 < later < throttle
    assert enforcer.before_fetch(app(enforcer), 4100) == (0, 1000)
    shadow = Enforcer(engine(), frozenset({QuotaType.FETCH}))
    answer(shadow, FETCH, 100, 4000, 0, 10)
    assert shadow.before_fetch(app(shadow), 20) == (0, None)
    # shadowed, each fetch is decided once: when its response is recorded
    answer(shadow, FETCH, 100, 10, 0, 30)
    assert next(shadow.engine.fetch.sensors()).shadow_throttles == 2


def test_a_tie_is_recorded_as_request_time_as_kafka_does() -> None:
    enforcer = Enforcer(engine())
    decisions = (enforcer.engine.produce, enforcer.engine.request)
    sensors = [manager.sensors_for("u", "c", 0) for manager in decisions]
    applied = enforcer._settle(
        0, Decision(decisions[1], sensors[1], 500), Decision(decisions[0], sensors[0], 500)
    )
    assert applied == 500
    assert sensors[1].throttle_time.measure(WINDOWS.client, 0) == 500
    assert math.isnan(sensors[0].throttle_time.measure(WINDOWS.client, 0))


def test_a_throttled_produce_holds_the_connection_unless_shadowed() -> None:
    enforcer = Enforcer(engine())
    first = enforcer.on_produce(app(enforcer), 500, 0)
    assert first is None  # under its quota: no decision to hold the connection or to settle
    over = enforcer.on_produce(app(enforcer), 5000, 1)
    assert over is not None and over.throttle_ms > 0 and enforcer.holds(over)
    # the decision taken on reading is the one the response carries
    assert enforcer.settle_response(app(enforcer), PRODUCE, over, 0, 2) == over.throttle_ms
    shadow = Enforcer(engine(), frozenset({QuotaType.PRODUCE}))
    shadowed = shadow.on_produce(app(shadow), 9000, 0)
    assert shadowed is not None and shadowed.throttle_ms > 0 and not shadow.holds(shadowed)
    assert shadow.settle_without_response(shadowed, 0) == 0


def test_the_throttle_applied_under_a_shadowed_larger_one_is_recorded() -> None:
    enforcer = Enforcer(engine(), frozenset({QuotaType.PRODUCE}))
    produce = enforcer.on_produce(app(enforcer), 50_000, 0)
    applied = enforcer.settle_response(app(enforcer), PRODUCE, produce, 300_000_000, 0)
    assert produce is not None and 0 < applied < produce.throttle_ms
    request_sensors = next(enforcer.engine.request.sensors())
    assert request_sensors.throttle_time.measure(WINDOWS.client, 0) == applied
    assert next(enforcer.engine.produce.sensors()).shadow_throttles == 1
