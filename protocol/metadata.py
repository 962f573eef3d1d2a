"""Metadata as the proxy asks for it itself and reads it from every Metadata response.

The proxy's own requests (start-up broker discovery, topic refreshes on a client's upstream
connection) and the topic cache fed by clients' Metadata responses use these, so there is one
way to ask a broker about brokers and topics.

A Metadata response is read by its lengths, not decoded into objects, and the proxy's
addresses are spliced in where the brokers' were: the rest of the frame, every topic and
partition, is copied as it came. The answer to a client's Metadata request describes every
partition it asked about (often the whole cluster), and decoding and re-encoding all of them
to change a host and port per broker cost more than the rest of the round trip (issue 10).
It is written out rather than built on protocol.skip's schema walker because it needs the
positions of the hosts and ports and the few facts it keeps, at a few operations a partition.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from struct import Struct
from struct import error as struct_error
from typing import NamedTuple

from kafka.protocol.metadata import MetadataRequest
from kafka.protocol.schemas.fields.codecs.types import String

from protocol.apis import METADATA, response_is_flexible
from protocol.errors import ProtocolError
from protocol.headers import response_body_offset
from protocol.primitives import read_length, read_string, skip_string, skip_tagged_fields
from protocol.rewrite import Advertise

#: the proxy's own Metadata requests: topic ids from v10, flexible from v9; Kafka 4 serves it
OWN_METADATA_VERSION = 12
#: Kafka's null topic id (Uuid.ZERO_UUID)
_NO_TOPIC_ID = uuid.UUID(int=0)


class TopicPartitions(NamedTuple):
    name: str
    #: None before Metadata v10, or when the broker names no id
    topic_id: uuid.UUID | None
    partitions: int


def metadata_request_body(
    topics: Sequence[str],
    version: int = OWN_METADATA_VERSION,
    topic_ids: Sequence[uuid.UUID] = (),
) -> bytes:
    """A Metadata request body for these topics (by name, or by id from v10), creating none;
    no topics asks for brokers only."""
    cls = MetadataRequest
    return bytes(
        cls(
            version=version,
            topics=[
                cls.MetadataRequestTopic(version=version, name=name, topic_id=None)
                for name in topics
            ]
            + [
                cls.MetadataRequestTopic(version=version, name=None, topic_id=topic_id)
                for topic_id in topic_ids
            ],
            allow_auto_topic_creation=False,
            include_topic_authorized_operations=False,
        ).encode(version=version)
    )


#: Kafka's UNKNOWN_TOPIC_OR_PARTITION and UNKNOWN_TOPIC_ID
UNKNOWN_TOPIC = 3
UNKNOWN_TOPIC_ID = 100
_INT16 = Struct(">h")
_INT32 = Struct(">i")
_UUID = 16
#: kafka-python's string codec, classic or compact, for the hosts spliced in
_STRING = String()


class Broker(NamedTuple):
    node_id: int
    host: str
    port: int
    #: where in the frame its host string starts and its port ends: what a splice replaces
    host_at: int
    port_end: int


class MetadataAnswer(NamedTuple):
    """What the proxy takes from a Metadata response."""

    brokers: list[Broker]
    #: the topics described without error
    topics: list[TopicPartitions]
    #: the topics, by name and by id, the cluster says do not exist
    unknown_topics: list[str]
    unknown_topic_ids: list[uuid.UUID]


def read_metadata_response(frame: bytes, version: int) -> MetadataAnswer:
    """Read a Metadata response frame of any version (0-13) by its lengths."""
    try:
        answer, end = _read(frame, version)
    except ProtocolError:
        raise
    except (IndexError, struct_error, ValueError) as exc:  # a bad UTF-8 name is a ValueError
        raise ProtocolError(f"undecodable Metadata v{version} response: {exc!r}") from exc
    if end > len(frame):
        raise ProtocolError(f"Metadata v{version} response runs past its frame")
    return answer


def _read(frame: bytes, version: int) -> tuple[MetadataAnswer, int]:
    flexible = response_is_flexible(METADATA, version)
    pos = response_body_offset(frame, METADATA, version)
    if version >= 3:
        pos += 4  # throttle_time_ms
    brokers = []
    count, pos = read_length(frame, pos, flexible, _INT32)
    for _ in range(count):
        node_id: int = _INT32.unpack_from(frame, pos)[0]
        host_at = pos + 4
        host, pos = read_string(frame, host_at, flexible)
        if host is None:
            raise ProtocolError(f"Metadata v{version} response names a broker with no host")
        port: int = _INT32.unpack_from(frame, pos)[0]
        pos += 4
        brokers.append(Broker(node_id, host, port, host_at, pos))
        if version >= 1:
            pos = skip_string(frame, pos, flexible)  # rack
        if flexible:
            pos = skip_tagged_fields(frame, pos)
    if version >= 2:
        pos = skip_string(frame, pos, flexible)  # cluster_id
    if version >= 1:
        pos += 4  # controller_id
    described: list[TopicPartitions] = []
    unknown: list[str] = []
    unknown_ids: list[uuid.UUID] = []
    count, pos = read_length(frame, pos, flexible, _INT32)
    for _ in range(count):
        error_code: int = _INT16.unpack_from(frame, pos)[0]
        name, pos = read_string(frame, pos + 2, flexible)
        topic_id = None
        if version >= 10:
            raw = bytes(frame[pos : pos + _UUID])
            pos += _UUID
            if raw != _NO_TOPIC_ID.bytes:
                topic_id = uuid.UUID(bytes=raw)
        if version >= 1:
            pos += 1  # is_internal
        partitions, pos = read_length(frame, pos, flexible, _INT32)
        for _ in range(partitions):
            pos = _skip_partition(frame, pos, version, flexible)
        if version >= 8:
            pos += 4  # topic_authorized_operations
        if flexible:
            pos = skip_tagged_fields(frame, pos)
        if error_code == 0 and name is not None:
            described.append(TopicPartitions(name, topic_id, max(partitions, 0)))
        elif error_code == UNKNOWN_TOPIC and name:
            unknown.append(name)
        elif error_code == UNKNOWN_TOPIC_ID and topic_id is not None:
            unknown_ids.append(topic_id)
    if 8 <= version <= 10:
        pos += 4  # cluster_authorized_operations
    if version >= 13:
        pos += 2  # error_code
    if flexible:
        pos = skip_tagged_fields(frame, pos)
    return MetadataAnswer(brokers, described, unknown, unknown_ids), pos


def _skip_partition(frame: bytes, pos: int, version: int, flexible: bool) -> int:
    """error_code, partition_index, leader_id, leader_epoch (v7+), then the replica, ISR
    and offline replica (v5+) arrays of int32; a cluster's answer can hold many thousands,
    so a one-byte compact length is read in place."""
    pos += 14 if version >= 7 else 10
    for _ in range(3 if version >= 5 else 2):
        if flexible and frame[pos] < 0x80:
            pos += 1 + 4 * max(frame[pos] - 1, 0)
        else:
            nodes, pos = read_length(frame, pos, flexible, _INT32)
            pos += 4 * max(nodes, 0)
    if flexible:
        pos = skip_tagged_fields(frame, pos)
    return pos


def with_proxy_addresses(
    frame: bytes, brokers: Sequence[Broker], version: int, advertise: Advertise
) -> bytes | None:
    """The response frame naming the proxy's address for every broker, or None when it
    names no broker. Only the hosts and ports change: racks, tagged fields and topics are
    the broker's bytes."""
    flexible = response_is_flexible(METADATA, version)
    parts: list[bytes] = []
    copied = 4  # from after the size prefix
    for broker in brokers:
        if broker.node_id < 0:
            continue
        host, port = advertise(broker.node_id, broker.host, broker.port)
        parts += (
            frame[copied : broker.host_at],
            _STRING.encode(host, compact=flexible),
            _INT32.pack(port),
        )
        copied = broker.port_end
    if not parts:
        return None
    parts.append(frame[copied:])
    body = b"".join(parts)
    return _INT32.pack(len(body)) + body
