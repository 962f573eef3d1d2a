"""Producer ids and partitions read from real Produce requests, built with kafka-python's
record batch builder and request classes, at every version layout Kafka 4 accepts."""

from __future__ import annotations

import uuid

import pytest
from kafka.record.default_records import DefaultRecordBatchBuilder

from protocol.apis import DECODED, PRODUCE
from protocol.errors import ProtocolError
from protocol.headers import parse_request_header
from protocol.produce import produced_topics, producer_ids, refuse_produce
from tests.wire import decode_response, request_frame

REQUEST, RESPONSE = DECODED[PRODUCE]
TOPIC_ID = uuid.UUID(int=99)


def batch(producer_id: int, epoch: int = 0, records: int = 2) -> bytes:
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=0,
        is_transactional=False,
        producer_id=producer_id,
        producer_epoch=epoch,
        base_sequence=0 if producer_id >= 0 else -1,
        batch_size=1 << 20,
    )
    for offset in range(records):
        builder.append(offset, timestamp=1, key=None, value=b"v" * 40, headers=[])
    return bytes(builder.build())


def produce(version: int, partitions: dict[int, bytes | None], topic: str = "orders") -> bytes:
    data = REQUEST.TopicProduceData
    named = {"topic_id": TOPIC_ID} if version >= 13 else {"name": topic}
    msg = REQUEST(
        version=version,
        transactional_id=None,
        acks=-1,
        timeout_ms=30000,
        topic_data=[
            data(
                version=version,
                **named,
                partition_data=[
                    data.PartitionProduceData(version=version, index=index, records=records)
                    for index, records in partitions.items()
                ],
            )
        ],
    )
    return request_frame(PRODUCE, version, msg)


@pytest.mark.parametrize("version", [3, 8, 9, 12, 13])
def test_producer_ids_come_from_every_batch_of_every_partition(version: int) -> None:
    wire = produce(version, {0: batch(7) + batch(8), 3: batch(7, epoch=1), 5: None})
    header = parse_request_header(wire)
    assert producer_ids(wire, header) == [7, 8]  # distinct, in order; an epoch bump: same id
    topic = TOPIC_ID if version >= 13 else "orders"
    assert produced_topics(wire, header) == [(topic, [0, 3, 5])]


def test_a_producer_that_is_not_idempotent_is_never_charged() -> None:
    wire = produce(11, {0: batch(-1)})
    assert producer_ids(wire, parse_request_header(wire)) == []


@pytest.mark.parametrize("cut", [20, 60, 100])
def test_a_truncated_produce_is_a_protocol_error(cut: int) -> None:
    wire = produce(9, {0: batch(7)})
    short = (len(wire) - cut - 4).to_bytes(4, "big") + wire[4:-cut]
    with pytest.raises(ProtocolError):
        producer_ids(short, parse_request_header(short))


@pytest.mark.parametrize("version", [3, 9, 13])
def test_a_refusal_names_every_partition_with_the_error(version: int) -> None:
    wire = produce(version, {0: batch(7), 2: batch(7)})
    header = parse_request_header(wire)
    response = refuse_produce(header, produced_topics(wire, header), 89, 1500)
    msg = decode_response(RESPONSE, response, PRODUCE, version)
    assert msg.throttle_time_ms == 1500
    topic = msg.responses[0]
    assert (topic.topic_id if version >= 13 else topic.name) == (
        TOPIC_ID if version >= 13 else "orders"
    )
    assert [(p.index, p.error_code, p.base_offset) for p in topic.partition_responses] == [
        (0, 89, -1),
        (2, 89, -1),
    ]
