"""One AlterClientQuotas request over the quota store, as the KRaft controller takes it
(ClientQuotaControlManager.alterClientQuotas): entity by entity in request order, each all or
nothing, with its errors in Kafka's words; the entities that pass are changed together.

Kafka's quirks are kept, since clients compare what they get: a key given twice, or an entity
given twice, answers `Ignoring duplicate entity ClientQuotaEntity(entries={...})`, where the
map is printed in Java's HashMap order; an entity given twice keeps the first copy's change.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import NamedTuple

from quotas.connections import canonical_ip
from quotas.entities import QuotaEntity
from quotas.store import QuotaStore
from quotas.validation import (
    INVALID_REQUEST,
    QuotaError,
    Resolve,
    entity_of,
    validate_value,
)

#: one entity's changes: key -> value to set, or None to remove
Changes = dict[str, float | None]


class Alteration(NamedTuple):
    """One entry of a request: the entity as named, and its operations in order."""

    pairs: list[tuple[str, str | None]]
    ops: list[tuple[str, float | None]]


class Outcome(NamedTuple):
    """One entity's result, answered with the entity as the request named it."""

    pairs: list[tuple[str, str | None]]
    code: int = 0
    message: str | None = None


class Plan(NamedTuple):
    outcomes: list[Outcome]
    #: the changes of the entities that passed, to make together
    changes: dict[QuotaEntity, Changes]


def plan(
    store: QuotaStore, alterations: Sequence[Alteration], resolve: Resolve = canonical_ip
) -> Plan:
    """Validate a request's alterations against the store's rules; nothing is changed."""
    outcomes: dict[frozenset[tuple[str, str | None]], Outcome] = {}
    changes: dict[QuotaEntity, Changes] = {}
    for pairs, ops in alterations:
        named = dict(pairs)  # a type named twice keeps its last name, as Kafka reads it
        key = frozenset(named.items())
        keys = [op_key for op_key, _ in ops]
        if key in outcomes or len(set(keys)) < len(keys):
            shown = java_entity(named, len(pairs))
            outcomes[key] = Outcome(pairs, INVALID_REQUEST, f"Ignoring duplicate entity {shown}")
            continue
        try:
            entity = entity_of(named.items(), resolve)
            for op_key, value in ops:
                if value is not None:
                    validate_value(entity, op_key, value)
        except QuotaError as exc:
            outcomes[key] = Outcome(pairs, exc.code, exc.message)
            continue
        outcomes[key] = Outcome(pairs)
        changes.setdefault(entity, {}).update(ops)
    return Plan(list(outcomes.values()), changes)


def java_entity(entries: Mapping[str, str | None], made_for: int) -> str:
    """ClientQuotaEntity.toString: its map as Java's HashMap prints it. The request made the
    map for `made_for` entries; it then has the smallest power of two of buckets (at least
    2) that holds them at 0.75 load, and iterates the buckets in index order, each in
    insertion order."""
    capacity = 2
    while capacity * 0.75 < made_for:
        capacity *= 2
    ordered = sorted(entries.items(), key=lambda item: _java_bucket(item[0], capacity))
    shown = ", ".join(f"{k}={'null' if v is None else v}" for k, v in ordered)
    return f"ClientQuotaEntity(entries={{{shown}}})"


def _java_bucket(key: str, capacity: int) -> int:
    """String.hashCode over UTF-16 code units, spread as HashMap.hash spreads it."""
    units = key.encode("utf-16-be")
    h = 0
    for index in range(0, len(units), 2):
        h = (31 * h + (units[index] << 8 | units[index + 1])) & 0xFFFFFFFF
    return (h ^ (h >> 16)) & (capacity - 1)
