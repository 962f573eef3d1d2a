"""Kafka wire frames for unit tests, built and read with kafka-python's schema codecs.

One place that knows how a request or response header is laid out for a given API version,
so a test states the message it sends and never hand-packs a header.
"""

from __future__ import annotations

import struct
import uuid
from typing import Any

from kafka.record.default_records import DefaultRecordBatchBuilder

from protocol.apis import DECODED, PRODUCE, request_is_flexible
from protocol.headers import encode_response, parse_request_header, response_body_offset


def body_of(msg: Any, version: int) -> bytes:
    """A message's encoded body; bytes are taken as an already encoded body."""
    return msg if isinstance(msg, bytes) else bytes(msg.encode(version=version))


def request_frame(
    api_key: int,
    version: int,
    msg: Any = b"",
    correlation_id: int = 1,
    client_id: bytes | None = b"app",
) -> bytes:
    """A request with the header its version uses (v2, with empty tagged fields, when the API
    is flexible at that version; v1 otherwise, and for APIs the proxy forwards undecoded)."""
    cid = struct.pack(">h", -1) if client_id is None else struct.pack(">h", len(client_id))
    header = struct.pack(">hhi", api_key, version, correlation_id) + cid + (client_id or b"")
    if api_key in DECODED and request_is_flexible(api_key, version):
        header += b"\x00"
    payload = header + body_of(msg, version)
    return struct.pack(">i", len(payload)) + payload


def response_frame(api_key: int, version: int, msg: Any = b"", correlation_id: int = 9) -> bytes:
    return encode_response(correlation_id, api_key, version, body_of(msg, version))


def decode_request(cls: Any, frame: bytes) -> Any:
    header = parse_request_header(frame)
    offset = header.client_id_end
    if request_is_flexible(header.api_key, header.api_version):
        offset += 1  # the frames here carry no tagged fields
    return cls.decode(frame[offset:], version=header.api_version)


def decode_response(cls: Any, frame: bytes, api_key: int, version: int) -> Any:
    return cls.decode(frame[response_body_offset(frame, api_key, version) :], version=version)


def record_batch(producer_id: int, epoch: int = 0, records: int = 1, value: bytes = b"v") -> bytes:
    """A v2 record batch of an idempotent producer (-1: one that is not idempotent)."""
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=0,
        is_transactional=False,
        producer_id=producer_id,
        producer_epoch=epoch,
        base_sequence=0 if producer_id >= 0 else -1,
        batch_size=1 << 24,
    )
    for offset in range(records):
        builder.append(offset, timestamp=1, key=None, value=value, headers=[])
    return bytes(builder.build())


def produce_request(
    version: int,
    partitions: dict[int, bytes | None],
    topic: str | uuid.UUID = "orders",
    correlation_id: int = 1,
    acks: int = -1,
    client_id: bytes = b"app",
) -> bytes:
    """A Produce request of these records per partition of one topic (a topic id from v13)."""
    cls = DECODED[PRODUCE][0]
    data = cls.TopicProduceData
    named = {"topic_id": topic} if isinstance(topic, uuid.UUID) else {"name": topic}
    msg = cls(
        version=version,
        transactional_id=None,
        acks=acks,
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
    return request_frame(PRODUCE, version, msg, correlation_id, client_id)
