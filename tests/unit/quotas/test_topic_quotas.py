"""Topic quota entities: what the model accepts, and a topic's sensors and limits."""

from __future__ import annotations

import pytest

from config.effective_quotas import effective_quotas
from quotas.entities import DEFAULT, QuotaEntity, QuotaType
from quotas.managers import UNLIMITED
from quotas.settings import QuotaConfig, QuotaSettings
from quotas.stats import MetricConfig
from quotas.store import MATCH_ANY, QuotaStore
from quotas.topics import TopicQuotaManager
from quotas.validation import QuotaError, entity_of, pairs_of, validate_value

WINDOWS = MetricConfig(samples=2, window_ms=1000)


def test_a_topic_entity_by_name_or_default() -> None:
    assert entity_of([("topic", "orders")]) == QuotaEntity(topic="orders")
    assert entity_of([("topic", None)]) == QuotaEntity(topic=DEFAULT)
    assert pairs_of(QuotaEntity(topic="orders")) == [("topic", "orders")]
    assert str(QuotaEntity(topic="orders")) == "topics/orders"


@pytest.mark.parametrize(
    ("pairs", "message"),
    [
        ([("topic", "orders"), ("user", "alice")], "a topic entity is not combined"),
        ([("topic", "no way")], "Invalid topic name no way"),
        ([("topic", "")], "Empty topic not supported"),
    ],
)
def test_what_a_topic_entity_cannot_be(pairs: list[tuple[str, str | None]], message: str) -> None:
    with pytest.raises(QuotaError, match=message):
        entity_of(pairs)


def test_a_topic_has_byte_rates_only() -> None:
    validate_value(QuotaEntity(topic="t"), "producer_byte_rate", 1024)
    with pytest.raises(QuotaError, match="Invalid configuration key request_percentage"):
        validate_value(QuotaEntity(topic="t"), "request_percentage", 50)


def test_a_topic_s_own_limit_else_the_default_s_each_a_budget_of_its_own() -> None:
    limits = {QuotaEntity(topic="orders"): 1000.0, QuotaEntity(topic=DEFAULT): 500.0}
    manager = TopicQuotaManager(QuotaType.PRODUCE, WINDOWS, limits)
    orders, audit, logs = (manager.sensors_of_topic(t, 0) for t in ("orders", "audit", "logs"))
    assert orders is not None and audit is not None and logs is not None
    assert (orders.limit, audit.limit, logs.limit) == (1000.0, 500.0, 500.0)
    assert audit is not logs
    manager.update_limits({QuotaEntity(topic="orders"): 2000.0})
    assert (orders.limit, audit.limit) == (2000.0, UNLIMITED)
    assert manager.sensors_of_topic("metrics", 0) is None  # not limited: nothing recorded


def test_topic_quotas_stand_apart_from_client_quotas_in_the_store() -> None:
    store = QuotaStore()
    store.replace(
        "file",
        {
            QuotaEntity(topic="orders"): {"producer_byte_rate": 1000.0},
            QuotaEntity(user="alice"): {"producer_byte_rate": 10.0},
        },
    )
    assert store.describe([("topic", MATCH_ANY, None)]) == {
        QuotaEntity(topic="orders"): {"producer_byte_rate": 1000.0}
    }
    with pytest.raises(QuotaError, match="A topic filter component is not used with another"):
        store.describe([("topic", MATCH_ANY, None), ("user", MATCH_ANY, None)])


def test_check_config_shows_each_topic_s_values_and_where_they_come_from() -> None:
    limits = {
        QuotaType.PRODUCE: {QuotaEntity(topic="orders"): 1048576.0},
        QuotaType.FETCH: {QuotaEntity(topic=DEFAULT): 2097152.0},
    }
    lines = effective_quotas(QuotaConfig(QuotaSettings(), limits), lambda entity, key: "file")
    at = lines.index("topics/orders")
    assert lines[at : at + 3] == [
        "topics/orders",
        "  producer_byte_rate        1048576      from topics/orders (file)",
        "  consumer_byte_rate        2097152      from topics/<default> (file)",
    ]
