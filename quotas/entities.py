"""Quota entities in Kafka's model, and which entity (and which shared sensor) a client gets.

An entity is a (user, client-id) pair where either part may be absent or Kafka's `<default>`.
Resolution follows Kafka's DefaultQuotaCallback exactly: the most specific of the eight
levels users/<u>/clients/<c> ... clients/<default> that is configured wins, and the metric
tags it yields decide which clients share one sensor (a `clients/<default>` quota alone gives
every client-id one sensor shared across all users). See docs/kafka-quota-semantics.md §4.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Final

#: Kafka's name for the default entity (kafka-configs --entity-default).
DEFAULT: Final = "<default>"


#: the prefix of the proxy's own keys, which no Kafka config carries: a topic's quotas, and
#: the guards of user and client-id entities (request rates, connections)
PROXY_PREFIX: Final = "kafka-quota-proxy."


class QuotaType(Enum):
    """Each quota key, with the metric group Kafka reports it under. The guards (issue 52;
    docs/guards.md) are the proxy's own: a request-rate guard is named by the API whose
    requests it counts and by that API's key; the connection guards count a principal's
    open connections and the rate it opens them at."""

    PRODUCE = ("producer_byte_rate", "Produce")
    FETCH = ("consumer_byte_rate", "Fetch")
    REQUEST = ("request_percentage", "Request")
    CONTROLLER_MUTATION = ("controller_mutation_rate", "ControllerMutation")
    PRODUCER_IDS = ("producer_ids_rate", "ProducerIds")
    METADATA_RATE = (PROXY_PREFIX + "metadata_rate", "Metadata", 3)
    FIND_COORDINATOR_RATE = (PROXY_PREFIX + "find_coordinator_rate", "FindCoordinator", 10)
    JOIN_GROUP_RATE = (PROXY_PREFIX + "join_group_rate", "JoinGroup", 11)
    SYNC_GROUP_RATE = (PROXY_PREFIX + "sync_group_rate", "SyncGroup", 14)
    CONSUMER_GROUP_HEARTBEAT_RATE = (
        PROXY_PREFIX + "consumer_group_heartbeat_rate",
        "ConsumerGroupHeartbeat",
        68,
    )
    OFFSET_COMMIT_RATE = (PROXY_PREFIX + "offset_commit_rate", "OffsetCommit", 8)
    INIT_PRODUCER_ID_RATE = (PROXY_PREFIX + "init_producer_id_rate", "InitProducerId", 22)
    LIST_OFFSETS_RATE = (PROXY_PREFIX + "list_offsets_rate", "ListOffsets", 2)
    CONNECTIONS = (PROXY_PREFIX + "connections", "Connections")
    CONNECTION_CREATION_RATE = (PROXY_PREFIX + "connection_creation_rate", "ConnectionCreation")
    PRODUCE_CEILING = (PROXY_PREFIX + "produce_ceiling", "ProduceCeiling")
    FETCH_CEILING = (PROXY_PREFIX + "fetch_ceiling", "FetchCeiling")
    REQUEST_CEILING = (PROXY_PREFIX + "request_ceiling", "RequestCeiling")
    CEILING_EXEMPT = (PROXY_PREFIX + "ceiling_exempt", "CeilingExempt")
    PRODUCE_FLOOR = (PROXY_PREFIX + "produce_floor", "ProduceFloor")
    FETCH_FLOOR = (PROXY_PREFIX + "fetch_floor", "FetchFloor")
    REQUEST_FLOOR = (PROXY_PREFIX + "request_floor", "RequestFloor")
    CLUSTER_PRODUCE_CEILING = (PROXY_PREFIX + "cluster_produce_ceiling", "ClusterProduceCeiling")
    CLUSTER_FETCH_CEILING = (PROXY_PREFIX + "cluster_fetch_ceiling", "ClusterFetchCeiling")
    CLUSTER_REQUEST_CEILING = (PROXY_PREFIX + "cluster_request_ceiling", "ClusterRequestCeiling")
    DISK_SOFT_LIMIT = (PROXY_PREFIX + "disk_soft_limit_bytes", "DiskSoftLimit")
    DISK_HARD_LIMIT = (PROXY_PREFIX + "disk_hard_limit_bytes", "DiskHardLimit")
    DISK_GUARD = (PROXY_PREFIX + "disk_guard", "DiskGuard")

    def __init__(self, key: str, group: str, api_key: int | None = None) -> None:
        self.key = key
        self.group = group
        #: the API a request-rate guard counts; None for Kafka's own quota types
        self.api_key = api_key
        #: a guard's name in its settings: its key without the prefix and "_rate"
        self.guard_name = key.removeprefix(PROXY_PREFIX).removesuffix("_rate")


QUOTA_KEYS: Final = {quota_type.key: quota_type for quota_type in QuotaType}
#: Kafka's own quota types, in the order a fleet's records number them
KAFKA_QUOTA_TYPES: Final = tuple(t for t in QuotaType if not t.key.startswith(PROXY_PREFIX))
#: the request-rate guards, by the api_key of the requests each counts
GUARDS: Final = {t.api_key: t for t in QuotaType if t.api_key is not None}
#: the connection guards: a principal's open connections, and its connection creation rate
CONNECTION_GUARDS: Final = (QuotaType.CONNECTIONS, QuotaType.CONNECTION_CREATION_RATE)
#: the guards held by a token bucket ([guards.requests] sizes them)
BUCKETS: Final = (*GUARDS.values(), QuotaType.CONNECTION_CREATION_RATE)
#: a broker's ceilings (docs/ceilings.md), each with the floor a guaranteed principal keeps
#: under it and the quota its best-effort principals share it by
CEILINGS: Final = {
    QuotaType.PRODUCE_CEILING: (QuotaType.PRODUCE_FLOOR, QuotaType.PRODUCE),
    QuotaType.FETCH_CEILING: (QuotaType.FETCH_FLOOR, QuotaType.FETCH),
    QuotaType.REQUEST_CEILING: (QuotaType.REQUEST_FLOOR, QuotaType.REQUEST),
}
#: each kind's ceiling on every broker together, set on the default broker entity alone
CLUSTER_CEILINGS: Final = {
    QuotaType.PRODUCE_CEILING: QuotaType.CLUSTER_PRODUCE_CEILING,
    QuotaType.FETCH_CEILING: QuotaType.CLUSTER_FETCH_CEILING,
    QuotaType.REQUEST_CEILING: QuotaType.CLUSTER_REQUEST_CEILING,
}
#: a broker's disk guard limits, in usable bytes of a log directory's volume
DISK_LIMITS: Final = (QuotaType.DISK_SOFT_LIMIT, QuotaType.DISK_HARD_LIMIT)
#: every key of a broker entity, as check-config lists them
BROKER_TYPES: Final = (*CEILINGS, *CLUSTER_CEILINGS.values(), *DISK_LIMITS)
#: the quota types whose throttle holds the connections to one scope (a broker, the
#: cluster, a log directory), never the principal's others
SCOPED: Final = frozenset({*CEILINGS, QuotaType.DISK_GUARD})
#: the keys of user and client-id entities that place a principal under the ceilings
CEILING_CLASSES: Final = (
    QuotaType.CEILING_EXEMPT,
    QuotaType.PRODUCE_FLOOR,
    QuotaType.FETCH_FLOOR,
    QuotaType.REQUEST_FLOOR,
)


@dataclass(frozen=True, slots=True)
class QuotaEntity:
    """users/<user>[/clients/<client_id>], clients/<client_id>, ips/<ip>, topics/<topic> or
    brokers/<node id>; None = not part of it, DEFAULT = Kafka's default entity of that type.
    A topic entity is the proxy's own (KIP-1010 asks for it; Kafka has none): a topic's byte
    rates, whoever writes or reads it. A broker entity carries the broker's ceilings, as
    `kafka-configs --entity-type brokers` names a broker (its default: every broker)."""

    user: str | None = None
    client_id: str | None = None
    ip: str | None = None
    topic: str | None = None
    broker: str | None = None

    def __str__(self) -> str:
        parts = []
        if self.user is not None:
            parts.append(f"users/{self.user}")
        if self.client_id is not None:
            parts.append(f"clients/{self.client_id}")
        if self.ip is not None:
            parts.append(f"ips/{self.ip}")
        if self.topic is not None:
            parts.append(f"topics/{self.topic}")
        if self.broker is not None:
            parts.append(f"brokers/{self.broker}")
        return "/".join(parts)


#: KIP-55's precedence, most specific first: the first of these a (user, client-id) pair has
#: an entity at is the one that applies (Kafka's DefaultQuotaCallback). `explain`,
#: check-config and docs/enforcement.md name a rule by its number and these words.
PRECEDENCE: Final = (
    "users/<user>/clients/<client-id>",
    "users/<user>/clients/<default>",
    "users/<user>",
    "users/<default>/clients/<client-id>",
    "users/<default>/clients/<default>",
    "users/<default>",
    "clients/<client-id>",
    "clients/<default>",
)


def precedence(entity: QuotaEntity) -> int:
    """A user or client-id entity's place in PRECEDENCE, from 1 (most specific) to 8."""

    def kind(name: str | None) -> int:  # named, <default>, not part of it
        return 2 if name is None else 1 if name == DEFAULT else 0

    user, client_id = kind(entity.user), kind(entity.client_id)
    return 7 + client_id if user == 2 else user * 3 + client_id + 1


def precedence_rule(entity: QuotaEntity) -> str:
    """The rule that chose `entity`, in the words every view of it uses."""
    level = precedence(entity)
    return f"precedence {level} of {len(PRECEDENCE)}: {PRECEDENCE[level - 1]}"


#: (user tag, client-id tag): Kafka's metric tags, "" where the level does not apply.
MetricTags = tuple[str, str]

_CLIENT_ID_LEVEL = 1
_USER_LEVEL = 2
_USER_CLIENT_ID_LEVEL = 4


def _level(entity: QuotaEntity) -> int:
    if entity.user is not None and entity.client_id is not None:
        return _USER_CLIENT_ID_LEVEL
    return _USER_LEVEL if entity.user is not None else _CLIENT_ID_LEVEL


class EntityQuotas:
    """The configured limits of one quota type and Kafka's lookup over them."""

    def __init__(self, limits: Mapping[QuotaEntity, float]) -> None:
        self.limits = dict(limits)
        levels = 0
        for entity in self.limits:
            levels |= _level(entity)
        #: Kafka's quotaTypesEnabled bit mask; 0 means this quota type is off entirely
        self.levels_enabled = levels

    def metric_tags(self, user: str, client_id: str) -> MetricTags:
        """The tags of the sensor this client records into (clients with equal tags share)."""
        levels = self.levels_enabled
        if levels in (0, _CLIENT_ID_LEVEL):
            return "", client_id
        if levels == _USER_LEVEL:
            return user, ""
        if levels == _USER_CLIENT_ID_LEVEL:
            return user, client_id
        limits = self.limits
        if QuotaEntity(user, client_id) in limits or QuotaEntity(user, DEFAULT) in limits:
            return user, client_id
        if QuotaEntity(user) in limits:
            return user, ""
        if QuotaEntity(DEFAULT, client_id) in limits or QuotaEntity(DEFAULT, DEFAULT) in limits:
            return user, client_id
        if QuotaEntity(DEFAULT) in limits:
            return user, ""
        return "", client_id

    def entity_for(self, tags: MetricTags) -> QuotaEntity | None:
        """The configured entity that governs a sensor's tags, or None (unlimited)."""
        user, client_id = tags
        if user and client_id:
            candidates: tuple[QuotaEntity, ...] = (
                QuotaEntity(user, client_id),
                QuotaEntity(user, DEFAULT),
                QuotaEntity(DEFAULT, client_id),
                QuotaEntity(DEFAULT, DEFAULT),
            )
        elif user:
            candidates = (QuotaEntity(user), QuotaEntity(DEFAULT))
        elif client_id:
            candidates = (QuotaEntity(client_id=client_id), QuotaEntity(client_id=DEFAULT))
        else:
            return None
        for entity in candidates:
            if entity in self.limits:
                return entity
        return None

    def limit(self, tags: MetricTags) -> float | None:
        entity = self.entity_for(tags)
        return None if entity is None else self.limits[entity]


_SAFE: Final = frozenset(b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-*_")


def sanitize(name: str) -> str:
    """Kafka's Sanitizer.sanitize: how a principal name appears in the `user` metric tag.

    Java's URLEncoder (space to '+', everything outside [A-Za-z0-9.-*_] percent-encoded as
    UTF-8), then '*' to %2A and '+' to %20; urllib.parse.quote differs on '~'.
    """
    out = []
    for byte in name.encode():
        if byte in _SAFE:
            out.append("%2A" if byte == 0x2A else chr(byte))
        elif byte == 0x20:
            out.append("%20")
        else:
            out.append(f"%{byte:02X}")
    return "".join(out)
