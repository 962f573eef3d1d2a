"""Why a client is slow, or why it is not: `kafka-quota-proxy explain` (docs/explain.md).

For one (user, client-id), and a topic and a client address where asked, each quota type's
entity that applies and the rule that chose it (KIP-55's precedence, named as
quotas/entities.py names it), its value and where the value came from; and with a running
proxy's sensors, the rate now and the span it is measured over, this member's part of a
fleet's rate, the throttle owed now (how long until the client is under its quota again) and
the one a request of a given size would get; then whatever else holds it: a topic quota, a
broker's ceiling, the disk guard, a guard's bucket. Pure: the caller hands it the quotas, the
engine and the clock; it reads nothing. A KIP-546 "resolve" call was proposed for Kafka and
never shipped: Kafka answers none of this.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, Final

from quotas.ceilings import CLUSTER
from quotas.engine import QuotaEngine
from quotas.entities import (
    BUCKETS,
    CEILING_CLASSES,
    DEFAULT,
    KAFKA_QUOTA_TYPES,
    EntityQuotas,
    MetricTags,
    QuotaEntity,
    QuotaType,
    precedence_rule,
)
from quotas.managers import UNLIMITED, ClientQuotaManager, QuotaManager
from quotas.settings import QuotaConfig
from quotas.topics import client_entities

#: where an entity's value of a key came from (config/effective_quotas.py's Sources)
Sources = Callable[[QuotaEntity, str], str | None]
#: this member's own part of a fleet's rate, by quota type and metric tags (what the fleet
#: shares; a sensor it does not share is judged here alone)
HereRates = Mapping[tuple[QuotaType, MetricTags], float]

#: the ips entities' one key (Kafka's own, unprefixed)
IP_RATE: Final = "connection_creation_rate"
NO_ENTITY: Final = "no entity of this key applies to the client: unlimited"
NOT_SET: Final = "no entity sets this key: Kafka measures nothing for it"
#: a producer's record bytes in a Produce request are what its byte rate counts; a fetch's
#: response bytes what a consumer's does
NEXT_SIZES: Final = (QuotaType.PRODUCE, QuotaType.FETCH)


@dataclass(frozen=True, slots=True)
class Query:
    user: str
    client_id: str = ""
    topic: str | None = None
    #: the client's address, for the ips entities' connection_creation_rate
    address: str | None = None
    #: the size of the next Produce / Fetch to predict a throttle for (None: not asked)
    produce_bytes: int | None = None
    fetch_bytes: int | None = None


@dataclass(slots=True)
class Live:
    """What a running proxy's sensor holds for the client now."""

    #: per second as the key is (bytes, request_percentage, ...): the fleet's, as this
    #: member judges it
    rate: float
    #: the span it is measured over, ms
    window_ms: int
    #: the limit enforced here, in the key's unit: the quota, or its share while a fleet's
    #: bus is lost
    enforced: float | None
    #: owed now: the time until the client is back under its quota (0: it is)
    throttle_ms: int
    #: what a request of the asked size would be answered with now
    next_throttle_ms: int | None
    #: how much longer its connections are muted for this key (0: not held)
    held_ms: int
    #: this member's own part of `rate` while a fleet shares the sensor; None when it does not
    here: float | None


@dataclass(slots=True)
class Applied:
    """One key's answer."""

    key: str
    #: the entity that applies ("users/alice/clients/<default>"), None where none does
    entity: str | None
    #: why that entity: a rule of KIP-55's precedence, or a topic's or address's own rule
    rule: str
    value: float | None
    #: the file, or kafka-configs and when
    source: str | None
    #: who shares the sensor the client is measured in (Kafka's metric tags)
    measured_as: str
    #: how the rate is measured ("11 windows of 1 s", "a bucket of 1 s")
    window: str
    live: Live | None = None
    #: the sensor's (user, client-id) tags, "" where a level does not apply: the labels of
    #: its kafka_server_* series, and of the broker's own quota metrics
    metric_tags: tuple[str, str] | None = None


@dataclass(slots=True)
class CeilingHold:
    """A broker's (or the cluster's, or a log directory's) ceiling over the client."""

    key: str
    scope: str
    ceiling: float
    #: exempt, guaranteed (a floor) or best-effort (a weight): how the ceiling sheds it
    standing: str
    #: while the scope sheds: the client's allowance there; None while it holds nobody
    allowance: float | None = None
    rate: float | None = None
    throttle_ms: int = 0


@dataclass(slots=True)
class Explanation:
    user: str
    client_id: str
    #: the client quota types, Kafka's first
    quotas: list[Applied] = field(default_factory=list)
    #: the topic's byte rates, whoever writes or reads it
    topic: list[Applied] = field(default_factory=list)
    #: the client address's connection_creation_rate
    address: list[Applied] = field(default_factory=list)
    ceilings: list[CeilingHold] = field(default_factory=list)
    #: in plain words, what holds the client now or would hold its next request; one line
    #: saying nothing does where nothing does
    holds: list[str] = field(default_factory=list)
    #: where the numbers come from: "config" (no live rates) or the member that answered
    answered_by: str = "config"

    def as_json(self) -> dict[str, Any]:
        return asdict(self)


def explain(
    query: Query,
    config: QuotaConfig,
    sources: Sources | None = None,
    engine: QuotaEngine | None = None,
    now_ms: int = 0,
    here: HereRates | None = None,
    ip_rates: Mapping[str, float] | None = None,
) -> Explanation:
    """`config`: the quotas as configured (file and kafka-configs); `engine`: a running
    proxy's sensors, for the live part (None: resolution alone); `ip_rates`: the ips
    entities' connection_creation_rate by address or DEFAULT (QuotaStore.ip_rates)."""
    explained = Explanation(query.user, query.client_id)
    limits = config.limits
    for quota_type in _client_types(limits):
        quotas = EntityQuotas(client_entities(limits.get(quota_type, {})))
        tags = quotas.metric_tags(query.user, query.client_id)
        entity = quotas.entity_for(tags)
        value = None if entity is None else quotas.limits[entity]
        applied = Applied(
            quota_type.key,
            None if entity is None else str(entity),
            _rule(quotas, entity),
            value,
            None if entity is None or sources is None else sources(entity, quota_type.key),
            "not measured" if entity is None else _measured_as(tags, quota_type),
            _window(config, quota_type),
            metric_tags=None if entity is None else tags,
        )
        if engine is not None and quota_type not in CEILING_CLASSES:
            manager = engine.manager(quota_type) if quota_type in _MANAGED else None
            if manager is not None and manager.enabled:
                asked = _asked(query, quota_type)
                applied.live = _live(manager, tags, now_ms, asked, here)
        explained.quotas.append(applied)
    if query.topic is not None:
        explained.topic = _topic(query.topic, config, sources, engine, now_ms, query)
    if query.address is not None:
        explained.address = _address(query.address, config, ip_rates or {}, sources)
    if engine is not None:
        explained.ceilings = _ceilings(engine, query, now_ms)
    explained.holds = _holds(explained, engine is not None)
    return explained


#: the client quota types with a manager of their own in the engine
_MANAGED: Final = frozenset({*KAFKA_QUOTA_TYPES, *BUCKETS})


def _client_types(limits: Mapping[QuotaType, Mapping[QuotaEntity, float]]) -> list[QuotaType]:
    """Kafka's quota types always; the proxy's keys of users and client-ids where an entity
    sets them."""
    own_keys = (*BUCKETS, QuotaType.CONNECTIONS, *CEILING_CLASSES)
    return [
        quota_type
        for quota_type in QuotaType
        if quota_type in KAFKA_QUOTA_TYPES
        or (quota_type in own_keys and client_entities(limits.get(quota_type, {})))
    ]


def _rule(quotas: EntityQuotas, entity: QuotaEntity | None) -> str:
    if entity is not None:
        return precedence_rule(entity)
    return NOT_SET if not quotas.levels_enabled else NO_ENTITY


def _measured_as(tags: MetricTags, quota_type: QuotaType) -> str:
    """Who shares the sensor: Kafka's metric tags, which clients with equal tags share."""
    user, client_id = tags
    if quota_type is QuotaType.CONNECTIONS:
        return f"user={user or '(every)'} client-id={client_id or '(every)'}: its open connections"
    return f"user={user or '(every)'} client-id={client_id or '(every)'}"


def _window(config: QuotaConfig, quota_type: QuotaType) -> str:
    settings = config.settings
    if quota_type in CEILING_CLASSES:
        return "under every ceiling it meets"
    if quota_type is QuotaType.CONNECTIONS:
        return "open connections, counted"
    if quota_type in BUCKETS:
        guards = settings.guards.windows(quota_type)
        return f"a bucket of {guards.samples * guards.window_ms / 1000:g} s of its rate"
    if quota_type is QuotaType.CONTROLLER_MUTATION:
        windows = settings.controller
        return f"a bucket of {windows.samples} windows of {windows.window_ms / 1000:g} s"
    windows = settings.producer_ids if quota_type is QuotaType.PRODUCER_IDS else settings.client
    return f"{windows.samples} windows of {windows.window_ms / 1000:g} s"


def _asked(query: Query, quota_type: QuotaType) -> int | None:
    if quota_type is QuotaType.PRODUCE:
        return query.produce_bytes
    if quota_type is QuotaType.FETCH:
        return query.fetch_bytes
    return None


def _live(
    manager: QuotaManager,
    tags: MetricTags,
    now_ms: int,
    asked: int | None,
    here: HereRates | None,
) -> Live:
    """A sensor's state now, measured as a request would measure it. A client without
    sensors here has used nothing here in the last hour: it is judged on the sensors it
    would get, which are not kept."""
    sensors = manager.find(tags)
    if sensors is None:
        fresh = manager.unseen(tags, now_ms)
        config = manager.rate_config
        rate, window_ms, throttle_ms, held_ms = 0.0, config.samples * config.window_ms, 0, 0
    else:
        fresh = sensors
        rate, window_ms = sensors.rate.measure_with_window(manager.rate_config, now_ms)
        throttle_ms = manager.throttle_time_ms(sensors, now_ms)
        held_ms = max(sensors.held_until_ms - now_ms, 0)
    next_ms = None
    if asked is not None and isinstance(manager, ClientQuotaManager):
        next_ms = manager.throttle_if_recorded(fresh, asked, now_ms)
    enforced = None if fresh.limit == UNLIMITED else fresh.limit
    shared = None if here is None else here.get((manager.quota_type, tags))
    return Live(rate, window_ms, enforced, throttle_ms, next_ms, held_ms, shared)


def _topic(
    topic: str,
    config: QuotaConfig,
    sources: Sources | None,
    engine: QuotaEngine | None,
    now_ms: int,
    query: Query,
) -> list[Applied]:
    """A topic's byte rates: its own entity, else the default topic's."""
    answers = []
    managers = {} if engine is None else {m.quota_type: m for m in engine.topic_managers()}
    for quota_type in NEXT_SIZES:
        limits = config.limits.get(quota_type, {})
        own, default = QuotaEntity(topic=topic), QuotaEntity(topic=DEFAULT)
        applied = _own_or_default(quota_type.key, limits, own, default, "topic", sources)
        applied.measured_as = f"topic={topic}, every client together"
        applied.window = _window(config, quota_type)
        manager = managers.get(quota_type)
        if manager is not None and applied.entity is not None:
            asked = _asked(query, quota_type)
            applied.live = _live(manager, (topic, ""), now_ms, asked, None)
        answers.append(applied)
    return answers


def _address(
    address: str, config: QuotaConfig, ip_rates: Mapping[str, float], sources: Sources | None
) -> list[Applied]:
    """The address's connection_creation_rate (KIP-612): its own ips entity, else
    ips/<default>."""
    limits = {QuotaEntity(ip=ip): rate for ip, rate in ip_rates.items()}
    own, default = QuotaEntity(ip=address), QuotaEntity(ip=DEFAULT)
    applied = _own_or_default(IP_RATE, limits, own, default, "address", sources)
    applied.measured_as = f"ip={address}, every principal connecting from it"
    applied.window = _window(config, QuotaType.PRODUCE)  # the client quota windows
    return [applied]


def _own_or_default(
    key: str,
    limits: Mapping[QuotaEntity, float],
    own: QuotaEntity,
    default: QuotaEntity,
    kind: str,
    sources: Sources | None,
) -> Applied:
    """A topic's or an address's key: its own entity, else its type's default entity."""
    if own in limits:
        entity, rule = own, f"the {kind}'s own entity"
    elif default in limits:
        entity, rule = default, f"{default}: the {kind} has no entity of its own"
    else:
        return Applied(key, None, f"no {kind} entity applies: unlimited", None, None, "", "")
    source = None if sources is None else sources(entity, key)
    return Applied(key, str(entity), rule, limits[entity], source, "", "")


def _ceilings(engine: QuotaEngine, query: Query, now_ms: int) -> list[CeilingHold]:
    """Each scope with a ceiling this process has seen use of, and where the client
    stands under it."""
    holds = []
    for manager in engine.ceilings():
        if not manager.enabled and not any(True for _ in manager.scopes()):
            continue
        standing = manager.standing(query.user, query.client_id)
        if standing.exempt:
            how = "exempt (kafka-quota-proxy.ceiling_exempt): never held, its use counts"
        elif standing.floor:
            how = f"guaranteed: keeps {standing.floor:g} and shares what is above it"
        else:
            weight = "the ceiling" if standing.weight is None else f"{standing.weight:g}"
            how = f"best-effort, weighted by {weight}"
        for scope, ceiling in manager.scopes():
            share = ceiling.shares.get(standing.tags)
            hold = CeilingHold(manager.quota_type.key, _scope_name(scope), ceiling.limit, how)
            if share is not None and not math.isinf(ceiling.level) and not standing.exempt:
                sensors = share[0]
                hold.allowance = sensors.limit
                hold.rate = sensors.rate.measure(manager.rate_config, now_ms)
                hold.throttle_ms = manager.throttle_time_ms(sensors, now_ms)
            holds.append(hold)
    return holds


def _scope_name(scope: str) -> str:
    if scope == CLUSTER:
        return "the cluster"
    broker, _, log_dir = scope.partition(":")
    return f"broker {broker}" + (f", log directory {log_dir}" if log_dir else "")


def _holds(explained: Explanation, live: bool) -> list[str]:
    """What holds the client, in plain words, the longest first."""
    found: list[tuple[int, str]] = []
    for where, answers in (("", explained.quotas), ("topic ", explained.topic)):
        for applied in answers:
            state = applied.live
            if state is None:
                continue
            name = f"{where}{applied.key} of {applied.entity}"
            longest = max(state.throttle_ms, state.held_ms)
            if longest:
                found.append((longest, f"{name}: over its quota, held {longest} ms more"))
            elif state.next_throttle_ms:
                found.append(
                    (
                        state.next_throttle_ms,
                        f"{name}: the next request of the size asked would be throttled "
                        f"{state.next_throttle_ms} ms",
                    )
                )
    for hold in explained.ceilings:
        if hold.throttle_ms:
            found.append(
                (
                    hold.throttle_ms,
                    f"{hold.key} of {hold.scope}: over its allowance of {hold.allowance:g} "
                    f"there, held {hold.throttle_ms} ms more",
                )
            )
    if not found:
        if not live:
            return ["nothing is known to hold it: the configuration alone, no live rates"]
        return ["nothing holds it now"]
    return [line for _, line in sorted(found, key=lambda item: -item[0])]
