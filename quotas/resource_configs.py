"""The proxy's quotas as configs of Kafka resources, set and listed with stock kafka-configs:
a topic's quotas (`--entity-type topics`, beside retention.ms) and a broker's ceilings
(`--entity-type brokers`, beside its own dynamic configs; `--entity-default`: every broker).

A broker refuses a topic config key it does not know, so the proxy takes its own keys out of
what the broker is sent (proxy/handlers/resource_configs.py), and a broker's own resource
gets none of them either. They carry a prefix no Kafka config has (Kafka's are lower-case
words joined by dots; none names a product): a topic's, followed by the quota key operators
know from client quotas; a broker's are the ceilings' keys themselves. Any key with the prefix
is the proxy's: a misspelt one is refused here, in the broker's words, rather than sent on.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from typing import Final, NamedTuple

from quotas.entities import DEFAULT, PROXY_PREFIX, QuotaEntity, QuotaType
from quotas.store import LAYERS, QuotaStore
from quotas.validation import (
    DEFAULT_BROKER_KEYS,
    INVALID_REQUEST,
    TOPIC_KEYS,
    KeyType,
    QuotaError,
    validate_value,
)

#: INVALID_CONFIG: a key or value Kafka's config definition refuses
INVALID_CONFIG: Final = 40
#: AlterConfigOp.OpType
SET: Final = 0
DELETE: Final = 1
_LIST_OPS: Final = {2: "APPEND", 3: "SUBTRACT"}

#: Long.parseLong's syntax, after ConfigDef's trim
_LONG = re.compile(r"^[+-]?[0-9]+$")
_LONG_MAX: Final = (1 << 63) - 1


class OwnKey(NamedTuple):
    """One of the proxy's keys among a resource type's configs."""

    #: the quota key it sets on the resource's entity
    key: str
    key_type: KeyType
    documentation: str


class OwnConfigs(NamedTuple):
    """A resource type whose configs carry the proxy's keys."""

    #: what its resources are called in the broker's messages
    kind: str
    #: config name -> the key
    keys: Mapping[str, OwnKey]
    #: a resource's entity, by the resource's name
    entity: Callable[[str], QuotaEntity]
    #: the entity whose quotas every resource without its own takes
    default: QuotaEntity


def _fleet(text: str) -> str:
    return f"{text}, across the kafka-quota-proxy fleet."


TOPIC_CONFIGS: Final = OwnConfigs(
    "topic",
    {
        PROXY_PREFIX + key: OwnKey(key, TOPIC_KEYS[key], _fleet(text))
        for key, text in (
            (
                "producer_byte_rate",
                "The bytes per second that every client together may write into this topic",
            ),
            (
                "consumer_byte_rate",
                "The bytes per second that every client together may read from this topic",
            ),
        )
    },
    lambda name: QuotaEntity(topic=name),
    QuotaEntity(topic=DEFAULT),
)
BROKER_CONFIGS: Final = OwnConfigs(
    "broker",
    {
        quota_type.key: OwnKey(quota_type.key, DEFAULT_BROKER_KEYS[quota_type.key], _fleet(text))
        for quota_type, text in (
            (QuotaType.PRODUCE_CEILING, "Produce bytes per second this broker takes, at most"),
            (QuotaType.FETCH_CEILING, "Fetch bytes per second this broker sends, at most"),
            (QuotaType.REQUEST_CEILING, "Requests per second this broker takes, at most"),
            (
                QuotaType.CLUSTER_PRODUCE_CEILING,
                "Produce bytes per second every broker together takes, at most (on the "
                "default broker alone)",
            ),
            (
                QuotaType.CLUSTER_FETCH_CEILING,
                "Fetch bytes per second every broker together sends, at most (on the default "
                "broker alone)",
            ),
            (
                QuotaType.CLUSTER_REQUEST_CEILING,
                "Requests per second every broker together takes, at most (on the default "
                "broker alone)",
            ),
            (
                QuotaType.DISK_SOFT_LIMIT,
                "Usable bytes of a log directory's volume under which its writers are held",
            ),
            (
                QuotaType.DISK_HARD_LIMIT,
                "Usable bytes of a log directory's volume under which its writers are held at "
                "the disk guard's minimum",
            ),
        )
    },
    # kafka-configs names the default broker (--entity-default) by an empty name
    lambda name: QuotaEntity(broker=name or DEFAULT),
    QuotaEntity(broker=DEFAULT),
)


class Config(NamedTuple):
    """One config of an alteration: its name, AlterConfigOp.OpType and value."""

    name: str
    operation: int
    value: str | None


class Setting(NamedTuple):
    """Where a resource's quota is set: a quota store layer, on the resource or its
    default."""

    value: float
    layer: str
    #: set on the default topic or broker, not on this one
    default: bool


def is_own(name: str) -> bool:
    return name.startswith(PROXY_PREFIX)


def changes_of(
    own: OwnConfigs, configs: Sequence[Config], altered: Mapping[str, float], replace: bool
) -> dict[str, float | None]:
    """A resource's own configs as changes to its entity's quotas, refused whole as the
    broker refuses a resource (QuotaError). `replace` is AlterConfigs, which sets a
    resource's whole dynamic config: its `altered` quotas that it does not name are
    removed."""
    names = [config.name for config in configs]
    if len(set(names)) < len(names):
        raise QuotaError("Error due to duplicate config keys")
    nulls = [c.name for c in configs if c.value is None and c.operation != DELETE]
    if nulls:
        raise QuotaError(f"Null value not supported for : {', '.join(nulls)}")
    changes: dict[str, float | None] = dict.fromkeys(altered) if replace else {}
    for name, operation, value in configs:
        known = own.keys.get(name)
        if known is None:
            raise QuotaError(f"Unknown {own.kind} config name: {name}", INVALID_CONFIG)
        key = known.key
        if operation == DELETE:
            changes[key] = None
        elif operation == SET and value is not None:
            if known.key_type is KeyType.DOUBLE:
                changes[key] = _double(name, value)
            else:
                changes[key] = _rate(name, value)
        elif operation in _LIST_OPS:
            raise QuotaError(
                f"Can't {_LIST_OPS[operation]} to key {name} because its type is not LIST.",
                INVALID_CONFIG,
            )
        else:
            raise QuotaError(
                f"Unknown config operation {operation} for key {name}", INVALID_REQUEST
            )
    return changes


def _rate(name: str, text: str) -> float:
    """ConfigDef's LONG with a lower bound of 1, in its words."""
    trimmed = text.strip()
    digits = trimmed.lstrip("+-").lstrip("0")
    # past 19 digits no long fits, and Python's int() refuses thousands of them outright
    if not _LONG.match(trimmed) or len(digits) > 19 or abs(int(trimmed)) > _LONG_MAX:
        raise QuotaError(
            f"Invalid value {text} for configuration {name}: Not a number of type LONG",
            INVALID_CONFIG,
        )
    value = int(trimmed)
    if value < 1:
        raise QuotaError(
            f"Invalid value {value} for configuration {name}: Value must be at least 1",
            INVALID_CONFIG,
        )
    return float(value)


def _double(name: str, text: str) -> float:
    """ConfigDef's DOUBLE, then the quota's own bound (above 0), in Kafka's words."""
    try:
        value = float(text.strip())
    except ValueError:
        raise QuotaError(
            f"Invalid value {text} for configuration {name}: Not a number of type DOUBLE",
            INVALID_CONFIG,
        ) from None
    validate_value(QuotaEntity(broker=DEFAULT), name, value)
    return value


def settings(store: QuotaStore, own: OwnConfigs, name: str, key: str) -> list[Setting]:
    """Every value of one of a resource's quotas, the one enforced first: the resource's
    own, then its default's, each altered before file."""
    found = []
    entity, default = own.entity(name), own.default
    named = [(entity, False)] if entity != default else []
    for each, is_default in (*named, (default, True)):
        for layer in reversed(LAYERS):
            value = store.value(layer, each, key)
            if value is not None:
                found.append(Setting(value, layer, is_default))
    return found
