"""Metadata responses read by their lengths and given the proxy's addresses by a splice.

Every expectation is kafka-python's codec: the frame a splice gives must be, byte for byte,
the frame kafka-python encodes for the same message with the proxy's addresses in it, and
what the reader takes must be what that message says, for every version the proxy decodes.
"""

from __future__ import annotations

import contextlib
import random
import struct
import uuid
from typing import Any

import pytest
from kafka.protocol.metadata import MetadataResponse
from kafka.protocol.schemas.fields.codecs.types import String

from localkafka.inprocess.wire import response_frame
from protocol.apis import METADATA
from protocol.errors import ProtocolError
from protocol.metadata import (
    UNKNOWN_TOPIC,
    UNKNOWN_TOPIC_ID,
    TopicPartitions,
    read_metadata_response,
    with_proxy_addresses,
)
from protocol.rewrite import Advertise
from proxy.handlers.registry import DECODED_VERSIONS

VERSIONS = range(DECODED_VERSIONS[METADATA] + 1)
BROKER = MetadataResponse.MetadataResponseBroker
TOPIC = MetadataResponse.MetadataResponseTopic
PARTITION = TOPIC.MetadataResponsePartition
NO_ID = uuid.UUID(int=0)
#: a host long enough that its compact length takes two varint bytes, and one not ASCII
HOSTS = ["kafka-1", "b" * 200 + ".example", "brøker.local"]


def proxy_address(node_id: int) -> tuple[str, int]:
    return ("proxy.local" if node_id % 2 else "p" * 150), 20000 + node_id


def message(version: int, brokers: list[tuple[int, str, int]], topics: list[Any]) -> Any:
    return MetadataResponse(
        version=version,
        throttle_time_ms=7,
        brokers=[
            BROKER(version=version, node_id=n, host=h, port=p, rack="r1" if n % 2 else None)
            for n, h, p in brokers
        ],
        cluster_id="cluster",
        controller_id=1,
        topics=topics,
        error_code=0,
    )


def random_topics(version: int, rng: random.Random) -> tuple[list[Any], list[Any]]:
    """Topics of every kind a broker answers with, and what the reader must take from them."""
    topics: list[Any] = []
    described: list[TopicPartitions] = []
    unknown: list[str] = []
    unknown_ids: list[uuid.UUID] = []
    for index in range(rng.randrange(6)):
        error = rng.choice([0, 0, UNKNOWN_TOPIC, UNKNOWN_TOPIC_ID, 29])
        name: str | None = f"topic-{index}"
        if version >= 12 and error == UNKNOWN_TOPIC_ID:
            name = None  # asked for by id
        topic_id = uuid.uuid4() if version >= 10 and error != UNKNOWN_TOPIC else NO_ID
        partitions = [
            PARTITION(
                version=version,
                error_code=0,
                partition_index=p,
                leader_id=rng.randrange(3),
                leader_epoch=5,
                replica_nodes=[rng.randrange(9) for _ in range(rng.randrange(4))],
                isr_nodes=[1],
                offline_replicas=[2] * rng.randrange(2),
            )
            for p in range(rng.randrange(5) if error == 0 else 0)
        ]
        topics.append(
            TOPIC(
                version=version,
                error_code=error,
                name=name,
                topic_id=topic_id,
                is_internal=False,
                partitions=partitions,
            )
        )
        known_id = topic_id if version >= 10 and topic_id != NO_ID else None
        if error == 0:
            described.append(TopicPartitions(str(name), known_id, len(partitions)))
        elif error == UNKNOWN_TOPIC:
            unknown.append(str(name))
        elif error == UNKNOWN_TOPIC_ID and known_id is not None:
            unknown_ids.append(known_id)
    return topics, [described, unknown, unknown_ids]


def recording(asked: list[tuple[int, str, int]]) -> Advertise:
    def advertise(node_id: int, host: str, port: int) -> tuple[str, int]:
        asked.append((node_id, host, port))
        return proxy_address(node_id)

    return advertise


@pytest.mark.parametrize("version", VERSIONS)
def test_the_splice_is_what_the_codec_encodes_with_proxy_addresses(version: int) -> None:
    rng = random.Random(version)
    for _ in range(30):
        brokers = [(n, rng.choice(HOSTS), 9092 + n) for n in range(1, rng.randrange(2, 5))]
        topics, expected = random_topics(version, rng)
        frame = response_frame(METADATA, version, message(version, brokers, topics))

        answer = read_metadata_response(frame, version)
        assert [(b.node_id, b.host, b.port) for b in answer.brokers] == brokers
        assert [answer.topics, answer.unknown_topics, answer.unknown_topic_ids] == expected

        asked: list[tuple[int, str, int]] = []
        spliced = with_proxy_addresses(frame, answer.brokers, version, recording(asked))
        proxied = [(n, *proxy_address(n)) for n, _, _ in brokers]
        assert spliced == response_frame(METADATA, version, message(version, proxied, topics))
        assert asked == brokers


def test_a_broker_with_no_node_id_and_no_brokers_are_left_alone() -> None:
    frame = response_frame(METADATA, 12, message(12, [(-1, "kafka-1", 9092)], []))
    answer = read_metadata_response(frame, 12)
    assert with_proxy_addresses(frame, answer.brokers, 12, lambda *_: ("x", 1)) is None
    empty = response_frame(METADATA, 12, message(12, [], []))
    assert with_proxy_addresses(empty, [], 12, lambda *_: ("x", 1)) is None


def test_tagged_fields_the_proxy_does_not_know_pass_through() -> None:
    frame = response_frame(METADATA, 12, message(12, [(1, "kafka-1", 9092)], []))
    assert frame.endswith(b"\x00")  # no top-level tagged fields
    tagged = frame[:-1] + b"\x01\x05\x02ab"  # one: tag 5, two bytes
    tagged = len(tagged[4:]).to_bytes(4, "big") + tagged[4:]
    answer = read_metadata_response(tagged, 12)
    spliced = with_proxy_addresses(tagged, answer.brokers, 12, lambda *_: ("proxy.local", 20001))
    assert spliced is not None and spliced.endswith(b"\x01\x05\x02ab")


def compact(text: str) -> bytes:
    return bytes(String().encode(text, compact=True))


def v12_frame(brokers: list[tuple[int, str, int]], tags: bytes) -> bytes:
    """A Metadata v12 response kafka-python cannot make: `tags` at every level (header,
    broker, topic, partition, body), a replica array of 200 (a two-byte compact length)."""
    replicas = struct.pack(">200i", *range(200))
    partition = struct.pack(">hiii", 0, 0, 1, 3) + b"\xc9\x01" + replicas + b"\x02" + replicas[:4]
    partition += b"\x01" + tags  # no offline replicas
    topic = struct.pack(">h", 0) + compact("t") + uuid.UUID(int=1).bytes
    topic += b"\x00"  # not internal
    topic += b"\x02" + partition + struct.pack(">i", -(2**31)) + tags  # one partition
    body = struct.pack(">i", 0) + bytes([len(brokers) + 1])
    for node_id, host, port in brokers:
        body += struct.pack(">i", node_id) + compact(host) + struct.pack(">i", port)
        body += b"\x00" + tags  # no rack
    body += b"\x00" + struct.pack(">i", 1) + b"\x02" + topic + tags  # no cluster id
    header = struct.pack(">i", 9) + tags
    return struct.pack(">i", len(header) + len(body)) + header + body


def test_tagged_fields_at_every_level_long_arrays_and_a_broker_without_id() -> None:
    tags = b"\x02\x00\x03abc\x07\x01z"  # two tagged fields the proxy does not know
    brokers = [(1, "kafka-1", 9092), (-1, "x" * 300, 1), (2, "brøker", 9093)]
    frame = v12_frame(brokers, tags)
    answer = read_metadata_response(frame, 12)
    assert [(b.node_id, b.host, b.port) for b in answer.brokers] == brokers
    assert [(t.name, t.partitions) for t in answer.topics] == [("t", 1)]
    spliced = with_proxy_addresses(frame, answer.brokers, 12, lambda n, h, p: ("é", 20000 + n))
    proxied = [(1, "é", 20001), (-1, "x" * 300, 1), (2, "é", 20002)]
    assert spliced == v12_frame(proxied, tags)


@pytest.mark.parametrize("version", [0, 9, 12])
def test_a_cut_or_garbled_response_is_a_protocol_error_and_nothing_else(version: int) -> None:
    rng = random.Random(version)
    topics, _ = random_topics(version, rng)
    frame = response_frame(METADATA, version, message(version, [(1, "kafka-1", 9092)], topics))
    for end in range(4, len(frame)):
        with pytest.raises(ProtocolError):
            read_metadata_response(frame[:end], version)
    for _ in range(3000):
        garbled = bytearray(frame)
        for _ in range(rng.randrange(1, 4)):
            garbled[rng.randrange(8, len(garbled))] = rng.randrange(256)
        with contextlib.suppress(ProtocolError):
            read_metadata_response(bytes(garbled), version)
