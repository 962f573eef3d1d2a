"""Kafka's validation of client quotas, with its error messages: what the KRaft controller
accepts in an AlterClientQuotas (ClientQuotaControlManager) and a broker in a
DescribeClientQuotas filter (ClientQuotasImage), so a quota the proxy is given, from its file
or through kafka-configs, is refused for the same reasons and in the same words.

An entity on the wire is a list of (entity type, name) pairs, a null name meaning Kafka's
default entity; QuotaEntity writes that default as DEFAULT.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Mapping
from enum import Enum
from typing import Final

from protocol.quota_records import read_record
from quotas.connections import canonical_ip
from quotas.entities import DEFAULT, GUARDS, QuotaEntity, QuotaType
from quotas.javamath import INT_MAX

#: Kafka's error codes a quota request is refused with
INVALID_REQUEST: Final = 42
UNSUPPORTED_VERSION: Final = 35

USER: Final = "user"
CLIENT_ID: Final = "client-id"
IP: Final = "ip"
#: the proxy's own entity type (not Kafka's): a topic's byte rates across every client
TOPIC: Final = "topic"
#: the proxy's own entity type too: a broker's ceilings (docs/ceilings.md)
BROKER: Final = "broker"


class QuotaError(ValueError):
    """A quota Kafka refuses, with the error code and message its controller gives."""

    def __init__(self, message: str, code: int = INVALID_REQUEST) -> None:
        super().__init__(message)
        self.message = message
        self.code = code


class KeyType(Enum):
    """A quota key's ConfigDef type (QuotaConfig.java)."""

    LONG = "LONG"
    INT = "INT"
    DOUBLE = "DOUBLE"


#: QuotaConfig.userAndClientQuotaConfigs(): the keys of user and client-id entities, and
#: the proxy's guards: request rates (per second), open connections and their creation rate
CLIENT_KEYS: Final[Mapping[str, KeyType]] = {
    "producer_byte_rate": KeyType.LONG,
    "consumer_byte_rate": KeyType.LONG,
    "request_percentage": KeyType.DOUBLE,
    "controller_mutation_rate": KeyType.DOUBLE,
    **{guard.key: KeyType.DOUBLE for guard in GUARDS.values()},
    QuotaType.CONNECTIONS.key: KeyType.INT,
    QuotaType.CONNECTION_CREATION_RATE.key: KeyType.DOUBLE,
    QuotaType.CEILING_EXEMPT.key: KeyType.INT,
    QuotaType.PRODUCE_FLOOR.key: KeyType.LONG,
    QuotaType.FETCH_FLOOR.key: KeyType.LONG,
    QuotaType.REQUEST_FLOOR.key: KeyType.DOUBLE,
}
#: KIP-936's producer_ids_rate (DOUBLE), for user entities alone: users/<user>, users/<default>
USER_KEYS: Final[Mapping[str, KeyType]] = {**CLIENT_KEYS, "producer_ids_rate": KeyType.DOUBLE}
#: QuotaConfig.ipConfigs()
IP_KEYS: Final[Mapping[str, KeyType]] = {"connection_creation_rate": KeyType.INT}
#: a topic's byte rates, typed as a client's are
TOPIC_KEYS: Final[Mapping[str, KeyType]] = {
    "producer_byte_rate": KeyType.LONG,
    "consumer_byte_rate": KeyType.LONG,
}
#: a broker's ceilings (bytes per second in and out, requests per second) and its disk
#: guard's limits (usable bytes of a log directory's volume)
CEILING_KEYS: Final[Mapping[str, KeyType]] = {
    QuotaType.PRODUCE_CEILING.key: KeyType.LONG,
    QuotaType.FETCH_CEILING.key: KeyType.LONG,
    QuotaType.REQUEST_CEILING.key: KeyType.DOUBLE,
    QuotaType.DISK_SOFT_LIMIT.key: KeyType.LONG,
    QuotaType.DISK_HARD_LIMIT.key: KeyType.LONG,
}
#: the default broker's keys: every broker's, and the ceilings of the cluster as a whole
DEFAULT_BROKER_KEYS: Final[Mapping[str, KeyType]] = {
    **CEILING_KEYS,
    QuotaType.CLUSTER_PRODUCE_CEILING.key: KeyType.LONG,
    QuotaType.CLUSTER_FETCH_CEILING.key: KeyType.LONG,
    QuotaType.CLUSTER_REQUEST_CEILING.key: KeyType.DOUBLE,
}

#: Kafka's legal topic names (Topic.validate)
_TOPIC_NAME = re.compile(r"^[a-zA-Z0-9._-]{1,249}$")

#: (entity type, name) pairs as a request carries them; None names the default entity
EntityPairs = Iterable[tuple[str, str | None]]
#: what an ip entity's name stands for (None: not an address); literal addresses by default
Resolve = Callable[[str], str | None]


def entity_of(pairs: EntityPairs, resolve: Resolve = canonical_ip) -> QuotaEntity:
    """A request's entity, validated as ClientQuotaControlManager.validateEntity and
    configKeysForEntityType do, in their order; a repeated type takes the last name, as
    Kafka's request reading keeps it."""
    entity = dict(pairs)
    if not entity:
        raise QuotaError("Invalid empty client quota entity")
    for entity_type, name in entity.items():
        if entity_type not in (USER, CLIENT_ID, IP, TOPIC, BROKER):
            raise QuotaError(f"Unhandled client quota entity type: {entity_type}")
        if name == "":
            raise QuotaError(f"Empty {entity_type} not supported")
    for kind, legal, invalid in _OWN_ENTITIES:
        if kind in entity:
            if len(entity) > 1:
                raise QuotaError(
                    f"Invalid quota entity combination, a {kind} entity is not combined with "
                    "another entity type"
                )
            name = entity[kind]
            if name is not None and not legal(name):
                raise QuotaError(invalid.format(name=name))
            return QuotaEntity(**{kind: DEFAULT if name is None else name})
    if IP in entity:
        if len(entity) > 1:
            raise QuotaError(
                "Invalid quota entity combination, IP entity shouldnot be combined with User "
                "or ClientId"
            )
        name = entity[IP]
        if name is None:
            return QuotaEntity(ip=DEFAULT)
        address = resolve(name)
        if address is None:
            raise QuotaError(f"{name} is not a valid IP or resolvable host.")
        return QuotaEntity(ip=address)
    user, client_id = entity.get(USER, ...), entity.get(CLIENT_ID, ...)
    return QuotaEntity(
        user=None if user is ... else (DEFAULT if user is None else user),
        client_id=None if client_id is ... else (DEFAULT if client_id is None else client_id),
    )


def legal_topic(topic: str) -> bool:
    return bool(_TOPIC_NAME.match(topic)) and topic not in (".", "..")


def legal_broker(name: str) -> bool:
    """A node id as kafka-configs takes one for --entity-name: a decimal int, 0 or more."""
    return name.isascii() and name.isdigit() and int(name) <= INT_MAX and str(int(name)) == name


#: the proxy's own entity types, each alone in an entity: (type, whether a name is legal,
#: the refusal of one that is not)
_OWN_ENTITIES: Final = (
    (TOPIC, legal_topic, "Invalid topic name {name}: up to 249 of a-z A-Z 0-9 . _ -, not . or .."),
    (BROKER, legal_broker, "Invalid broker id {name}: a node id, 0 or more"),
)


def pairs_of(entity: QuotaEntity) -> list[tuple[str, str | None]]:
    """The entity as a request names it: (type, name), None for a default."""
    pairs = []
    named = (
        (USER, entity.user),
        (CLIENT_ID, entity.client_id),
        (IP, entity.ip),
        (TOPIC, entity.topic),
        (BROKER, entity.broker),
    )
    for entity_type, name in named:
        if name is not None:
            pairs.append((entity_type, None if name == DEFAULT else name))
    return pairs


def keys_for(entity: QuotaEntity) -> Mapping[str, KeyType]:
    """The quota keys an entity may carry."""
    if entity.ip is not None:
        return IP_KEYS
    if entity.topic is not None:
        return TOPIC_KEYS
    if entity.broker is not None:
        return DEFAULT_BROKER_KEYS if entity.broker == DEFAULT else CEILING_KEYS
    if entity.user is not None and entity.client_id is None:
        return USER_KEYS
    return CLIENT_KEYS


def validate_value(entity: QuotaEntity, key: str, value: float) -> None:
    """ClientQuotaControlManager.validateQuotaKeyValue: the key must be one of the entity's,
    the value above 0, and a whole number of its type's range for LONG and INT keys."""
    key_type = keys_for(entity).get(key)
    if key_type is None:
        raise QuotaError(f"Invalid configuration key {key}")
    if value <= 0.0:
        raise QuotaError(f"Quota {key} must be greater than 0")
    if key_type is KeyType.DOUBLE:
        return
    if key_type is KeyType.INT and value > INT_MAX:
        raise QuotaError(f"Proposed value for {key} is too large for an INT.")
    if key_type is KeyType.LONG and value > 9.223372036854775807e18:  # Long.MAX_VALUE, a double
        raise QuotaError(f"Proposed value for {key} is too large for a LONG.")
    if abs(math.fmod(value, 1.0)) > 1e-6:  # Java's %, which keeps the dividend's sign
        raise QuotaError(f"{key} cannot be a fractional value.")


def record_change(key: bytes | None, value: bytes | None) -> tuple[QuotaEntity, str, float | None]:
    """A quota store record as the change it makes (its entity, key, and value; None:
    removed), validated as an alteration is: what the proxy's reader and `top` apply.
    ValueError (a QuotaError, with Kafka's message, for a value) for a record no writer
    could have meant."""
    if key is None:
        raise ValueError("no key")
    pairs, quota_key, number = read_record(key, value)
    entity = entity_of(pairs)
    if number is not None:
        validate_value(entity, quota_key, number)
    return entity, quota_key, number
