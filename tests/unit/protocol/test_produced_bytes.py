"""A Produce request's record bytes by topic, read by the lengths (what a topic's
producer_byte_rate charges), in every layout Kafka 4 accepts."""

from __future__ import annotations

import uuid

import pytest

from localkafka.inprocess.wire import produce_request, record_batch
from protocol.errors import ProtocolError
from protocol.headers import parse_request_header, request_body_offset
from protocol.produce import produced_bytes, produced_partition_bytes, read_produce

BATCH = record_batch(-1, records=3, value=b"v" * 100)


def sizes(frame: bytes) -> dict[str | uuid.UUID, int]:
    header = parse_request_header(frame)
    return produced_bytes(frame, read_produce(frame, header, request_body_offset(frame, header)))


@pytest.mark.parametrize("version", [3, 7, 8, 9, 11, 12])
def test_each_partition_s_records_count_for_its_topic(version: int) -> None:
    frame = produce_request(version, {0: BATCH, 1: BATCH, 2: None})
    assert sizes(frame) == {"orders": 2 * len(BATCH)}


def test_from_v13_a_topic_is_named_by_its_id() -> None:
    topic_id = uuid.UUID(int=7)
    assert sizes(produce_request(13, {0: BATCH}, topic=topic_id)) == {topic_id: len(BATCH)}


def test_a_truncated_request_is_refused() -> None:
    frame = produce_request(9, {0: BATCH})
    with pytest.raises(ProtocolError):
        sizes(frame[:-40])


@pytest.mark.parametrize("value_bytes", [1, 100, 20_000])
@pytest.mark.parametrize("topic", ["t", "t" * 200])
def test_lengths_of_one_two_and_three_varint_bytes_read_alike(value_bytes: int, topic: str) -> None:
    """The inline reads of short compact lengths and the primitives' longer ones agree."""
    batch = record_batch(-1, records=1, value=b"v" * value_bytes)
    for version in (8, 12):
        assert sizes(produce_request(version, {0: batch, 1: batch}, topic)) == {
            topic: 2 * len(batch)
        }


@pytest.mark.parametrize("version", [3, 9, 12])
def test_by_partition_each_partition_s_records_count_for_it(version: int) -> None:
    """What the disk guard charges: a partition with no records is not named."""
    other = record_batch(-1, records=1, value=b"w" * 20_000)
    frame = produce_request(version, {0: BATCH, 4: other, 2: None})
    header = parse_request_header(frame)
    view = read_produce(frame, header, request_body_offset(frame, header))
    assert produced_partition_bytes(frame, view) == {
        ("orders", 0): len(BATCH),
        ("orders", 4): len(other),
    }
