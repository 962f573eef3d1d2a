"""Invariants of the quota engine over generated sequences of (time step, value)."""

from __future__ import annotations

from functools import reduce
from operator import add

from hypothesis import given
from hypothesis import strategies as st

from quotas.entities import DEFAULT, EntityQuotas, QuotaEntity, QuotaType
from quotas.managers import ClientQuotaManager, TokenBucketQuotaManager
from quotas.stats import MetricConfig, Rate, slot_order_sum

T0 = 1_700_000_000_000

steps = st.lists(
    st.tuples(st.integers(0, 5000), st.floats(-500, 5000, allow_nan=False)), max_size=60
)
windows = st.builds(MetricConfig, samples=st.integers(1, 12), window_ms=st.integers(100, 5000))


@given(windows, st.floats(0.5, 1000), steps, st.booleans())
def test_tokens_never_exceed_the_burst(
    config: MetricConfig, quota: float, sequence: list[tuple[int, float]], strict: bool
) -> None:
    manager = TokenBucketQuotaManager(
        QuotaType.CONTROLLER_MUTATION, config, {QuotaEntity(DEFAULT): quota}, unit_ms=1000.0
    )
    sensors = manager.sensors_for("u", "c", T0)
    burst = manager.burst(sensors.limit)
    now = T0
    for step, value in sequence:
        now += step
        if strict:
            throttle = manager.record_strict(sensors, value, now).throttle_ms
        else:
            throttle = manager.record_permissive(sensors, value, now)
        tokens = manager.tokens(sensors, now)
        assert tokens <= burst
        assert throttle >= 0
        if not strict:
            assert (throttle > 0) <= (tokens < 0)


@given(windows, st.floats(1, 1e6), steps)
def test_throttle_only_when_the_measured_rate_exceeds_the_quota(
    config: MetricConfig, quota: float, sequence: list[tuple[int, float]]
) -> None:
    manager = ClientQuotaManager(QuotaType.PRODUCE, config, {QuotaEntity(DEFAULT): quota})
    sensors = manager.sensors_for("u", "c", T0)
    now = T0 + 1
    for step, value in sequence:
        now += step
        throttle = manager.record_and_get_throttle_time_ms(sensors, abs(value), now)
        measured = sensors.rate.measure(config, now)
        if measured <= quota:
            assert throttle == 0


@given(
    st.integers(1, 1000),
    st.floats(0.01, 0.9),
    st.integers(1, 1000),
    st.integers(1, 200),
)
def test_a_client_steadily_below_its_quota_is_never_throttled(
    quota_kb: int, fraction: float, interval_ms: int, requests: int
) -> None:
    """Kafka's defaults (11 x 1 s); sending at <= 90% of the quota never throttles."""
    quota = quota_kb * 1000.0
    manager = ClientQuotaManager(
        QuotaType.PRODUCE, MetricConfig(11, 1000), {QuotaEntity(DEFAULT): quota}
    )
    sensors = manager.sensors_for("u", "c", T0)
    size = quota * fraction * interval_ms / 1000
    for index in range(requests):
        now = T0 + index * interval_ms
        assert manager.record_and_get_throttle_time_ms(sensors, size, now) == 0


names = st.sampled_from(["alice", "bob", "carol"])
client_ids = st.sampled_from(["app", "etl", "cli"])
entities = st.one_of(
    st.builds(QuotaEntity, st.one_of(names, st.just(DEFAULT)), st.none()),
    st.builds(QuotaEntity, st.none(), st.one_of(client_ids, st.just(DEFAULT))),
    st.builds(
        QuotaEntity, st.one_of(names, st.just(DEFAULT)), st.one_of(client_ids, st.just(DEFAULT))
    ),
)


def most_specific(limits: dict[QuotaEntity, float], user: str, client_id: str) -> float | None:
    for entity in (
        QuotaEntity(user, client_id),
        QuotaEntity(user, DEFAULT),
        QuotaEntity(user),
        QuotaEntity(DEFAULT, client_id),
        QuotaEntity(DEFAULT, DEFAULT),
        QuotaEntity(DEFAULT),
        QuotaEntity(client_id=client_id),
        QuotaEntity(client_id=DEFAULT),
    ):
        if entity in limits:
            return limits[entity]
    return None


@given(st.dictionaries(entities, st.floats(1, 1e9), max_size=12), names, client_ids)
def test_precedence_picks_the_most_specific_entity(
    limits: dict[QuotaEntity, float], user: str, client_id: str
) -> None:
    quotas = EntityQuotas(limits)
    assert quotas.limit(quotas.metric_tags(user, client_id)) == most_specific(
        limits, user, client_id
    )


class _ScanningRate(Rate):
    """The same Rate, forced to find the oldest start and event by scanning every time."""

    __slots__ = ()

    def measure_with_window(self, config: MetricConfig, now_ms: int) -> tuple[float, int]:
        self._oldest_start_ms = None
        self._oldest_event_ms = -(2**62)
        return super().measure_with_window(config, now_ms)


@given(
    steps=st.lists(
        st.tuples(st.integers(-500, 4000), st.floats(0, 1e6), st.booleans()), max_size=200
    ),
    samples=st.integers(1, 11),
    window_ms=st.sampled_from([1, 100, 1000]),
)
def test_kept_oldest_times_measure_as_scanning_does(
    steps: list[tuple[int, float, bool]], samples: int, window_ms: int
) -> None:
    """Times mostly advance but may step back (a clock going back must not lose a purge)."""
    config = MetricConfig(samples=samples, window_ms=window_ms)
    kept, scanned = Rate(), _ScanningRate()
    now = 0
    for step, value, record in steps:
        now += step
        if record:
            kept.record(config, value, now)
            scanned.record(config, value, now)
        assert kept.measure_with_window(config, now) == scanned.measure_with_window(config, now)


class _ComposedRate(_ScanningRate):
    """Kafka's steps one by one: record, then measure by scanning and summing every sample
    in slot order, Java's loop."""

    __slots__ = ()

    def total(self) -> float:
        return reduce(add, self.values, 0.0)

    def record_and_measure(
        self, config: MetricConfig, value: float, now_ms: int
    ) -> tuple[float, int]:
        self.record(config, value, now_ms)
        return self.measure_with_window(config, now_ms)


@given(
    steps=st.lists(
        st.tuples(
            st.one_of(st.integers(0, 40), st.integers(-500, 4000)),  # mostly within a sample
            st.one_of(
                st.integers(-(10**6), 10**9),  # bytes; negative: a throttled fetch taken back
                st.integers(0, 10**10).map(lambda ns: ns * 1e-7),  # request time, as recorded
            ),
            st.booleans(),
        ),
        min_size=20,
        max_size=200,
    ),
    samples=st.integers(1, 4),
    window_ms=st.sampled_from([1, 10, 100]),
)
def test_the_hot_path_measures_as_kafkas_steps_do_to_the_bit(
    steps: list[tuple[int, float, bool]], samples: int, window_ms: int
) -> None:
    """Whole-number values (byte counts) are summed by a running total, fractional ones
    (request time) in slot order; both must equal Java's slot-order loop exactly."""
    config = MetricConfig(samples=samples, window_ms=window_ms)
    fast, composed = Rate(), _ComposedRate()
    now = 0
    for step, value, record in steps:
        now += step
        if record:
            assert fast.record_and_measure(config, value, now) == composed.record_and_measure(
                config, value, now
            )
        else:
            assert fast.measure_with_window(config, now) == composed.measure_with_window(
                config, now
            )


@given(st.lists(st.floats(allow_nan=False, allow_infinity=False, width=64), max_size=14))
def test_slot_order_sum_adds_left_to_right(values: list[float]) -> None:
    assert slot_order_sum([1e16, 1.0, -1e16]) == 0.0  # a compensated sum would give 1.0
    assert slot_order_sum(values) == reduce(add, values, 0.0)
