"""Kafka's eight-level quota precedence, and which clients share one sensor."""

from __future__ import annotations

import pytest

from quotas.entities import DEFAULT, EntityQuotas, QuotaEntity, QuotaType, sanitize
from quotas.managers import UNLIMITED, ClientQuotaManager
from quotas.stats import MetricConfig

T0 = 1_700_000_000_000

#: the precedence list of ClientQuotaManager's javadoc, for user "alice", client-id "app"
LEVELS = [
    QuotaEntity("alice", "app"),
    QuotaEntity("alice", DEFAULT),
    QuotaEntity("alice"),
    QuotaEntity(DEFAULT, "app"),
    QuotaEntity(DEFAULT, DEFAULT),
    QuotaEntity(DEFAULT),
    QuotaEntity(client_id="app"),
    QuotaEntity(client_id=DEFAULT),
]


def resolve(limits: dict[QuotaEntity, float], user: str, client_id: str) -> float | None:
    quotas = EntityQuotas(limits)
    return quotas.limit(quotas.metric_tags(user, client_id))


@pytest.mark.parametrize("level", range(len(LEVELS)))
def test_each_level_wins_over_every_less_specific_one(level: int) -> None:
    limits = {entity: float(100 + index) for index, entity in enumerate(LEVELS) if index >= level}
    assert resolve(limits, "alice", "app") == 100 + level


def test_kafka_precedence_vectors() -> None:
    """ClientQuotaManagerTest.testQuotaConfigPrecedence."""
    limits = {
        QuotaEntity(DEFAULT): 1000.0,
        QuotaEntity(client_id=DEFAULT): 2000.0,
        QuotaEntity(DEFAULT, DEFAULT): 3000.0,
        QuotaEntity("userA"): 4000.0,
        QuotaEntity("userA", "client1"): 5000.0,
        QuotaEntity("userB"): 6000.0,
        QuotaEntity("userB", "client1"): 7000.0,
        QuotaEntity("userB", DEFAULT): 8000.0,
    }
    expected = {
        ("userA", "client1"): 5000,
        ("userA", "client2"): 4000,
        ("userB", "client1"): 7000,
        ("userB", "client2"): 8000,
        ("userD", "client1"): 3000,
    }
    for (user, client_id), limit in expected.items():
        assert resolve(limits, user, client_id) == limit
    del limits[QuotaEntity(DEFAULT, DEFAULT)]
    assert resolve(limits, "userD", "client1") == 1000
    del limits[QuotaEntity(DEFAULT)]
    assert resolve(limits, "userD", "client1") == 2000


def test_no_entity_means_unlimited() -> None:
    assert resolve({QuotaEntity("bob"): 5.0}, "alice", "app") is None


def manager(limits: dict[QuotaEntity, float]) -> ClientQuotaManager:
    return ClientQuotaManager(QuotaType.PRODUCE, MetricConfig(11, 1000), limits)


def test_default_client_id_quota_is_shared_across_users() -> None:
    produce = manager({QuotaEntity(client_id=DEFAULT): 1000.0})
    alice = produce.sensors_for("alice", "app", T0)
    assert produce.sensors_for("bob", "app", T0) is alice
    assert alice.tags == ("", "app")
    other = produce.sensors_for("alice", "other", T0)
    assert other is not alice
    produce.record_and_get_throttle_time_ms(alice, 6000, T0)
    # bob's bytes land in the same window: together they exceed 1000 B/s over 10 s
    assert produce.record_and_get_throttle_time_ms(alice, 5000, T0) == 1000
    assert produce.record_and_get_throttle_time_ms(other, 5000, T0) == 0


def test_default_user_quota_gives_each_user_one_sensor_for_all_client_ids() -> None:
    produce = manager({QuotaEntity(DEFAULT): 1000.0})
    alice = produce.sensors_for("alice", "app-1", T0)
    assert produce.sensors_for("alice", "app-2", T0) is alice
    assert alice.tags == ("alice", "")
    assert produce.sensors_for("bob", "app-1", T0) is not alice


def test_pair_default_separates_every_user_and_client_id() -> None:
    produce = manager({QuotaEntity(DEFAULT, DEFAULT): 1000.0, QuotaEntity("alice"): 50.0})
    app1 = produce.sensors_for("alice", "app-1", T0)
    app2 = produce.sensors_for("alice", "app-2", T0)
    # users/alice is more specific than users/<default>/clients/<default>: one sensor for alice
    assert app1 is app2 and app1.limit == 50
    bob = produce.sensors_for("bob", "app-1", T0)
    assert bob.tags == ("bob", "app-1") and bob.limit == 1000


def test_reload_keeps_history_and_moves_clients_when_levels_change() -> None:
    produce = manager({QuotaEntity(client_id=DEFAULT): 1000.0})
    sensors = produce.sensors_for("alice", "app", T0)
    assert produce.record_and_get_throttle_time_ms(sensors, 20_000, T0) == 10_000
    produce.update_limits({QuotaEntity(client_id=DEFAULT): 4000.0})
    assert produce.sensors_for("alice", "app", T0) is sensors
    # 20 kB / 10 s = 2000 B/s, now within the raised quota
    assert produce.record_and_get_throttle_time_ms(sensors, 0, T0) == 0
    produce.update_limits({QuotaEntity("alice"): 100.0})
    moved = produce.sensors_for("alice", "app", T0)
    assert moved is not sensors and moved.tags == ("alice", "")
    assert sensors.limit == UNLIMITED


def test_user_tag_is_sanitized_like_kafka() -> None:
    assert sanitize("CN=alice smith,O=ACME") == "CN%3Dalice%20smith%2CO%3DACME"
    assert sanitize("a*b~c+d") == "a%2Ab%7Ec%2Bd"
    assert sanitize("user.name-1_x") == "user.name-1_x"
