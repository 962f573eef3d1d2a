"""Kafka's quota metric names and tags, read from the sensors at scrape time."""

from __future__ import annotations

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from proxy.metrics import ProxyStats, QuotaCollector, build_registry
from quotas.bloom import BloomShape, layer_false_positive_rate
from quotas.engine import QuotaEngine
from quotas.entities import DEFAULT, QuotaEntity, QuotaType
from quotas.managers import SENSOR_EXPIRATION_MS
from quotas.settings import QuotaConfig

T0 = 1_700_000_000_000


def samples(
    engine: QuotaEngine, now: int, prefix: str = "kafka_server_"
) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    registry = build_registry(QuotaCollector(lambda: engine, lambda: now, ProxyStats(), lambda: 0))
    text = generate_latest(registry).decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name.startswith(prefix)
    }


def test_series_mirror_kafka_and_vanish_with_their_sensor() -> None:
    engine = QuotaEngine(
        QuotaConfig(
            limits={
                QuotaType.PRODUCE: {QuotaEntity(DEFAULT, DEFAULT): 1000.0},
                QuotaType.CONTROLLER_MUTATION: {QuotaEntity(client_id=DEFAULT): 10.0},
                QuotaType.PRODUCER_IDS: {QuotaEntity(DEFAULT): 100.0},
            }
        )
    )
    produce = engine.produce
    sensors = produce.sensors_for("CN=app one", "app", T0)
    throttle = produce.record_and_get_throttle_time_ms(sensors, 20_000, T0)
    produce.record_throttle(sensors, throttle, T0)
    mutations = engine.controller_mutation
    mutations.record_permissive(mutations.sensors_for("bob", "admin", T0), 150, T0)
    ids = engine.producer_ids
    ids.record_permissive(ids.sensors_for("bob", "any", T0), 3, T0)

    got = samples(engine, T0)
    user = (("client_id", "app"), ("user", "CN%3Dapp%20one"))
    assert got[("kafka_server_produce_byte_rate", user)] == 2000.0  # 20 kB over 10 s
    assert got[("kafka_server_produce_throttle_time", user)] == throttle == 10_000
    admin = (("client_id", "admin"), ("user", ""))  # clients/<default>: shared across users
    assert got[("kafka_server_controllermutation_tokens", admin)] == -40.0
    assert ("kafka_server_controllermutation_mutation_rate", admin) in got
    assert got[("kafka_server_producerids_tokens", (("user", "bob"),))] == 97.0  # one window
    assert ("kafka_server_producerids_rate", (("user", "bob"),)) in got

    later = T0 + SENSOR_EXPIRATION_MS + 1
    assert engine.expire(later) == 3
    assert samples(engine, later) == {}


def test_producer_id_filters_and_dropped_requests_are_reported() -> None:
    engine = QuotaEngine(QuotaConfig(limits={QuotaType.PRODUCER_IDS: {QuotaEntity(DEFAULT): 10.0}}))
    ids = engine.producer_ids
    for user in ("alice", "bob"):
        ids.admit(ids.sensors_for(user, "app", T0), [1, 2], T0)
    ids.sensors_for("bob", "app", T0).dropped_requests = 3
    got = samples(engine, T0, prefix="kafka_quota_proxy_")
    assert got[("kafka_quota_proxy_producer_id_users", ())] == 2
    one_layer = BloomShape.for_items(11, layer_false_positive_rate(0.001, 4)).size_bytes
    assert got[("kafka_quota_proxy_producer_id_filter_bytes", ())] == 2 * one_layer
    assert got[("kafka_quota_proxy_dropped_produce_requests_total", (("user", "bob"),))] == 3
