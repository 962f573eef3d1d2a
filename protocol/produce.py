"""What the proxy reads from Produce requests without decoding records."""

from __future__ import annotations

import uuid
from struct import Struct
from struct import error as struct_error
from typing import Final, NamedTuple

from protocol.apis import DECODED, PRODUCE
from protocol.errors import ProtocolError
from protocol.headers import RequestHeader, encode_response
from protocol.primitives import read_length, read_string, skip_string, skip_tagged_fields

_INT16 = Struct(">h")


class ProduceRequestView(NamedTuple):
    """What a Produce request's handling reads before its records: read once."""

    version: int
    acks: int
    #: where the topics array starts, past transactional_id, acks and timeout_ms
    topics_at: int


def read_produce(frame: bytes, header: RequestHeader, body_offset: int) -> ProduceRequestView:
    """acks (acks=0 requests get no response from the broker) and where the topics start.

    From v3 the body starts with the nullable transactional_id (compact from v9), then acks.
    """
    assert header.api_key == PRODUCE
    version, pos = header.api_version, body_offset
    if version >= 3:
        try:
            pos = skip_string(frame, pos, version >= 9)
        except struct_error as exc:
            raise ProtocolError("Produce request truncated before transactional_id") from exc
    if pos + 2 > len(frame):
        raise ProtocolError("Produce request truncated before acks")
    acks: int = _INT16.unpack_from(frame, pos)[0]
    return ProduceRequestView(version, acks, pos + 6)


#: (topic name, or topic id from v13; partition indexes) of a Produce request, in its order
ProducedTopics = list[tuple[str | uuid.UUID, list[int]]]


#: record batch v2 (magic 2): batchLength after the base offset, magic and producerId at
#: fixed offsets from the batch's start; older message formats carry no producer id
_BATCH_LENGTH_AT: Final = 8
_MAGIC_AT: Final = 16
_PRODUCER_ID_AT: Final = 43
_BATCH_HEADER: Final = 61
_NO_PRODUCER_ID: Final = -1
_INT32 = Struct(">i")
_INT64 = Struct(">q")
_UUID: Final = 16


def producer_ids(frame: bytes, view: ProduceRequestView) -> list[int]:
    """The distinct producer ids of a Produce request's record batches, in order, -1 (not
    idempotent) left out: read at their fixed offsets, never decoding a record."""
    return _walk(frame, view, None)


def produced_topics(frame: bytes, view: ProduceRequestView) -> ProducedTopics:
    """Where a Produce request writes: what a refusal must name (rare, so read apart)."""
    topics: ProducedTopics = []
    _walk(frame, view, topics)
    return topics


def produced_bytes(frame: bytes, view: ProduceRequestView) -> dict[str | uuid.UUID, int]:
    """The record bytes a Produce request writes into each topic (name, or id from v13):
    what a topic's producer_byte_rate charges, read by the lengths, never a record.

    Read for every Produce while a topic quota applies, so its own loop: the compact lengths
    clients send (one byte for counts and names, two for a batch under 16 KiB) and empty
    tagged fields are read inline, anything longer by the primitives."""
    return _produced(frame, view, None)


def produced_partition_bytes(
    frame: bytes, view: ProduceRequestView
) -> dict[tuple[str | uuid.UUID, int], int]:
    """The record bytes a Produce request writes into each partition: what the disk guard
    charges to the log directories holding it (docs/ceilings.md)."""
    partitions: dict[tuple[str | uuid.UUID, int], int] = {}
    _produced(frame, view, partitions)
    return partitions


def _produced(
    frame: bytes,
    view: ProduceRequestView,
    partitions: dict[tuple[str | uuid.UUID, int], int] | None,
) -> dict[str | uuid.UUID, int]:
    """By topic; by partition too, into `partitions`, when given."""
    version, flexible = view.version, view.version >= 9
    sizes: dict[str | uuid.UUID, int] = {}
    if version < 3:
        return sizes
    pos = view.topics_at
    try:
        if flexible and frame[pos] < 0x80:
            topic_count, pos = frame[pos] - 1, pos + 1
        else:
            topic_count, pos = read_length(frame, pos, flexible, _INT32)
        for _ in range(topic_count):
            topic: str | uuid.UUID | None
            if version >= 13:
                topic = uuid.UUID(bytes=bytes(frame[pos : pos + _UUID]))
                pos += _UUID
            elif flexible and 0 < frame[pos] < 0x80:
                end = pos + frame[pos]
                topic = str(frame[pos + 1 : end], "utf-8")
                pos = end
            else:
                topic, pos = read_string(frame, pos, flexible)
                if topic is None:
                    raise ProtocolError(f"Produce request v{version} names a null topic")
            if flexible and frame[pos] < 0x80:
                partition_count, pos = frame[pos] - 1, pos + 1
            else:
                partition_count, pos = read_length(frame, pos, flexible, _INT32)
            written = 0
            for _ in range(partition_count):
                index = pos
                pos += 4  # the partition index
                if not flexible:
                    length = _INT32.unpack_from(frame, pos)[0]
                    pos += 4
                elif frame[pos] < 0x80:
                    length, pos = frame[pos] - 1, pos + 1
                elif frame[pos + 1] < 0x80:
                    length = ((frame[pos] & 0x7F) | frame[pos + 1] << 7) - 1
                    pos += 2
                else:
                    length, pos = read_length(frame, pos, True, _INT32)
                if length > 0:
                    pos += length
                    written += length
                    if partitions is not None:
                        partition = (topic, _INT32.unpack_from(frame, index)[0])
                        partitions[partition] = partitions.get(partition, 0) + length
                if flexible:
                    pos = pos + 1 if frame[pos] == 0 else skip_tagged_fields(frame, pos)
            if flexible:
                pos = pos + 1 if frame[pos] == 0 else skip_tagged_fields(frame, pos)
            sizes[topic] = sizes.get(topic, 0) + written
    except (IndexError, struct_error, UnicodeDecodeError) as exc:
        raise ProtocolError(f"Produce request v{version} truncated or malformed") from exc
    if pos > len(frame):
        raise ProtocolError(f"Produce request v{version} runs past its frame")
    return sizes


def _walk(frame: bytes, view: ProduceRequestView, topics: ProducedTopics | None) -> list[int]:
    """Step over a Produce request (v3+, what Kafka 4 accepts) by its lengths, collecting
    producer ids, and the topics and partitions when asked."""
    version, flexible = view.version, view.version >= 9
    #: a dict keeps the ids distinct and in order in linear time, however many batches
    found: dict[int, None] = {}
    if version < 3:
        return []  # v0-v2 carry message formats 0 and 1, which have no producer id
    try:
        topic_count, pos = read_length(frame, view.topics_at, flexible, _INT32)
        for _ in range(topic_count):
            named = pos
            if version >= 13:
                pos += _UUID
            else:
                pos = skip_string(frame, pos, flexible)
            partitions: list[int] = []
            partition_count, pos = read_length(frame, pos, flexible, _INT32)
            for _ in range(partition_count):
                if topics is not None:
                    partitions.append(_INT32.unpack_from(frame, pos)[0])
                length, pos = read_length(frame, pos + 4, flexible, _INT32)
                if length > 0:
                    _batch_producer_ids(frame, pos, pos + length, found)
                    pos += length
                if flexible:
                    pos = skip_tagged_fields(frame, pos)
            if flexible:
                pos = skip_tagged_fields(frame, pos)
            if topics is not None:
                topic: str | uuid.UUID
                if version >= 13:
                    topic = uuid.UUID(bytes=bytes(frame[named : named + _UUID]))
                else:
                    name, _ = read_string(frame, named, flexible)
                    if name is None:
                        raise ProtocolError(f"Produce request v{version} names a null topic")
                    topic = name
                topics.append((topic, partitions))
    except (IndexError, struct_error, UnicodeDecodeError) as exc:
        raise ProtocolError(f"Produce request v{version} truncated or malformed") from exc
    if pos > len(frame):
        raise ProtocolError(f"Produce request v{version} runs past its frame")
    return list(found)


def _batch_producer_ids(frame: bytes, pos: int, end: int, found: dict[int, None]) -> None:
    if end > len(frame):
        raise ProtocolError("Produce records run past the frame")
    while pos + _BATCH_HEADER <= end:
        batch_end = pos + 12 + _INT32.unpack_from(frame, pos + _BATCH_LENGTH_AT)[0]
        if frame[pos + _MAGIC_AT] == 2:
            producer_id = _INT64.unpack_from(frame, pos + _PRODUCER_ID_AT)[0]
            if producer_id != _NO_PRODUCER_ID:
                found[producer_id] = None
        if batch_end <= pos:
            raise ProtocolError("record batch with a negative length")
        pos = batch_end


def refuse_produce(
    header: RequestHeader,
    topics: ProducedTopics,
    error_code: int,
    throttle_ms: int,
) -> bytes:
    """The response Kafka gives a Produce request it rejects whole: every partition with
    the error and no offset."""
    version = header.api_version
    cls = DECODED[PRODUCE][1]
    topic_cls = cls.TopicProduceResponse
    partition_cls = topic_cls.PartitionProduceResponse
    responses = []
    for topic, partitions in topics:
        named = {"topic_id": topic} if isinstance(topic, uuid.UUID) else {"name": topic}
        responses.append(
            topic_cls(
                version=version,
                **named,
                partition_responses=[
                    partition_cls(
                        version=version,
                        index=index,
                        error_code=error_code,
                        base_offset=-1,
                        log_append_time_ms=-1,
                        log_start_offset=-1,
                        record_errors=[],
                        error_message=None,
                    )
                    for index in partitions
                ],
            )
        )
    msg = cls(version=version, responses=responses, throttle_time_ms=throttle_ms)
    return encode_response(header.correlation_id, PRODUCE, version, bytes(msg.encode()))
