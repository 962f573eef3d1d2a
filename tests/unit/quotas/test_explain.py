"""`explain` on a virtual clock (quotas/explain.py): the entity it names is the one the
engine charges, by KIP-55's precedence in its words; its predicted throttle is the one the
next request gets; what holds a client is said, and so is nothing."""

from __future__ import annotations

import pytest

from quotas.engine import QuotaEngine
from quotas.entities import DEFAULT, PRECEDENCE, QuotaEntity, QuotaType
from quotas.explain import Applied, Query, explain
from quotas.settings import QuotaConfig, QuotaSettings
from quotas.store import ALTERED, FILE, QuotaStore

E = QuotaEntity
#: one entity at every level of KIP-55's precedence, each a value of its own
EVERY_LEVEL = {
    E("alice", "app"): 1.0,
    E("alice", DEFAULT): 2.0,
    E("alice"): 3.0,
    E(DEFAULT, "app"): 4.0,
    E(DEFAULT, DEFAULT): 5.0,
    E(DEFAULT): 6.0,
    E(client_id="app"): 7.0,
    E(client_id=DEFAULT): 8.0,
}


def produce(answer: list[Applied]) -> Applied:
    return next(a for a in answer if a.key == QuotaType.PRODUCE.key)


@pytest.mark.parametrize("level", range(1, 9))
def test_each_level_of_precedence_is_named_when_it_is_the_most_specific_left(
    level: int,
) -> None:
    """Entities from `level` down: the one at `level` applies, and is named by its rule."""
    limits = {e: v for e, v in EVERY_LEVEL.items() if v >= level}
    config = QuotaConfig(QuotaSettings(), {QuotaType.PRODUCE: limits})
    applied = produce(explain(Query("alice", "app"), config).quotas)
    assert applied.value == level
    assert applied.rule == f"precedence {level} of 8: {PRECEDENCE[level - 1]}"
    # what the engine charges the client to is that entity's sensor
    engine = QuotaEngine(config)
    sensors = engine.produce.sensors_for("alice", "app", 0)
    assert sensors.limit == level


def test_a_user_no_entity_names_gets_the_default_that_applies_or_no_quota() -> None:
    limits = {E("alice"): 1e6, E(DEFAULT): 5e5}
    config = QuotaConfig(QuotaSettings(), {QuotaType.PRODUCE: limits})
    applied = produce(explain(Query("nobody-knows", "x"), config).quotas)
    assert (applied.entity, applied.value) == ("users/<default>", 5e5)
    assert applied.measured_as == "user=nobody-knows client-id=(every)"
    lone = QuotaConfig(QuotaSettings(), {QuotaType.PRODUCE: {E("alice"): 1e6}})
    applied = produce(explain(Query("bob", "x"), lone).quotas)
    assert applied.entity is None and applied.value is None
    assert applied.rule == "no entity of this key applies to the client: unlimited"
    fetch = next(a for a in explain(Query("bob"), lone).quotas if a.key == "consumer_byte_rate")
    assert fetch.rule == "no entity sets this key: Kafka measures nothing for it"


def test_the_source_of_a_value_is_the_file_or_kafka_configs_with_when() -> None:
    store = QuotaStore()
    store.replace(FILE, {E("alice"): {"producer_byte_rate": 1e6}})
    altered = E("alice", "app")
    store.alter_many(
        ALTERED,
        {altered: {"producer_byte_rate": 2e6}},
        {(altered, "producer_byte_rate"): 1_764_480_000_000},
    )
    assert store.set_at(altered, "producer_byte_rate") == 1_764_480_000_000
    assert store.set_at(E("alice"), "producer_byte_rate") is None
    seen = []

    def sources(entity: QuotaEntity, key: str) -> str | None:
        seen.append((entity, key))
        return store.source(entity, key)

    config = QuotaConfig(QuotaSettings(), store.limits())
    assert produce(explain(Query("alice", "app"), config, sources).quotas).source == ALTERED
    assert produce(explain(Query("alice", "web"), config, sources).quotas).source == FILE
    store.alter_many(ALTERED, {altered: {"producer_byte_rate": None}})
    assert store.set_at(altered, "producer_byte_rate") is None


def test_the_predicted_throttle_is_the_one_the_next_request_gets() -> None:
    """Exactly, on a virtual clock, at every request of a greedy producer that waits out
    each throttle: the prediction records nothing, so the sequence is the same."""
    config = QuotaConfig(QuotaSettings(), {QuotaType.PRODUCE: {E(client_id="greedy"): 1e6}})
    engine = QuotaEngine(config)
    sensors = engine.produce.sensors_for("u", "greedy", 0)
    now, compared = 0, 0
    for index in range(200):
        size = 200_000 + 1_000 * (index % 7)
        asked = Query("u", "greedy", produce_bytes=size)
        live = produce(explain(asked, config, engine=engine, now_ms=now).quotas).live
        assert live is not None
        throttle = engine.produce.record_and_get_throttle_time_ms(sensors, size, now)
        assert live.next_throttle_ms == throttle
        compared += throttle > 0
        now += max(throttle, 20)
    assert compared >= 40  # throttled answers among them, not only zeros
    live = produce(explain(Query("u", "greedy"), config, engine=engine, now_ms=now).quotas).live
    assert live is not None and live.enforced == 1e6
    # once the last throttle is waited out, the client is at its quota or under it
    assert 0 < live.rate <= 1e6 and live.throttle_ms == 0 and live.window_ms >= 10_000


def test_what_holds_a_client_is_said_and_so_is_nothing() -> None:
    config = QuotaConfig(QuotaSettings(), {QuotaType.PRODUCE: {E("alice"): 100_000.0}})
    engine = QuotaEngine(config)
    sensors = engine.produce.sensors_for("alice", "app", 0)
    quiet = explain(Query("alice", "app"), config, engine=engine, now_ms=0)
    assert quiet.holds == ["nothing holds it now"]
    assert explain(Query("alice", "app"), config).holds == [
        "nothing is known to hold it: the configuration alone, no live rates"
    ]
    throttle = engine.produce.record_and_get_throttle_time_ms(sensors, 2_000_000, 0)
    held = explain(Query("alice", "app"), config, engine=engine, now_ms=0)
    assert held.holds == [
        f"producer_byte_rate of users/alice: over its quota, held {throttle} ms more"
    ]
    # its quota is its user's: another client-id of the user is held as well
    other = explain(Query("alice", "other"), config, engine=engine, now_ms=0)
    assert other.holds == held.holds


def test_a_topic_and_an_address_are_explained_by_their_own_rules() -> None:
    store = QuotaStore()
    store.replace(
        FILE,
        {
            E(topic="orders"): {"producer_byte_rate": 2e6},
            E(topic=DEFAULT): {"producer_byte_rate": 1e6},
            E(ip=DEFAULT): {"connection_creation_rate": 10},
            E(ip="10.0.0.7"): {"connection_creation_rate": 2},
        },
    )
    config, ips = QuotaConfig(QuotaSettings(), store.limits()), store.ip_rates()
    orders = explain(Query("u", topic="orders", address="10.0.0.7"), config, ip_rates=ips)
    assert [(a.entity, a.rule) for a in orders.topic] == [
        ("topics/orders", "the topic's own entity"),
        (None, "no topic entity applies: unlimited"),
    ]
    assert [(a.entity, a.value) for a in orders.address] == [("ips/10.0.0.7", 2.0)]
    other = explain(Query("u", topic="logs", address="10.0.0.8"), config, ip_rates=ips)
    assert other.topic[0].rule == "topics/<default>: the topic has no entity of its own"
    assert other.address[0].rule == "ips/<default>: the address has no entity of its own"
    assert [(a.entity, a.value) for a in other.address] == [("ips/<default>", 10.0)]


def test_a_ceiling_says_where_the_client_stands_under_it() -> None:
    limits = {
        QuotaType.PRODUCE_CEILING: {E(broker="1"): 1_000_000.0},
        QuotaType.PRODUCE_FLOOR: {E(client_id="gold"): 300_000.0},
        QuotaType.CEILING_EXEMPT: {E(client_id="ops"): 1.0},
    }
    config = QuotaConfig(QuotaSettings(), limits)
    engine = QuotaEngine(config)
    ceiling = engine.produce_ceiling
    scope = ceiling.scope("1")
    assert scope is not None
    for at in range(0, 3000, 10):  # two greedy principals press on broker 1
        for client_id in ("gold", "best"):
            ceiling.charge(scope, ceiling.standing("u", client_id), 20_000, at)
    standings = {
        client_id: explain(Query("u", client_id), config, engine=engine, now_ms=3000).ceilings
        for client_id in ("gold", "best", "ops")
    }
    gold, best, ops = (standings[name][0] for name in ("gold", "best", "ops"))
    assert gold.scope == "broker 1" and gold.ceiling == 1_000_000.0
    assert gold.standing == "guaranteed: keeps 300000 and shares what is above it"
    assert best.standing == "best-effort, weighted by the ceiling"
    assert ops.standing.startswith("exempt")
    assert gold.allowance is not None and best.allowance is not None
    assert gold.allowance == pytest.approx(best.allowance + 300_000)
    assert ops.allowance is None
