"""Metadata as the proxy asks for it itself and reads it from every Metadata response.

The proxy's own requests (start-up broker discovery, topic refreshes on a client's upstream
connection) and the topic cache fed by clients' Metadata responses use these, so there is one
way to ask a broker about brokers and topics.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any, NamedTuple

from kafka.protocol.metadata import MetadataRequest

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


def unknown_topics(msg: Any) -> list[str]:
    """The topics a decoded Metadata response says do not exist."""
    return [str(t.name) for t in msg.topics or () if t.error_code == UNKNOWN_TOPIC and t.name]


def unknown_topic_ids(msg: Any) -> list[uuid.UUID]:
    """The topic ids a decoded Metadata response says do not exist."""
    return [
        t.topic_id
        for t in msg.topics or ()
        if t.error_code == UNKNOWN_TOPIC_ID and getattr(t, "topic_id", None) is not None
    ]


def broker_ids(msg: Any) -> list[int]:
    return [int(broker.node_id) for broker in msg.brokers or ()]


def topic_partitions(msg: Any) -> list[TopicPartitions]:
    """The partition count of every topic a decoded Metadata response describes without error."""
    found = []
    for topic in msg.topics or ():
        if topic.error_code != 0 or topic.name is None:
            continue
        topic_id = getattr(topic, "topic_id", None)
        if topic_id == _NO_TOPIC_ID:
            topic_id = None
        found.append(TopicPartitions(str(topic.name), topic_id, len(topic.partitions or ())))
    return found
