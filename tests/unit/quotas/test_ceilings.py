"""A broker's ceilings on a virtual clock: simulated clients that honour throttle_time_ms, as
Kafka's clients do, each sending its demand in 5 ms requests; what each got, exactly."""

from __future__ import annotations

import heapq
import math
from collections.abc import Mapping

import pytest

from config.effective_quotas import effective_quotas
from quotas.ceilings import CLUSTER, MAX_THROTTLE_MS, NO_LOAD, CeilingManager, Load
from quotas.entities import DEFAULT, QuotaEntity, QuotaType
from quotas.managers import UNLIMITED
from quotas.settings import QuotaConfig, QuotaSettings
from quotas.store import MATCH_ANY, QuotaStore
from quotas.validation import QuotaError

CEILING = 1_000_000.0
#: a request every this many ms while not throttled
PERIOD_MS = 5
Limits = Mapping[QuotaType, Mapping[QuotaEntity, float]]


def produce_ceiling(limits: Limits) -> CeilingManager:
    return CeilingManager(
        QuotaType.PRODUCE_CEILING, limits, QuotaType.PRODUCE_FLOOR, QuotaType.PRODUCE, 1024.0
    )


def run(
    manager: CeilingManager,
    demands: Mapping[str, tuple[int, float, int, int]],
    seconds: int,
) -> dict[int, dict[str, float]]:
    """Each user: (broker, bytes per second, from s, until s); what each sent, per second,
    in every 10 s window."""
    queue = [(start * 1000, user) for user, (_, _, start, _) in demands.items()]
    heapq.heapify(queue)
    windows: dict[int, dict[str, float]] = {}
    while queue:
        now, user = heapq.heappop(queue)
        broker, rate, _, until = demands[user]
        if now >= min(until, seconds) * 1000:
            continue
        size = rate * PERIOD_MS / 1000
        throttle = 0
        ceiling = manager.scope(str(broker))
        if ceiling is not None:
            _, throttle = manager.charge(ceiling, manager.standing(user, "app"), size, now)
        sent = windows.setdefault(now // 10_000, dict.fromkeys(demands, 0.0))
        sent[user] += size / 10
        heapq.heappush(queue, (now + max(PERIOD_MS, throttle), user))
    return windows


def near(value: float, expected: float, within: float = 0.01) -> bool:
    return abs(value - expected) <= expected * within


def test_an_exempt_a_guaranteed_and_best_effort_principals_share_one_ceiling() -> None:
    """The issue's six: the exempt one unthrottled, the guaranteed one its floor and an
    equal share above it, the greedy best-effort ones equal shares of the rest, the light one
    all it asks; the broker at its ceiling in every 10 s window once settled."""
    manager = produce_ceiling(
        {
            QuotaType.PRODUCE_CEILING: {QuotaEntity(broker="1"): CEILING},
            QuotaType.CEILING_EXEMPT: {QuotaEntity(user="ops"): 1},
            QuotaType.PRODUCE_FLOOR: {QuotaEntity(user="gold"): 300_000},
        }
    )
    greedy = 2_000_000.0
    demands = {
        "ops": (1, 200_000.0, 0, 120),
        "gold": (1, greedy, 0, 120),
        "b1": (1, greedy, 0, 120),
        "b2": (1, greedy, 0, 120),
        "b3": (1, greedy, 0, 120),
        "light": (1, 50_000.0, 0, 120),
    }
    windows = run(manager, demands, 120)
    # ops 200k, light 50k: 750k left; gold keeps 300k, and 450k are shared by four
    share = (CEILING - 200_000 - 50_000 - 300_000) / 4
    for window in range(3, 12):
        sent = windows[window]
        assert near(sum(sent.values()), CEILING), (window, sent)
        assert sent["ops"] == pytest.approx(200_000)
        assert sent["light"] == pytest.approx(50_000)
        assert near(sent["gold"], 300_000 + share), (window, sent)
        for user in ("b1", "b2", "b3"):
            assert near(sent[user], share), (window, sent)


def test_best_effort_shares_follow_quotas_and_the_ceiling_where_none() -> None:
    """Weights are the principals' own producer_byte_rate; one without weighs as the
    ceiling. A principal that leaves frees its share within seconds."""
    manager = produce_ceiling(
        {
            QuotaType.PRODUCE_CEILING: {QuotaEntity(broker=DEFAULT): CEILING},
            QuotaType.PRODUCE: {
                QuotaEntity(user="big"): 300_000,
                QuotaEntity(user="small"): 100_000,
            },
        }
    )
    demands = {
        "big": (7, 2_000_000.0, 0, 120),
        "small": (7, 2_000_000.0, 0, 120),
        "free": (7, 2_000_000.0, 20, 60),
        "light": (7, 150_000.0, 0, 120),
    }
    windows = run(manager, demands, 120)
    left = CEILING - 150_000
    weights = {"big": 300_000.0, "small": 100_000.0, "free": CEILING}
    for window in (3, 4, 5):
        sent = windows[window]
        total = sum(weights.values())
        for user, weight in weights.items():
            assert near(sent[user], left * weight / total, 0.02), (window, sent)
    for window in range(8, 12):  # "free" left at 60 s
        sent = windows[window]
        assert near(sum(sent.values()), CEILING), (window, sent)
        assert near(sent["big"], left * 0.75, 0.02), sent
        assert near(sent["small"], left * 0.25, 0.02), sent


def test_other_brokers_and_a_broker_under_its_ceiling_hold_nobody() -> None:
    manager = produce_ceiling({QuotaType.PRODUCE_CEILING: {QuotaEntity(broker="1"): CEILING}})
    assert manager.scope("2") is None
    demands = {"a": (1, 400_000.0, 0, 30), "b": (1, 400_000.0, 0, 30), "c": (2, 5e6, 0, 30)}
    windows = run(manager, demands, 30)
    for sent in windows.values():
        assert sent["a"] == pytest.approx(400_000) and sent["b"] == pytest.approx(400_000)
        assert sent["c"] == pytest.approx(5e6)
    ceiling = manager.scope("1")
    assert ceiling is not None and math.isinf(ceiling.level)


def test_floors_beyond_the_ceiling_leave_best_effort_its_minimum() -> None:
    """Floors are promises the ceiling keeps: where exempt use and floors take it all, a
    best-effort principal is held to the minimum, never to nothing."""
    manager = produce_ceiling(
        {
            QuotaType.PRODUCE_CEILING: {QuotaEntity(broker="1"): CEILING},
            QuotaType.PRODUCE_FLOOR: {QuotaEntity(user="gold"): 1_200_000},
        }
    )
    windows = run(manager, {"gold": (1, 2e6, 0, 60), "b": (1, 2e6, 0, 60)}, 60)
    sent = windows[5]
    assert sent["gold"] >= 1_200_000
    assert sent["b"] == pytest.approx(manager.minimum, rel=0.05)


def test_a_reload_keeps_a_scope_and_a_ceiling_removed_drops_it() -> None:
    limits: dict[QuotaType, dict[QuotaEntity, float]] = {
        QuotaType.PRODUCE_CEILING: {QuotaEntity(broker="1"): CEILING}
    }
    manager = produce_ceiling(limits)
    run(manager, {"a": (1, 2e6, 0, 10), "b": (1, 2e6, 0, 10)}, 10)
    ceiling = manager.scope("1")
    assert ceiling is not None and not math.isinf(ceiling.level)
    limits[QuotaType.CEILING_EXEMPT] = {QuotaEntity(user="a"): 1}
    manager.update_classes(limits)
    assert manager.scope("1") is ceiling
    assert manager.standing("a", "app").exempt and not manager.standing("b", "app").exempt
    manager.update_classes({})
    assert not manager.enabled and manager.scope("1") is None


def test_a_principal_is_one_share_per_quota_entity() -> None:
    """Clients that share a quota's sensor share one share of the ceiling, as Kafka shares
    the sensor; one without any entity is its client-id's."""
    manager = produce_ceiling(
        {
            QuotaType.PRODUCE_CEILING: {QuotaEntity(broker="1"): CEILING},
            QuotaType.PRODUCE: {QuotaEntity(user="alice"): 100_000},
        }
    )
    assert manager.standing("alice", "x").tags == manager.standing("alice", "y").tags
    assert manager.standing("bob", "x").tags == ("bob", "")
    assert manager.standing("bob", "x").weight is None
    alone = produce_ceiling({QuotaType.PRODUCE_CEILING: {QuotaEntity(broker="1"): CEILING}})
    assert alone.standing("bob", "x").tags == ("bob", "x")
    ceiling = manager.scope("1")
    assert ceiling is not None
    sensors, throttle = manager.charge(ceiling, manager.standing("bob", "x"), 10.0, 0)
    assert throttle == 0 and sensors.limit == UNLIMITED


def test_two_members_exchanging_loads_hold_the_ceiling_as_one() -> None:
    """The six principals split over two members, each member told the other's load every
    250 ms (a fleet's sync interval): the same shares as one process gives."""
    limits: Limits = {
        QuotaType.PRODUCE_CEILING: {QuotaEntity(broker="1"): CEILING},
        QuotaType.CEILING_EXEMPT: {QuotaEntity(user="ops"): 1.0},
        QuotaType.PRODUCE_FLOOR: {QuotaEntity(user="gold"): 300_000.0},
    }
    members = (produce_ceiling(limits), produce_ceiling(limits))
    served = {"ops": 0, "gold": 0, "b1": 0, "b2": 1, "b3": 1, "light": 1}
    demand = {user: 2_000_000.0 for user in served} | {"ops": 200_000.0, "light": 50_000.0}
    queue = [(0, user) for user in served] + [(0, "")]  # "": the bus, every 250 ms
    heapq.heapify(queue)
    sent: dict[int, dict[str, float]] = {}
    while queue:
        now, user = heapq.heappop(queue)
        if now >= 120_000:
            continue
        if not user:
            scopes = [m.scope("1") for m in members]
            loads = [m.load(s, now) for m, s in zip(members, scopes, strict=True) if s]
            for scope, other in zip(scopes, reversed(loads), strict=True):
                assert scope is not None
                scope.others = other
            heapq.heappush(queue, (now + 250, ""))
            continue
        manager = members[served[user]]
        ceiling = manager.scope("1")
        assert ceiling is not None
        size = demand[user] * PERIOD_MS / 1000
        _, throttle = manager.charge(ceiling, manager.standing(user, "app"), size, now)
        window = sent.setdefault(now // 10_000, dict.fromkeys(served, 0.0))
        window[user] += size / 10
        heapq.heappush(queue, (now + max(PERIOD_MS, throttle), user))
    share = (CEILING - 200_000 - 50_000 - 300_000) / 4
    for index in range(3, 12):
        got = sent[index]
        assert near(sum(got.values()), CEILING, 0.02), (index, got)
        assert near(got["gold"], 300_000 + share, 0.05), (index, got)
        for user in ("b1", "b2", "b3"):
            assert near(got[user], share, 0.05), (index, got)


def test_a_level_collapsed_by_another_members_late_news_recovers_within_a_throttle() -> None:
    """A member that has not yet heard the broker is over lets its principals run, and its
    load leaves this member's nothing: their allowances fall to the minimum while their
    large requests run up debts. Once that member holds its own, this member's principal
    is back at the whole ceiling within one longest throttle, not owing its debt for ages."""
    manager = produce_ceiling({QuotaType.PRODUCE_CEILING: {QuotaEntity(broker="1"): CEILING}})
    ceiling = manager.scope("1")
    assert ceiling is not None
    standing = manager.standing("greedy", "app")
    now, sent = 0, 0.0
    size = 500_000.0  # librdkafka gathers this much while muted
    while now < 40_000:
        ceiling.others = Load(3 * CEILING, 3 * CEILING, 0.0) if now < 5_000 else NO_LOAD
        _, throttle = manager.charge(ceiling, standing, size, now)
        if now >= 5_000 + MAX_THROTTLE_MS + 10_000:
            sent += size
        now += max(PERIOD_MS, throttle)
    settled_s = (40_000 - 5_000 - MAX_THROTTLE_MS - 10_000) / 1000
    assert near(sent / settled_s, CEILING, 0.06)


def test_check_config_shows_each_brokers_ceilings_and_every_class() -> None:
    limits: Limits = {
        QuotaType.PRODUCE_CEILING: {QuotaEntity(broker="1"): 6e6},
        QuotaType.FETCH_CEILING: {QuotaEntity(broker=DEFAULT): 9e6},
        QuotaType.CLUSTER_PRODUCE_CEILING: {QuotaEntity(broker=DEFAULT): 12e6},
        QuotaType.CEILING_EXEMPT: {QuotaEntity(client_id="ops"): 1.0},
    }
    lines = effective_quotas(QuotaConfig(QuotaSettings(), limits), lambda entity, key: "file")
    width = len("kafka-quota-proxy.cluster_request_ceiling") + 2

    def line(key: str, shown: str) -> str:
        return f"  {'kafka-quota-proxy.' + key:<{width}}{shown}"

    own = line("produce_ceiling", "6000000      from brokers/1 (file)")
    fetch = line("fetch_ceiling", "9000000      from brokers/<default> (file)")
    cluster = line("cluster_produce_ceiling", "12000000     from brokers/<default> (file)")
    none = "no ceiling"
    at = lines.index("brokers/1")
    assert lines[at : at + 6] == [
        "brokers/1",
        own,
        fetch,
        line("request_ceiling", none),
        line("disk_soft_limit_bytes", none),
        line("disk_hard_limit_bytes", none),
    ]
    at = lines.index("brokers/<default>")
    assert lines[at : at + 9] == [
        "brokers/<default>",
        line("produce_ceiling", none),
        fetch,
        line("request_ceiling", none),
        cluster,
        line("cluster_fetch_ceiling", none),
        line("cluster_request_ceiling", none),
        line("disk_soft_limit_bytes", none),
        line("disk_hard_limit_bytes", none),
    ]
    at = lines.index("clients/ops")
    assert line("ceiling_exempt", "1            from clients/ops (file)") in lines[at:]
    assert not any("guards.requests" in text for text in lines)


def test_a_cluster_ceiling_holds_every_broker_together() -> None:
    """Set on the default broker entity: two brokers without a ceiling of their own, four
    greedy principals spread over them, held together to the cluster's ceiling; broker 1's
    own ceiling holds within it as well."""
    manager = produce_ceiling(
        {
            QuotaType.CLUSTER_PRODUCE_CEILING: {QuotaEntity(broker=DEFAULT): CEILING},
            QuotaType.PRODUCE_CEILING: {QuotaEntity(broker="1"): CEILING / 4},
        }
    )
    placed = {"a": "1", "b": "1", "c": "2", "d": "2"}
    queue = [(0, user) for user in placed]
    heapq.heapify(queue)
    sent: dict[int, dict[str, float]] = {}
    while queue:
        now, user = heapq.heappop(queue)
        if now >= 60_000:
            continue
        size = 2e6 * PERIOD_MS / 1000
        throttle = 0
        for scope in (placed[user], CLUSTER):
            ceiling = manager.scope(scope)
            if ceiling is not None:
                standing = manager.standing(user, "app")
                throttle = max(throttle, manager.charge(ceiling, standing, size, now)[1])
        window = sent.setdefault(now // 10_000, dict.fromkeys(placed, 0.0))
        window[user] += size / 10
        heapq.heappush(queue, (now + max(PERIOD_MS, throttle), user))
    for index in range(2, 6):
        got = sent[index]
        assert near(sum(got.values()), CEILING, 0.03), (index, got)
        assert near(got["a"] + got["b"], CEILING / 4, 0.03), (index, got)


def test_broker_entities_are_described_alone_and_altered_as_any_entity() -> None:
    """What `kafka-quota-proxy quotas --entity-type brokers` asks: the store describes
    broker entities by a filter of their own, never combined with another."""
    store = QuotaStore()
    store.replace(
        "file",
        {
            QuotaEntity(broker="1"): {"kafka-quota-proxy.produce_ceiling": 6e6},
            QuotaEntity(user="alice"): {"producer_byte_rate": 10.0},
        },
    )
    assert store.describe([("broker", MATCH_ANY, None)]) == {
        QuotaEntity(broker="1"): {"kafka-quota-proxy.produce_ceiling": 6e6}
    }
    with pytest.raises(QuotaError, match="A broker filter component is not used with another"):
        store.describe([("broker", MATCH_ANY, None), ("user", MATCH_ANY, None)])
