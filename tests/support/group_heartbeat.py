"""ConsumerGroupHeartbeat request frames, written by hand: kafka-python has no codec for
KIP-848's API, and the guard reads only the fields before TopicPartitions' contents."""

from __future__ import annotations

import struct
import uuid

from localkafka.inprocess.wire import request_frame
from protocol.apis import CONSUMER_GROUP_HEARTBEAT


def _string(text: str | None) -> bytes:
    if text is None:
        return b"\x00"
    data = text.encode()
    return bytes([len(data) + 1]) + data


def heartbeat(
    epoch: int,
    version: int = 1,
    topics: list[str] | None = None,
    regex: str | None = None,
    partitions: list[tuple[uuid.UUID, list[int]]] | None = None,
    correlation_id: int = 1,
) -> bytes:
    """A member's heartbeat; None leaves a field null (unchanged since the last one)."""
    body = b"\x00"  # the request header's tagged fields: every version is flexible
    body += _string("group") + _string("member-1") + struct.pack(">i", epoch)
    body += _string(None) + _string(None) + struct.pack(">i", -1)
    if topics is None:
        body += b"\x00"
    else:
        body += bytes([len(topics) + 1]) + b"".join(_string(topic) for topic in topics)
    if version >= 1:
        body += _string(regex)
    body += _string(None)  # ServerAssignor
    if partitions is None:
        body += b"\x00"
    else:
        body += bytes([len(partitions) + 1])
        for topic_id, indexes in partitions:
            body += topic_id.bytes + bytes([len(indexes) + 1])
            body += b"".join(struct.pack(">i", index) for index in indexes) + b"\x00"
    body += b"\x00"  # the body's tagged fields
    return request_frame(CONSUMER_GROUP_HEARTBEAT, version, body, correlation_id)
