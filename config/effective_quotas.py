"""What `kafka-quota-proxy check-config` prints: every entity's effective quotas.

Effective means after Kafka's precedence: users/alice/clients/app may take its byte rate
from users/alice and its request quota from users/<default>, and an operator reviewing a
change wants to see exactly that.
"""

from __future__ import annotations

from collections.abc import Callable

from quotas.entities import (
    BROKER_TYPES,
    BUCKETS,
    CEILING_CLASSES,
    CLUSTER_CEILINGS,
    DEFAULT,
    KAFKA_QUOTA_TYPES,
    EntityQuotas,
    QuotaEntity,
    QuotaType,
    precedence,
)
from quotas.settings import QuotaConfig
from quotas.stats import MetricConfig
from quotas.topics import client_entities

#: stands for "a user / client-id that no entity names" when resolving default entities
_UNNAMED = "\x00unnamed"


def _windows(prefix: str, config: MetricConfig) -> str:
    seconds = config.window_ms // 1000
    return f"{prefix}window.num={config.samples} {prefix}window.size.seconds={seconds}"


#: where an entity's value of a quota key comes from, when more than the file is read
Sources = Callable[[QuotaEntity, str], str | None]


def effective_quotas(config: QuotaConfig, sources: Sources | None = None) -> list[str]:
    settings = config.settings
    cache = settings.producer_id_cache
    lines = [
        _windows("quota.", settings.client),
        _windows("controller.quota.", settings.controller),
        _windows("producer.id.quota.", settings.producer_ids),
        f"producer.id.quota.cache.layer.count={cache.layer_count}"
        f" producer.id.quota.cache.false.positive.rate={cache.false_positive_rate}"
        f" producer.id.quota.cache.cleanup.scheduler.interval.ms={cache.cleanup_interval_ms}",
    ]
    # Kafka's quota types always; a guard or a ceiling's class only where an entity sets
    # it; the ceilings themselves are the brokers'
    shown = [
        t
        for t in QuotaType
        if t not in BROKER_TYPES
        and t is not QuotaType.DISK_GUARD
        and (t in KAFKA_QUOTA_TYPES or config.limits.get(t))
    ]
    if any(t in BUCKETS for t in shown):
        guards = settings.guards
        lines.append(
            f"guards.requests burst_s={guards.burst_s} max_throttle_ms={guards.max_throttle_ms}"
            + "".join(f" bursts.{name}={seconds}" for name, seconds in guards.bursts)
        )
    resolvers = {
        quota_type: EntityQuotas(client_entities(config.limits.get(quota_type, {})))
        for quota_type in shown
    }
    entities = {entity for per_type in config.limits.values() for entity in per_type}
    topics = sorted((e for e in entities if e.topic is not None), key=_topic_order)
    brokers = sorted((e for e in entities if e.broker is not None), key=_broker_order)
    entities -= {*topics, *brokers}
    if not entities:
        lines.append("no quota entities: every client is unlimited")
    width = max(len(t.key) for t in (*shown, *(BROKER_TYPES if brokers else ())))
    for entity in sorted(entities, key=_precedence):
        lines.append(str(entity))
        user = entity.user if entity.user not in (None, DEFAULT) else _UNNAMED
        client_id = entity.client_id if entity.client_id not in (None, DEFAULT) else _UNNAMED
        for quota_type, quotas in resolvers.items():
            source = quotas.entity_for(quotas.metric_tags(user, client_id))
            value = None if source is None else quotas.limits[source]
            line = _value_line(quota_type, width, source, value, sources)
            # a class key unset: not exempt, no floor (best-effort under every ceiling)
            lines.append(
                line.replace("unlimited", "none") if quota_type in CEILING_CLASSES else line
            )
    lines += _topic_quotas(config, topics, width, sources)
    lines += _ceilings(config, brokers, width, sources)
    return lines


def _ceilings(
    config: QuotaConfig, brokers: list[QuotaEntity], width: int, sources: Sources | None
) -> list[str]:
    """Each broker entity's ceilings and disk limits: its own, else the default broker's;
    the default broker's own, the cluster's ceilings (docs/ceilings.md)."""
    lines = []
    default = QuotaEntity(broker=DEFAULT)
    for entity in brokers:
        lines.append(str(entity))
        for quota_type in BROKER_TYPES:
            if entity.broker != DEFAULT and quota_type in CLUSTER_CEILINGS.values():
                continue  # the cluster's, set on the default broker alone
            limits = config.limits.get(quota_type, {})
            source = entity if entity in limits else default if default in limits else None
            value = None if source is None else limits[source]
            line = _value_line(quota_type, width, source, value, sources)
            lines.append(line.replace("unlimited", "no ceiling"))
    return lines


def _topic_quotas(
    config: QuotaConfig, topics: list[QuotaEntity], width: int, sources: Sources | None
) -> list[str]:
    """Each topic entity's byte rates: its own, else the default topic's."""
    lines = []
    default = QuotaEntity(topic=DEFAULT)
    for entity in topics:
        lines.append(str(entity))
        for quota_type in (QuotaType.PRODUCE, QuotaType.FETCH):
            limits = config.limits.get(quota_type, {})
            source = entity if entity in limits else default if default in limits else None
            value = None if source is None else limits[source]
            lines.append(_value_line(quota_type, width, source, value, sources))
    return lines


def _value_line(
    quota_type: QuotaType,
    width: int,
    source: QuotaEntity | None,
    value: float | None,
    sources: Sources | None,
) -> str:
    """One key's effective value, the entity it comes from and that entity's layer."""
    if source is None or value is None:
        return f"  {quota_type.key:<{width}}  unlimited"
    shown = int(value) if value.is_integer() else value
    line = f"  {quota_type.key:<{width}}  {shown:<12} from {source}"
    layer = sources(source, quota_type.key) if sources is not None else None
    return f"{line} ({layer})" if layer else line


def _topic_order(entity: QuotaEntity) -> tuple[bool, str]:
    return entity.topic == DEFAULT, entity.topic or ""


def _broker_order(entity: QuotaEntity) -> tuple[bool, int]:
    """By node id, the default broker last."""
    broker = entity.broker or DEFAULT
    return broker == DEFAULT, int(broker) if broker != DEFAULT else 0


def _precedence(entity: QuotaEntity) -> tuple[int, str, str]:
    """Kafka's precedence, then names."""
    return precedence(entity), entity.user or "", entity.client_id or ""
