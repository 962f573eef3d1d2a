"""Kafka's own quota test vectors, replayed as (time, value) sequences against quotas/.

Each expected number comes from Apache Kafka's tests (ClientQuotaManagerTest,
ClientRequestQuotaManagerTest, ControllerMutationQuotaManagerTest, TokenBucketTest,
RateTest, MetricsTest, SampledStatTest); see docs/kafka-quota-semantics.md §9.
"""

from __future__ import annotations

import math

import pytest

from quotas.entities import DEFAULT, QuotaEntity, QuotaType
from quotas.javamath import INT_MAX, java_round
from quotas.managers import (
    ADMITTED,
    SENSOR_EXPIRATION_MS,
    ClientQuotaManager,
    TokenBucketQuotaManager,
)
from quotas.stats import MetricConfig, Rate, TokenBucket

T0 = 1_700_000_000_000
KAFKA_WINDOWS = MetricConfig(samples=11, window_ms=1000)
ANYONE = {QuotaEntity(client_id=DEFAULT): 0.0}


def client_manager(limit: float, max_throttle_ms: int | None = None) -> ClientQuotaManager:
    return ClientQuotaManager(
        QuotaType.PRODUCE,
        KAFKA_WINDOWS,
        {QuotaEntity(client_id=DEFAULT): limit},
        max_throttle_ms=max_throttle_ms,
    )


def percent(millis: float) -> float:
    """ClientRequestQuotaManager's units: thread nanos x 100 / 1e9."""
    return int(millis * 1_000_000) * (100.0 / 1_000_000_000)


def test_java_round_ties_toward_positive_infinity() -> None:
    values = [2.5, -2.5, 0.49999999999999994, 1.5, -0.5, math.nan, 1e300]
    assert [java_round(x) for x in values] == [3, -2, 0, 2, 0, 0, 2**63 - 1]


def test_byte_rate_violation_matches_kafka() -> None:
    """ClientQuotaManagerTest.testQuotaViolation: 6300 bytes / 10.5 s against 500 B/s."""
    manager = client_manager(500.0)
    sensors = manager.sensors_for("ANONYMOUS", "client1", T0)
    now = T0
    for _ in range(10):
        assert manager.record_and_get_throttle_time_ms(sensors, 400, now) == 0
        now += 1000
    now += 500
    throttle = manager.record_and_get_throttle_time_ms(sensors, 2300, now)
    assert throttle == 2100
    now += throttle
    for _ in range(10):
        manager.record_and_get_throttle_time_ms(sensors, 400, now)
        now += 1000
    assert manager.record_and_get_throttle_time_ms(sensors, 0, now) == 0


def test_request_percentage_is_capped_at_one_window() -> None:
    """ClientRequestQuotaManagerTest.testRequestPercentageQuotaViolation."""
    manager = client_manager(1.0, max_throttle_ms=1000)
    sensors = manager.sensors_for("ANONYMOUS", "client1", T0)
    now = T0
    for _ in range(10):
        assert manager.record_and_get_throttle_time_ms(sensors, percent(4), now) == 0
        now += 1000
    now += 500
    throttle = manager.record_and_get_throttle_time_ms(sensors, percent(67.1), now)
    assert throttle == 210
    now += throttle
    for _ in range(11):
        manager.record_and_get_throttle_time_ms(sensors, percent(4), now)
        now += 1000
    assert manager.record_and_get_throttle_time_ms(sensors, 0, now) == 0
    assert manager.record_and_get_throttle_time_ms(sensors, percent(500), now) == 1000
    for _ in range(10):
        now += 1000
        assert manager.record_and_get_throttle_time_ms(sensors, 0, now) == 1000
    now += 1000
    # the 500 ms burst's sample has had no event for samples x window: purged
    assert manager.record_and_get_throttle_time_ms(sensors, 0, now) == 0


def test_huge_throttle_is_capped_to_int32() -> None:
    """testThrottleTimeCappedToIntRange: 1e9 bytes against quota 1 would be 999,999,990,000 ms."""
    manager = client_manager(1.0)
    sensors = manager.sensors_for("ANONYMOUS", "client1", T0)
    assert manager.record_and_get_throttle_time_ms(sensors, 1e9, T0) == INT_MAX


def test_rounding_at_half_goes_up() -> None:
    """A throttle of exactly 12.5 ms is 13 (Math.round), where Python's round() gives 12."""
    manager = client_manager(100.0)
    sensors = manager.sensors_for("ANONYMOUS", "c", T0)
    # 1001.25 B over the padded 10 s window = 100.125 B/s; (0.125 / 100) x 10000 ms = 12.5
    assert manager.record_and_get_throttle_time_ms(sensors, 1001.25, T0) == 13
    assert round(12.5) == 12


def test_empty_window_measures_zero_and_is_padded() -> None:
    rate = Rate()
    assert rate.measure_with_window(KAFKA_WINDOWS, T0) == (0.0, 10_000)
    # RateTest.testRateWithNoPriorAvailableSamples: 50 recorded, measured W - 1 ms later
    for samples, window_s in ((1, 1), (1, 11), (11, 1), (11, 11)):
        config = MetricConfig(samples=samples, window_ms=window_s * 1000)
        rate = Rate()
        rate.record(config, 50, T0)
        expected = 50 / ((config.window_ms - 1) / 1000 + (samples - 1) * window_s)
        assert rate.measure(config, T0 + config.window_ms - 1) == pytest.approx(expected)


def test_a_single_window_is_at_least_one_millisecond() -> None:
    """quota.window.num = 1: Kafka (since 3.4) measures a record at the instant its window
    starts over 1 ms, so a first request over quota is throttled rather than let through on an
    infinite or NaN rate."""
    manager = ClientQuotaManager(
        QuotaType.PRODUCE,
        MetricConfig(samples=1, window_ms=1000),
        {QuotaEntity(client_id=DEFAULT): 500.0},
    )
    sensors = manager.sensors_for("ANONYMOUS", "c", T0)
    # 400 B over 1 ms = 400 000 B/s; (400 000 - 500) / 500 x 1 ms
    assert manager.record_and_get_throttle_time_ms(sensors, 400, T0) == 799


def test_rate_windowing_over_gaps() -> None:
    """MetricsTest.testRateWindowing: 3 samples of 30 s; 200 units over 75 s."""
    config = MetricConfig(samples=3, window_ms=30_000)
    rate = Rate()
    rate.record(config, 100, T0)
    rate.record(config, 100, T0 + 30_000)
    assert rate.measure_with_window(config, T0 + 75_000) == (200 / 75, 75_000)


def test_stale_samples_are_purged_by_last_event() -> None:
    """SampledStatTest: samples + 1 slots; a sample goes once its last event is samples x W old."""
    config = MetricConfig(samples=2, window_ms=1000)
    rate = Rate()
    for offset in (0, 999, 1000, 1999, 2000):
        rate.record(config, 1, T0 + offset)
    rate.purge(config, T0 + 2200)
    assert rate.total() == 5  # three slots, each with an event in the last 2 s
    rate.purge(config, T0 + 3000)
    assert rate.total() == 3  # the first sample's last event (+999) is now 2001 ms old


def test_rate_is_consistent_after_the_first_window() -> None:
    """RateTest.testRateIsConsistentAfterTheFirstWindow: 10 events/s read as 10..11/s."""
    config = MetricConfig(samples=2, window_ms=1000)
    rate = Rate()
    for step in range(100):
        now = T0 + step * 100
        rate.record(config, 1, now)
        if step >= 10:
            assert 10 <= rate.measure(config, now) <= 11


def test_token_bucket_matches_kafka() -> None:
    """TokenBucketTest: quota 5/s, 10 samples of 2 s: burst 100."""
    config = MetricConfig(samples=10, window_ms=2000)
    burst = config.samples * (config.window_ms / 1000) * 5
    bucket = TokenBucket(burst, T0)
    assert bucket.refill(5, burst, 1000.0, T0) == 100
    bucket.record(5, burst, 1000.0, 60, T0)
    assert bucket.tokens == 40
    bucket.record(5, burst, 1000.0, 5, T0 + 2000)
    assert bucket.tokens == 45
    bucket.record(5, burst, 1000.0, 60, T0 + 4000)
    assert bucket.tokens == -5
    bucket.record(5, burst, 1000.0, -60, T0 + 4000)
    assert bucket.tokens == 55
    bucket.record(5, burst, 1000.0, -600, T0 + 4000)
    assert bucket.tokens == 100  # un-recording never overfills


def mutation_manager() -> TokenBucketQuotaManager:
    return TokenBucketQuotaManager(
        QuotaType.CONTROLLER_MUTATION,
        MetricConfig(samples=10, window_ms=1000),
        {QuotaEntity(client_id=DEFAULT): 10.0},
        unit_ms=1000.0,
    )


def test_strict_mutation_quota() -> None:
    """ControllerMutationQuotaManagerTest.testControllerMutationQuotaViolation."""
    manager = mutation_manager()
    sensors = manager.sensors_for("ANONYMOUS", "c", T0)
    now = T0
    for _ in range(10):
        assert manager.record_strict(sensors, 10, now) == ADMITTED
        now += 1000
    assert manager.record_strict(sensors, 110, now) == ADMITTED  # 100 -> -10
    assert manager.record_strict(sensors, 110, now) == (False, 1000)  # nothing recorded
    assert manager.tokens(sensors, now) == -10
    now += 1000
    assert manager.record_strict(sensors, 110, now) == ADMITTED


def test_a_strict_refusal_can_carry_a_zero_throttle() -> None:
    """Tokens at -0.001 with quota 10: Kafka refuses with error 89 and a 0 ms throttle."""
    manager = TokenBucketQuotaManager(
        QuotaType.CONTROLLER_MUTATION,
        MetricConfig(samples=10, window_ms=1000),
        {QuotaEntity(client_id=DEFAULT): 10.0},
        unit_ms=1000.0,
    )
    sensors = manager.sensors_for("u", "c", T0)
    assert manager.record_strict(sensors, 100.001, T0) == ADMITTED
    assert manager.record_strict(sensors, 5, T0) == (False, 0)
    assert manager.tokens(sensors, T0) == pytest.approx(-0.001)


def test_a_refund_gives_back_tokens_up_to_the_burst() -> None:
    manager = mutation_manager()
    sensors = manager.sensors_for("u", "c", T0)
    assert manager.record_strict(sensors, 30, T0) == ADMITTED
    manager.refund(sensors, 30, T0)
    assert manager.tokens(sensors, T0) == manager.burst(sensors.limit)
    manager.refund(sensors, 30, T0)
    assert manager.tokens(sensors, T0) == manager.burst(sensors.limit)


def test_strict_and_permissive_throttles() -> None:
    """testStrict/PermissiveControllerMutationQuotaViolation: 90 permits three times."""
    strict, permissive = mutation_manager(), mutation_manager()
    s1 = strict.sensors_for("u", "c", T0)
    s2 = permissive.sensors_for("u", "c", T0)
    assert [strict.record_strict(s1, 90, T0).throttle_ms for _ in range(3)] == [0, 0, 8000]
    assert [permissive.record_permissive(s2, 90, T0) for _ in range(3)] == [0, 8000, 17000]
    assert strict.tokens(s1, T0 + 5000) == -30
    assert permissive.record_permissive(s2, 0, T0 + 5000) == 12000


def test_byte_rate_throttle_is_not_bounded_by_the_window() -> None:
    manager = client_manager(100.0)
    sensors = manager.sensors_for("u", "c", T0)
    # 100 kB over the padded 10 s window: (10000 - 100) / 100 x 10 s
    assert manager.record_and_get_throttle_time_ms(sensors, 100_000, T0) == 990_000


def test_sensors_expire_after_an_hour_without_records() -> None:
    manager = client_manager(100.0)
    sensors = manager.sensors_for("u", "c", T0)
    manager.record_and_get_throttle_time_ms(sensors, 5000, T0)
    assert manager.expire(T0 + SENSOR_EXPIRATION_MS) == 0  # Kafka's test is strictly greater
    assert manager.expire(T0 + SENSOR_EXPIRATION_MS + 1) == 1
    fresh = manager.sensors_for("u", "c", T0 + SENSOR_EXPIRATION_MS + 1)
    assert fresh is not sensors
    assert list(manager.sensors()) == [fresh]
    assert manager.record_and_get_throttle_time_ms(fresh, 0, T0 + SENSOR_EXPIRATION_MS + 1) == 0


def test_expired_bucket_comes_back_full() -> None:
    manager = mutation_manager()
    sensors = manager.sensors_for("u", "c", T0)
    manager.record_permissive(sensors, 300, T0)
    later = T0 + SENSOR_EXPIRATION_MS + 1
    manager.expire(later)
    assert manager.tokens(manager.sensors_for("u", "c", later), later) == 100
