"""A topic's quotas as topic configs: `kafka-configs --entity-type topics --alter
--add-config` sets them beside retention.ms, and `--describe` lists them.

A broker refuses a topic config key it does not know, so the proxy takes its own keys out of
what the broker is sent (proxy/handlers/topic_configs.py). They carry a prefix no Kafka topic
config can have (Kafka's are lower-case words joined by dots; none names a product), followed
by the quota key operators know from client quotas. Any key with the prefix is the proxy's:
a misspelt one is refused here, in the broker's words, rather than sent on.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Final, NamedTuple

from quotas.entities import DEFAULT, PROXY_PREFIX, QuotaEntity
from quotas.store import LAYERS, QuotaStore
from quotas.validation import INVALID_REQUEST, TOPIC_KEYS, QuotaError

#: topic config name -> quota key
CONFIG_KEYS: Final[Mapping[str, str]] = {PROXY_PREFIX + key: key for key in TOPIC_KEYS}
#: INVALID_CONFIG: a key or value Kafka's config definition refuses
INVALID_CONFIG: Final = 40
#: AlterConfigOp.OpType
SET: Final = 0
DELETE: Final = 1
_LIST_OPS: Final = {2: "APPEND", 3: "SUBTRACT"}

#: Long.parseLong's syntax, after ConfigDef's trim
_LONG = re.compile(r"^[+-]?[0-9]+$")
_LONG_MAX: Final = (1 << 63) - 1

DOCUMENTATION: Final[Mapping[str, str]] = {
    "producer_byte_rate": "The bytes per second that every client together may write into "
    "this topic, across the kafka-quota-proxy fleet.",
    "consumer_byte_rate": "The bytes per second that every client together may read from "
    "this topic, across the kafka-quota-proxy fleet.",
}


class Config(NamedTuple):
    """One config of an alteration: its name, AlterConfigOp.OpType and value."""

    name: str
    operation: int
    value: str | None


class Setting(NamedTuple):
    """Where a topic's quota is set: a quota store layer, on the topic or its default."""

    value: int
    layer: str
    #: set on the default topic, not on this one
    default: bool


def is_own(name: str) -> bool:
    return name.startswith(PROXY_PREFIX)


def changes_of(
    configs: Sequence[Config], altered: Mapping[str, float], replace: bool
) -> dict[str, float | None]:
    """A resource's own configs as changes to its topic's quotas, refused whole as the broker
    refuses a resource (QuotaError). `replace` is AlterConfigs, which sets a topic's whole
    dynamic config: its `altered` quotas that it does not name are removed."""
    names = [config.name for config in configs]
    if len(set(names)) < len(names):
        raise QuotaError("Error due to duplicate config keys")
    nulls = [c.name for c in configs if c.value is None and c.operation != DELETE]
    if nulls:
        raise QuotaError(f"Null value not supported for : {', '.join(nulls)}")
    changes: dict[str, float | None] = dict.fromkeys(altered) if replace else {}
    for name, operation, value in configs:
        key = CONFIG_KEYS.get(name)
        if key is None:
            raise QuotaError(f"Unknown topic config name: {name}", INVALID_CONFIG)
        if operation == DELETE:
            changes[key] = None
        elif operation == SET and value is not None:
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


def settings(store: QuotaStore, topic: str, key: str) -> list[Setting]:
    """Every value of one of a topic's quotas, the one enforced first: the topic's own, then
    the default topic's, each altered before file."""
    found = []
    for entity, default in ((QuotaEntity(topic=topic), False), (QuotaEntity(topic=DEFAULT), True)):
        for layer in reversed(LAYERS):
            value = store.value(layer, entity, key)
            if value is not None:
                found.append(Setting(int(value), layer, default))
    return found
