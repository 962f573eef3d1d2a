"""The quota store: the one writer of the limits the proxy enforces.

Limits come from several writers, each owning a layer: the config file (the base, replaced
whole at each reload), and quotas altered with kafka-configs through the proxy, which override
the file per (entity, key) and are shared between instances through the cluster. A file reload
never erases an altered value; removing the alteration lets the file's value, if any, apply
again. Every change reaches the listeners (enforcement, the connection quotas) at once.

Entities and values follow Kafka's quota model (quotas/validation.py); describe() is the
broker's DescribeClientQuotas over the effective limits.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Final

from quotas.connections import canonical_ip
from quotas.entities import QUOTA_KEYS, QuotaEntity, QuotaType
from quotas.settings import QuotaLimits
from quotas.validation import (
    BROKER,
    CLIENT_ID,
    IP,
    TOPIC,
    UNSUPPORTED_VERSION,
    USER,
    QuotaError,
    pairs_of,
    validate_value,
)

#: the layers, weakest first: a later one overrides an earlier one per (entity, key)
FILE: Final = "file"
ALTERED: Final = "altered"
LAYERS: Final = (FILE, ALTERED)

#: DescribeClientQuotasRequest's match types
MATCH_EXACT: Final = 0
MATCH_DEFAULT: Final = 1
#: any name, the default included (Kafka's MATCH_TYPE_SPECIFIED)
MATCH_ANY: Final = 2

#: one entity's quotas, by key
Values = dict[str, float]
#: (entity type, match type, match string) of a DescribeClientQuotas filter
FilterComponent = tuple[str, int, str | None]


class QuotaStore:
    def __init__(self) -> None:
        self._layers: dict[str, dict[QuotaEntity, Values]] = {layer: {} for layer in LAYERS}
        #: when each altered value was set, in ms since the epoch, where its writer says
        self._set_at: dict[tuple[QuotaEntity, str], int] = {}
        self._listeners: list[Callable[[QuotaStore], object]] = []

    def subscribe(self, listener: Callable[[QuotaStore], object]) -> None:
        """`listener` hears of every change, with the store as it now stands."""
        self._listeners.append(listener)

    def _changed(self) -> None:
        for listener in self._listeners:
            listener(self)

    def replace(self, layer: str, entries: Mapping[QuotaEntity, Mapping[str, float]]) -> None:
        """A writer's whole layer, as the file is at each reload (validated by the writer)."""
        self._layers[layer] = {entity: dict(values) for entity, values in entries.items() if values}
        self._changed()

    def alter(
        self,
        layer: str,
        entity: QuotaEntity,
        changes: Mapping[str, float | None],
        validate_only: bool = False,
    ) -> None:
        """Kafka's alteration of one entity's quotas: all or nothing, every value set
        validated first (QuotaError as the controller refuses it); None removes a key, which
        needs no validation, and removing a key that is not set changes nothing."""
        if validate_only:
            for key, value in changes.items():
                if value is not None:
                    validate_value(entity, key, value)
            return
        self.alter_many(layer, {entity: changes})

    def alter_many(
        self,
        layer: str,
        changes: Mapping[QuotaEntity, Mapping[str, float | None]],
        set_at: Mapping[tuple[QuotaEntity, str], int] | None = None,
    ) -> None:
        """Several entities' alterations, validated then made together: the listeners hear
        of them once. `set_at`: when each (entity, key) was altered, ms since the epoch (the
        quota store topic's record timestamps), for `explain` to say."""
        for entity, entity_changes in changes.items():
            for key, value in entity_changes.items():
                if value is not None:
                    validate_value(entity, key, value)
        entries = self._layers[layer]
        for entity, entity_changes in changes.items():
            values = entries.setdefault(entity, {})
            for key, value in entity_changes.items():
                if value is None:
                    values.pop(key, None)
                    self._set_at.pop((entity, key), None)
                else:
                    values[key] = value
                    if set_at is not None and (entity, key) in set_at:
                        self._set_at[(entity, key)] = set_at[(entity, key)]
            if not values:
                del entries[entity]
        if any(changes.values()):
            self._changed()

    def layer(self, layer: str) -> dict[QuotaEntity, Values]:
        return {entity: dict(values) for entity, values in self._layers[layer].items()}

    def effective(self) -> dict[QuotaEntity, Values]:
        """Every entity's quotas as enforced: each key from the strongest layer that sets it."""
        merged: dict[QuotaEntity, Values] = {}
        for layer in LAYERS:
            for entity, values in self._layers[layer].items():
                merged.setdefault(entity, {}).update(values)
        return merged

    def has_resources(self) -> bool:
        """Whether any layer holds a topic's quota or a broker's ceiling: what DescribeConfigs
        answers list (proxy/handlers/resource_configs.py)."""
        return any(
            e.topic is not None or e.broker is not None
            for layer in self._layers.values()
            for e in layer
        )

    def value(self, layer: str, entity: QuotaEntity, key: str) -> float | None:
        """One layer's value of one key, if it sets one."""
        return self._layers[layer].get(entity, {}).get(key)

    def source(self, entity: QuotaEntity, key: str) -> str | None:
        """The layer an effective value comes from."""
        for layer in reversed(LAYERS):
            if key in self._layers[layer].get(entity, {}):
                return layer
        return None

    def set_at(self, entity: QuotaEntity, key: str) -> int | None:
        """When an altered value was set (ms since the epoch), where its writer said."""
        if self.source(entity, key) != ALTERED:
            return None
        return self._set_at.get((entity, key))

    def limits(self) -> QuotaLimits:
        """The client and topic quotas by quota type, as the quota engine takes them."""
        limits: dict[QuotaType, dict[QuotaEntity, float]] = {}
        for entity, values in self.effective().items():
            if entity.ip is None:
                for key, value in values.items():
                    limits.setdefault(QUOTA_KEYS[key], {})[entity] = value
        return limits

    def ip_rates(self) -> dict[str, float]:
        """connection_creation_rate by address or DEFAULT (KIP-612's ips entities)."""
        return {
            entity.ip: values["connection_creation_rate"]
            for entity, values in self.effective().items()
            if entity.ip is not None and "connection_creation_rate" in values
        }

    def describe(
        self, components: Sequence[FilterComponent] = (), strict: bool = False
    ) -> dict[QuotaEntity, Values]:
        """The effective quotas of the entities a DescribeClientQuotas filter matches, with
        the broker's validation of the filter (ClientQuotasImage.describe): QuotaError."""
        wanted: dict[str, tuple[int, str | None]] = {}
        for entity_type, match_type, match in components:
            if not entity_type:
                raise QuotaError("Invalid empty entity type.")
            if entity_type in wanted:
                raise QuotaError(
                    f"Entity type {entity_type} cannot appear more than once in the filter."
                )
            if entity_type not in (USER, CLIENT_ID, IP, TOPIC, BROKER):
                raise QuotaError(f"Unsupported entity type {entity_type}", UNSUPPORTED_VERSION)
            _check_match(match_type, match)
            if entity_type == IP and match is not None:
                match = canonical_ip(match) or match
            wanted[entity_type] = (match_type, match)
        if IP in wanted and (USER in wanted or CLIENT_ID in wanted):
            raise QuotaError(
                "Invalid entity filter component combination. IP filter component should not be "
                "used with user or clientId filter component."
            )
        for own in (TOPIC, BROKER):
            if own in wanted and len(wanted) > 1:
                raise QuotaError(
                    f"Invalid entity filter component combination. A {own} filter component "
                    "is not used with another."
                )
        found = {}
        for entity, values in self.effective().items():
            names = dict(pairs_of(entity))
            if strict and len(names) != len(wanted):
                continue
            if all(_matches(names, entity_type, *how) for entity_type, how in wanted.items()):
                found[entity] = dict(values)
        return found


def _check_match(match_type: int, match: str | None) -> None:
    if match_type == MATCH_EXACT:
        if match is None:
            raise QuotaError("Request specified MATCH_TYPE_EXACT, but set match string to null.")
    elif match_type == MATCH_DEFAULT:
        if match is not None:
            raise QuotaError(
                "Request specified MATCH_TYPE_DEFAULT, but also specified a match string."
            )
    elif match_type == MATCH_ANY:
        if match is not None:
            raise QuotaError(
                "Request specified MATCH_TYPE_SPECIFIED, but also specified a match string."
            )
    else:
        raise QuotaError(f"Unknown match type {match_type}")


def _matches(
    names: Mapping[str, str | None], entity_type: str, match_type: int, match: str | None
) -> bool:
    if entity_type not in names:
        return False
    return match_type == MATCH_ANY or names[entity_type] == match


def entries_of(
    limits: QuotaLimits,
    ip_rates: Mapping[str, float],
    topics: Mapping[str, Mapping[str, float]] | None = None,
) -> dict[QuotaEntity, Values]:
    """A config's client quotas, ips rates and topic quotas as one layer of entities."""
    entries: dict[QuotaEntity, Values] = {}
    for quota_type, per_entity in limits.items():
        for entity, value in per_entity.items():
            entries.setdefault(entity, {})[quota_type.key] = value
    for ip, rate in ip_rates.items():
        entries[QuotaEntity(ip=ip)] = {"connection_creation_rate": rate}
    for topic, values in (topics or {}).items():
        entries[QuotaEntity(topic=topic)] = dict(values)
    return entries
