"""Sensors that merge: a batch replay equal to the per-record managers (their oracle, on random
series of every quota type and window setting), use seen elsewhere recorded without being
judged, and a sensor's local use exported by its entity tags."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from quotas.entities import DEFAULT, QuotaEntity, QuotaType
from quotas.managers import NO_LINE, ClientQuotaManager, TokenBucketQuotaManager
from quotas.producer_ids import ProducerIdQuotaManager
from quotas.replay import replay_bucket, replay_rate
from quotas.settings import ProducerIdCacheSettings
from quotas.stats import MetricConfig

EVERYONE = QuotaEntity(client_id=DEFAULT)

windows = st.builds(
    MetricConfig, samples=st.integers(1, 12), window_ms=st.sampled_from([1, 10, 250, 1000, 3000])
)
#: whole numbers (bytes, partitions, ids) or fractions (request time in %-seconds)
amounts = st.one_of(
    st.integers(0, 2_000_000).map(float),
    st.floats(0.0, 5_000.0, allow_nan=False),
)


@st.composite
def series(draw: st.DrawFn) -> tuple[list[int], list[float]]:
    """Records in time order: bursts at one instant, steady gaps, and gaps long enough for
    every sample to expire."""
    gaps = draw(
        st.lists(
            st.one_of(st.just(0), st.integers(1, 400), st.integers(10_000, 60_000)),
            min_size=1,
            max_size=120,
        )
    )
    times, now = [], draw(st.integers(0, 10**12))
    for gap in gaps:
        now += gap
        times.append(now)
    return times, draw(st.lists(amounts, min_size=len(times), max_size=len(times)))


limits = st.floats(0.5, 5_000_000.0, allow_nan=False)


@settings(max_examples=300, deadline=None)
@given(
    config=windows,
    limit=limits,
    records=series(),
    quota_type=st.sampled_from([QuotaType.PRODUCE, QuotaType.FETCH, QuotaType.REQUEST]),
)
def test_a_rate_replayed_in_one_call_equals_the_manager_record_by_record(
    config: MetricConfig,
    limit: float,
    records: tuple[list[int], list[float]],
    quota_type: QuotaType,
) -> None:
    times, values = records
    # request time's throttle is bounded by one window, as Kafka's request quota
    bound = config.window_ms if quota_type is QuotaType.REQUEST else None
    manager = ClientQuotaManager(quota_type, config, {EVERYONE: limit}, max_throttle_ms=bound)
    sensors = manager.sensors_for("u", "c", times[0])
    expected = [
        manager.record_and_get_throttle_time_ms(sensors, value, now)
        for now, value in zip(times, values, strict=True)
    ]
    assert replay_rate(manager, limit, times, values) == expected


@settings(max_examples=300, deadline=None)
@given(
    config=windows,
    limit=limits,
    records=series(),
    strict=st.booleans(),
    producer_ids=st.booleans(),
)
def test_a_token_bucket_replayed_in_one_call_equals_the_manager_record_by_record(
    config: MetricConfig,
    limit: float,
    records: tuple[list[int], list[float]],
    strict: bool,
    producer_ids: bool,
) -> None:
    times, values = records
    manager: TokenBucketQuotaManager
    if producer_ids:  # KIP-936: a bucket of one window's ids, refilled over the window
        manager = ProducerIdQuotaManager(
            config, ProducerIdCacheSettings(), {QuotaEntity(DEFAULT): limit}
        )
        sensors = manager.sensors_for("u", "", times[0])
    else:  # KIP-599: mutations per second, a burst of the windows' worth
        manager = TokenBucketQuotaManager(
            QuotaType.CONTROLLER_MUTATION, config, {EVERYONE: limit}, unit_ms=1000.0
        )
        sensors = manager.sensors_for("u", "c", times[0])
    record = manager.record_strict if strict else manager.record_permissive
    expected = []
    for now, value in zip(times, values, strict=True):
        outcome = record(sensors, value, now)
        expected.append(outcome if strict else (True, outcome))
    assert [tuple(a) for a in replay_bucket(manager, limit, times, values, strict)] == [
        tuple(e) if isinstance(e, tuple) else e for e in expected
    ]


def test_use_seen_elsewhere_is_judged_with_local_use_and_never_exported() -> None:
    config = MetricConfig(samples=2, window_ms=1000)
    manager = ClientQuotaManager(QuotaType.PRODUCE, config, {EVERYONE: 1000.0})
    here = manager.sensors_for("u", "app", 0)
    assert manager.record_and_get_throttle_time_ms(here, 600, 0) == 0
    # another member's 900 bytes of the same principal, under the same metric tags
    elsewhere = manager.sensors_of_tags(here.tags, 10)
    assert elsewhere is here
    manager.record_remote(elsewhere, 900, 10)
    assert manager.record_and_get_throttle_time_ms(here, 100, 20) > 0  # 1,600 B in 1 s
    assert manager.settle(here) == (700.0, 0.0)  # only what was recorded here
    assert manager.settle(here) is None  # taken once
    # a member's export names tags this process has not resolved yet: made on the spot
    other = manager.sensors_of_tags(("", "batch"), 30)
    manager.record_remote(other, 5000, 30)
    assert manager.sensors_for("v", "batch", 40) is other
    assert manager.settle(other) is None


def test_a_refund_is_exported_as_the_use_it_takes_back() -> None:
    config = MetricConfig(samples=10, window_ms=1000)
    manager = TokenBucketQuotaManager(
        QuotaType.CONTROLLER_MUTATION, config, {EVERYONE: 2.0}, unit_ms=1000.0
    )
    sensors = manager.sensors_for("u", "c", 0)
    manager.record_permissive(sensors, 8, 0)
    manager.refund(sensors, 3, 5)
    manager.record_remote(sensors, 4, 6)
    assert manager.settle(sensors) == (5.0, 0.0)
    assert manager.tokens(sensors, 6) == 20 - 8 + 3 - 4 + 2.0 * 6 / 1000


def test_a_sensor_crosses_its_line_once_and_is_settled_from_its_window() -> None:
    """A fleet's demarcation line (proxy/enforcement/fleet.py): outside a fleet nothing
    crosses; in one, the first use past the line hands the sensor over once, and watching it
    settles only its current window's use, not all its history."""
    config = MetricConfig(samples=2, window_ms=1000)
    manager = ClientQuotaManager(QuotaType.PRODUCE, config, {EVERYONE: 1000.0})
    sensors = manager.sensors_for("u", "app", 0)
    manager.record_and_get_throttle_time_ms(sensors, 5000, 0)
    assert not manager.take_crossed()  # no fleet: no line
    # a fleet of three: half the limit, on a use weighted 3 (as if spread evenly)
    manager.set_lines(0.5, 3.0)
    assert (sensors.line, sensors.weight) == (500.0, 3.0)
    for second in range(3, 7):  # 50 B/s once the burst has aged out: 300 B/s as weighted
        manager.record_and_get_throttle_time_ms(sensors, 50, second * 1000)
    assert not manager.take_crossed()
    manager.record_and_get_throttle_time_ms(sensors, 100, 6500)  # 600 B/s as weighted
    manager.record_and_get_throttle_time_ms(sensors, 100, 6600)
    assert manager.take_crossed() == [sensors] and not manager.take_crossed()
    manager.watch(sensors)
    # the window's samples, not the first 5,000 B; and what the weight added for the others
    assert manager.settle(sensors) == (300.0, 600.0)
    manager.unwatch(sensors)
    assert (sensors.line, sensors.weight) == (500.0, 3.0)
    manager.set_lines(None, 1.0)
    assert (sensors.line, sensors.weight) == (NO_LINE, 1.0)


def test_a_bucket_crosses_its_line_in_tokens_spent() -> None:
    config = MetricConfig(samples=10, window_ms=1000)
    manager = TokenBucketQuotaManager(
        QuotaType.CONTROLLER_MUTATION, config, {EVERYONE: 2.0}, unit_ms=1000.0
    )
    manager.set_lines(0.25, 1.0)
    sensors = manager.sensors_for("u", "c", 0)
    assert sensors.line == 5.0  # a quarter of a burst of 20
    manager.record_permissive(sensors, 5, 0)
    assert not manager.take_crossed()
    manager.record_permissive(sensors, 1, 0)
    assert manager.take_crossed() == [sensors]
