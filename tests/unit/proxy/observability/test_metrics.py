"""Kafka's quota metric names and tags, read from the sensors at scrape time."""

from __future__ import annotations

from pathlib import Path

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from config.loader import load_config
from proxy.control.reload import ConfigReloader
from proxy.observability.metrics import QuotaCollector, build_registry
from proxy.runtime.counters import ProxyStats
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


def test_each_quota_in_force_is_reported_in_the_unit_of_its_rate() -> None:
    engine = QuotaEngine(
        QuotaConfig(
            limits={
                QuotaType.PRODUCE: {QuotaEntity(client_id="app"): 1000.0},
                QuotaType.CONTROLLER_MUTATION: {QuotaEntity(DEFAULT): 10.0},
                QuotaType.PRODUCER_IDS: {QuotaEntity(DEFAULT): 360.0},
            }
        )
    )
    engine.produce.sensors_for("alice", "app", T0)
    engine.produce.sensors_for("alice", "other", T0)  # no quota applies: none reported
    engine.controller_mutation.sensors_for("bob", "admin", T0)
    engine.producer_ids.sensors_for("bob", "any", T0)
    got = {
        dict(labels)["quota"]: (dict(labels)["user"], dict(labels)["client_id"], value)
        for (_, labels), value in samples(engine, T0, "kafka_quota_proxy_quota_limit").items()
    }
    assert got == {
        "producer_byte_rate": ("", "app", 1000.0),
        "controller_mutation_rate": ("bob", "", 10.0),
        # 360 ids per one-hour window, per second as kafka_server_producerids_rate is
        "producer_ids_rate": ("bob", "", 0.1),
    }


def test_applied_throttles_are_counted_apart_from_shadow_mode_decisions() -> None:
    limits = {QuotaType.PRODUCE: {QuotaEntity(DEFAULT, DEFAULT): 1000.0}}
    engine = QuotaEngine(QuotaConfig(limits=limits))
    sensors = engine.produce.sensors_for("alice", "app", T0)
    sensors.throttles, sensors.shadow_throttles = 3, 2
    got = samples(engine, T0, prefix="kafka_quota_proxy_")
    entity = (("client_id", "app"), ("quota", "producer_byte_rate"), ("user", "alice"))
    assert got[("kafka_quota_proxy_throttles_total", entity)] == 3
    assert got[("kafka_quota_proxy_shadow_throttles_total", entity)] == 2


def test_the_last_reload_is_reported_refused_until_a_change_is_taken(tmp_path: Path) -> None:
    path = tmp_path / "proxy.toml"
    path.write_text('[proxy]\nupstream_bootstrap_servers = ["127.0.0.1:9092"]\n')
    stats = ProxyStats()
    reloader = ConfigReloader(load_config(path), lambda _config: None, stats)
    engine = QuotaEngine(QuotaConfig())

    def last_reload() -> float:
        registry = build_registry(QuotaCollector(lambda: engine, lambda: T0, stats, lambda: 0))
        name = "kafka_quota_proxy_config_last_reload_successful"
        value = registry.get_sample_value(name)
        assert value is not None
        return value

    assert last_reload() == 1
    path.write_text(path.read_text() + "[users.alice]\nproducer_byte_rate = -1\n")
    assert not reloader.reload("edited")
    assert last_reload() == 0
    path.write_text(path.read_text().replace("-1", "1000"))
    assert reloader.reload("mended")
    assert last_reload() == 1


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


def test_a_topic_quota_s_rate_beside_its_limit_and_its_throttles() -> None:
    engine = QuotaEngine(
        QuotaConfig(limits={QuotaType.PRODUCE: {QuotaEntity(topic="orders"): 1000.0}})
    )
    manager = engine.topic_produce
    sensors = manager.sensors_of_topic("orders", T0)
    assert sensors is not None and manager.sensors_of_topic("audit", T0) is None
    throttle = manager.record_and_get_throttle_time_ms(sensors, 50_000, T0)
    assert throttle > 0
    manager.record_throttle(sensors, throttle, T0)
    sensors.throttles += 1
    got = samples(engine, T0 + 1000, prefix="kafka_quota_proxy_topic_")
    orders = (("quota", "producer_byte_rate"), ("topic", "orders"))
    assert got[("kafka_quota_proxy_topic_quota_limit", orders)] == 1000.0
    assert got[("kafka_quota_proxy_topic_byte_rate", orders)] > 1000.0
    assert got[("kafka_quota_proxy_topic_throttle_time", orders)] == throttle
    assert got[("kafka_quota_proxy_topic_throttles_total", orders)] == 1.0
    assert not any(
        labels == (("quota", "producer_byte_rate"), ("topic", "audit")) for _, labels in got
    )


def test_a_request_rate_guard_is_reported_as_the_proxys_own_by_api() -> None:
    """Not under Kafka's kafka_server_ names: no broker has these."""
    engine = QuotaEngine(
        QuotaConfig(limits={QuotaType.JOIN_GROUP_RATE: {QuotaEntity(client_id=DEFAULT): 2.0}})
    )
    joins = engine.guards[11]
    sensors = joins.sensors_for("alice", "churn", T0)
    joins.record_permissive(sensors, 25, T0)
    sensors.throttles = 4
    got = samples(engine, T0, prefix="kafka_quota_proxy_")
    guard = (("api", "JoinGroup"), ("client_id", "churn"), ("user", ""))
    assert got[("kafka_quota_proxy_guard_tokens", guard)] == -5.0  # a burst of 20
    assert ("kafka_quota_proxy_guard_rate", guard) in got
    assert ("kafka_quota_proxy_guard_throttle_time", guard) in got
    entity = (("client_id", "churn"), ("quota", "kafka-quota-proxy.join_group_rate"), ("user", ""))
    assert got[("kafka_quota_proxy_quota_limit", entity)] == 2.0
    assert got[("kafka_quota_proxy_throttles_total", entity)] == 4
    assert not samples(engine, T0)  # nothing named as Kafka's


def test_a_principals_connections_are_reported_beside_their_limit_and_refusals() -> None:
    engine = QuotaEngine(
        QuotaConfig(
            limits={
                QuotaType.CONNECTIONS: {QuotaEntity(client_id="storm"): 2.0},
                QuotaType.CONNECTION_CREATION_RATE: {QuotaEntity(client_id="storm"): 5.0},
            }
        )
    )
    connections = engine.connections
    for client in (("alice", "storm"), ("alice", "storm"), ("bob", "calm")):
        connections.connected(client)
    connections.refused[(QuotaType.CONNECTION_CREATION_RATE, ("", "storm"))] = 3
    engine.connection_creation.sensors_for("alice", "storm", T0)
    got = samples(engine, T0, prefix="kafka_quota_proxy_")
    storm = (("client_id", "storm"), ("user", ""))
    assert got[("kafka_quota_proxy_principal_connections", storm)] == 2
    assert got[("kafka_quota_proxy_principal_connections_fleet", storm)] == 2
    limit = (("client_id", "storm"), ("quota", "kafka-quota-proxy.connections"), ("user", ""))
    assert got[("kafka_quota_proxy_quota_limit", limit)] == 2.0
    assert got[("kafka_quota_proxy_principal_connections_refused_total", limit)] == 0
    rate = (("client_id", "storm"), ("quota", "kafka-quota-proxy.connection_creation_rate"),
            ("user", ""))  # fmt: skip
    assert got[("kafka_quota_proxy_principal_connections_refused_total", rate)] == 3
    assert ("kafka_quota_proxy_connection_creation_tokens", storm) in got
    assert not any(labels == (("client_id", "calm"), ("user", "")) for _, labels in got)
    assert not samples(engine, T0)  # nothing named as Kafka's
