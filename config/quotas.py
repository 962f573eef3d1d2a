"""The quota parts of the config file: Kafka's broker-level quota settings and the entities.

Entities use Kafka's entity model as tables, so `kafka-configs --entity-type users
--entity-name alice --entity-type clients --entity-name app` becomes
`[users.alice.clients.app]`, and `--entity-default` becomes `"<default>"`. Every problem is
reported with the entity and the key, in Kafka's path form (users/alice/clients/app).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from quotas.connections import canonical_ip
from quotas.entities import DEFAULT, QUOTA_KEYS, QuotaEntity, QuotaType
from quotas.settings import ProducerIdCacheSettings, QuotaSettings
from quotas.stats import MetricConfig
from quotas.validation import QuotaError, keys_for, legal_broker, legal_topic, validate_value

_WINDOW_KEYS = {
    "quota.window.num": ("client", "samples"),
    "quota.window.size.seconds": ("client", "window"),
    "controller.quota.window.num": ("controller", "samples"),
    "controller.quota.window.size.seconds": ("controller", "window"),
    "producer.id.quota.window.num": ("producer_ids", "samples"),
    "producer.id.quota.window.size.seconds": ("producer_ids", "window"),
}
_CACHE_KEYS = {
    "producer.id.quota.cache.cleanup.scheduler.interval.ms": "cleanup_interval_ms",
    "producer.id.quota.cache.layer.count": "layer_count",
    "producer.id.quota.cache.false.positive.rate": "false_positive_rate",
}
BROKER_KEYS = (*_WINDOW_KEYS, *_CACHE_KEYS)


def flatten_dotted(table: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """`quota.window.num = 11` written unquoted is a nested table in TOML; read it back."""
    flat: dict[str, Any] = {}
    for key, value in table.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            flat.update(flatten_dotted(value, f"{name}."))
        else:
            flat[name] = value
    return flat


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def parse_broker_settings(section: Mapping[str, Any], problems: list[str]) -> QuotaSettings:
    windows = {
        "client": [11, 1],
        "controller": [11, 1],
        "producer_ids": [11, 3600],
    }
    cache: dict[str, Any] = {}
    for key, value in flatten_dotted(section).items():
        where = f"[broker] key '{key}'"
        if key in _WINDOW_KEYS:
            if not isinstance(value, int) or isinstance(value, bool):
                problems.append(f"{where}: expected an integer, got {value!r}")
            elif value < 1:
                problems.append(f"{where}: must be >= 1, got {value}")
            else:
                group, part = _WINDOW_KEYS[key]
                windows[group][0 if part == "samples" else 1] = value
        elif key in _CACHE_KEYS:
            field = _CACHE_KEYS[key]
            if field == "false_positive_rate":
                if not _is_number(value) or not 0 < value < 1:
                    problems.append(f"{where}: expected a number between 0 and 1, got {value!r}")
                    continue
            elif not isinstance(value, int) or isinstance(value, bool) or value < 1:
                problems.append(f"{where}: expected an integer >= 1, got {value!r}")
                continue
            elif field == "layer_count" and value < 2:
                # with one layer an id expires at the moment it would be carried over, so a
                # producer that never stops would be charged again every window
                problems.append(f"{where}: expected at least 2 layers, got {value}")
                continue
            cache[field] = value
        else:
            problems.append(f"{where}: unknown key (known: {', '.join(BROKER_KEYS)})")
    configs = {
        group: MetricConfig(samples=samples, window_ms=seconds * 1000)
        for group, (samples, seconds) in windows.items()
    }
    return QuotaSettings(
        client=configs["client"],
        controller=configs["controller"],
        producer_ids=configs["producer_ids"],
        producer_id_cache=ProducerIdCacheSettings(**cache),
    )


def parse_entities(
    users: Any, clients: Any, problems: list[str]
) -> dict[QuotaType, dict[QuotaEntity, float]]:
    """[users.<u>] with optional [users.<u>.clients.<c>], and [clients.<c>]."""
    limits: dict[QuotaType, dict[QuotaEntity, float]] = {}
    for user, table in _entity_tables(users, "users", problems):
        nested = table.pop("clients", None) if isinstance(table, dict) else None
        _parse_entity(QuotaEntity(user=user), table, limits, problems)
        for client_id, client_table in _entity_tables(nested, f"users/{user}/clients", problems):
            _parse_entity(QuotaEntity(user, client_id), client_table, limits, problems)
    for client_id, table in _entity_tables(clients, "clients", problems):
        _parse_entity(QuotaEntity(client_id=client_id), table, limits, problems)
    return limits


def _entity_tables(raw: Any, where: str, problems: list[str]) -> list[tuple[str, Any]]:
    if raw is None:
        return []
    if not isinstance(raw, dict):
        problems.append(f"{where}: expected a table of entities, got {raw!r}")
        return []
    return list(raw.items())


def _parse_entity(
    entity: QuotaEntity,
    table: Any,
    limits: dict[QuotaType, dict[QuotaEntity, float]],
    problems: list[str],
) -> None:
    if not isinstance(table, dict):
        problems.append(f"{entity}: expected a table of quotas, got {table!r}")
        return
    # a guard's key, kafka-quota-proxy.<api>_rate, is a dotted key in TOML
    for key, value in flatten_dotted(table).items():
        where = f"{entity}: key '{key}'"
        quota = _quota_value(entity, key, value, where, problems)
        if quota is not None:
            limits.setdefault(QUOTA_KEYS[key], {})[entity] = quota


def _quota_value(
    entity: QuotaEntity, key: str, value: Any, where: str, problems: list[str]
) -> float | None:
    """A value the TOML gives as a finite number, validated by Kafka's rules and messages
    (quotas/validation.py); None, with the problem said, otherwise."""
    if not _is_number(value):
        problems.append(f"{where}: expected a number, got {value!r}")
        return None
    if not math.isfinite(value):
        problems.append(f"{where}: expected a finite number, got {value}")
        return None
    try:
        validate_value(entity, key, float(value))
    except QuotaError as exc:
        problems.append(f"{where}: {exc.message}{_hint(entity, key)}")
        return None
    return float(value)


def _hint(entity: QuotaEntity, key: str) -> str:
    """What an operator needs beside Kafka's message for a key the entity cannot carry."""
    keys = keys_for(entity)
    if key in keys:
        return ""
    if key == "producer_ids_rate":
        return f" (producer_ids_rate applies to users/<user> and users/{DEFAULT} only, KIP-936)"
    extra = " or a 'clients' table" if entity.user is not None and entity.client_id is None else ""
    return f" (known: {', '.join(keys)}{extra})"


def parse_ips(raw: Any, problems: list[str]) -> dict[str, float]:
    """[ips."<address>"] and [ips."<default>"]: `kafka-configs --entity-type ips`, whose one
    quota is connection_creation_rate (connections per second, an integer in Kafka)."""

    def address(name: str) -> str | None:
        return name if name == DEFAULT else canonical_ip(name)

    rates: dict[str, float] = {}
    for entity, _key, value in _named_quotas(raw, "ips", address, "an IP address", problems):
        assert entity.ip is not None
        rates[entity.ip] = value
    return rates


def parse_topics(raw: Any, problems: list[str]) -> dict[str, dict[str, float]]:
    """[topics."<topic>"] and [topics."<default>"]: a topic's producer_byte_rate and
    consumer_byte_rate, whoever writes or reads it (the proxy's own entity, KIP-1010's ask);
    `<default>` gives every topic without its own entry a budget of its own."""

    def topic(name: str) -> str | None:
        return name if name == DEFAULT or legal_topic(name) else None

    legal = "a legal topic name (up to 249 of a-z A-Z 0-9 . _ -)"
    quotas: dict[str, dict[str, float]] = {}
    for entity, key, value in _named_quotas(raw, "topics", topic, legal, problems):
        assert entity.topic is not None
        quotas.setdefault(entity.topic, {})[key] = value
    return quotas


def parse_brokers(raw: Any, problems: list[str]) -> dict[QuotaType, dict[QuotaEntity, float]]:
    """[brokers."<node id>"] and [brokers."<default>"]: a broker's ceilings (the proxy's own
    keys, as `kafka-configs --entity-type brokers` names a broker); `<default>` gives every
    broker without its own entry a ceiling of its own, as Kafka's default broker config does."""

    def broker(name: str) -> str | None:
        return name if name == DEFAULT or legal_broker(name) else None

    limits: dict[QuotaType, dict[QuotaEntity, float]] = {}
    for entity, key, value in _named_quotas(raw, "brokers", broker, "a node id", problems):
        limits.setdefault(QUOTA_KEYS[key], {})[entity] = value
    return limits


def disk_limit_problems(limits: Mapping[QuotaType, Mapping[QuotaEntity, float]]) -> list[str]:
    """A broker's disk limits as they resolve (its own, else the default broker's): both or
    neither, and the hard one below the soft one."""
    soft = limits.get(QuotaType.DISK_SOFT_LIMIT, {})
    hard = limits.get(QuotaType.DISK_HARD_LIMIT, {})
    default = QuotaEntity(broker=DEFAULT)
    problems = []
    for entity in sorted({*soft, *hard}, key=str):
        soft_value, hard_value = (
            soft.get(entity, soft.get(default)),
            hard.get(entity, hard.get(default)),
        )
        if soft_value is None or hard_value is None:
            missing = QuotaType.DISK_SOFT_LIMIT if soft_value is None else QuotaType.DISK_HARD_LIMIT
            problems.append(f"{entity}: key '{missing.key}': needed beside the other disk limit")
        elif hard_value >= soft_value:
            problems.append(
                f"{entity}: key '{QuotaType.DISK_HARD_LIMIT.key}': {hard_value:.0f} is not below "
                f"{QuotaType.DISK_SOFT_LIMIT.key} ({soft_value:.0f})"
            )
    return problems


def _named_quotas(
    raw: Any,
    kind: str,
    resolve: Callable[[str], str | None],
    expected: str,
    problems: list[str],
) -> Iterator[tuple[QuotaEntity, str, float]]:
    """The valid (entity, key, value) of an [ips], [topics] or [brokers] table, by name or
    DEFAULT;
    `resolve` gives the entity's name, None for a name that cannot be one."""
    for name, table in _entity_tables(raw, kind, problems):
        where = f"{kind}/{name}"
        resolved = resolve(name)
        if resolved is None:
            problems.append(f"{where}: not {expected} or {DEFAULT!r}")
            continue
        if not isinstance(table, dict):
            problems.append(f"{where}: expected a table of quotas, got {table!r}")
            continue
        entity = QuotaEntity(**{kind.removesuffix("s"): resolved})
        # a ceiling's key, kafka-quota-proxy.<kind>_ceiling, is a dotted key in TOML
        for key, value in flatten_dotted(table).items():
            quota = _quota_value(entity, key, value, f"{where}: key '{key}'", problems)
            if quota is not None:
                yield entity, key, quota
