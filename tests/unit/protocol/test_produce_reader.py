"""Producer ids and partitions read from real Produce requests, built with kafka-python's
record batch builder and request classes, at every version layout Kafka 4 accepts."""

from __future__ import annotations

import uuid

import pytest

from localkafka.inprocess.wire import decode_response, produce_request, record_batch
from protocol.apis import DECODED, PRODUCE
from protocol.errors import ProtocolError
from protocol.headers import parse_request_header, request_body_offset
from protocol.produce import (
    ProduceRequestView,
    produced_topics,
    producer_ids,
    read_produce,
    refuse_produce,
)

REQUEST, RESPONSE = DECODED[PRODUCE]
TOPIC_ID = uuid.UUID(int=99)


def produce(version: int, partitions: dict[int, bytes | None]) -> bytes:
    return produce_request(version, partitions, TOPIC_ID if version >= 13 else "orders")


def view(wire: bytes) -> ProduceRequestView:
    header = parse_request_header(wire)
    return read_produce(wire, header, request_body_offset(wire, header))


def batch(producer_id: int, epoch: int = 0) -> bytes:
    return record_batch(producer_id, epoch, records=2, value=b"v" * 40)


@pytest.mark.parametrize("version", [3, 8, 9, 12, 13])
def test_producer_ids_come_from_every_batch_of_every_partition(version: int) -> None:
    wire = produce(version, {0: batch(7) + batch(8), 3: batch(7, epoch=1), 5: None})
    assert producer_ids(wire, view(wire)) == [7, 8]  # distinct, in order; an epoch bump: same id
    topic = TOPIC_ID if version >= 13 else "orders"
    assert produced_topics(wire, view(wire)) == [(topic, [0, 3, 5])]


def test_a_producer_that_is_not_idempotent_is_never_charged() -> None:
    wire = produce(11, {0: batch(-1)})
    assert producer_ids(wire, view(wire)) == []


@pytest.mark.parametrize("cut", [20, 60, 100])
def test_a_truncated_produce_is_a_protocol_error(cut: int) -> None:
    wire = produce(9, {0: batch(7)})
    short = (len(wire) - cut - 4).to_bytes(4, "big") + wire[4:-cut]
    with pytest.raises(ProtocolError):
        producer_ids(short, view(short))


@pytest.mark.parametrize("version", [3, 9, 13])
def test_a_refusal_names_every_partition_with_the_error(version: int) -> None:
    wire = produce(version, {0: batch(7), 2: batch(7)})
    header = parse_request_header(wire)
    response = refuse_produce(header, produced_topics(wire, view(wire)), 89, 1500)
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
