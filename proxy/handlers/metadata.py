"""Metadata: clients learn only proxy addresses, and the topic cache learns partition counts."""

from __future__ import annotations

from protocol.apis import METADATA
from protocol.headers import response_body_offset
from protocol.metadata import broker_ids, topic_partitions, unknown_topic_ids, unknown_topics
from protocol.rewrite import decode_response, reframe, rewrite_decoded
from proxy.handlers.base import Exchange, Handler, Reply, Session


def read_metadata(session: Session, frame: bytes, api_version: int) -> bytes:
    """Decode once: record the topics' partition counts, rewrite the brokers' addresses."""
    offset = response_body_offset(frame, METADATA, api_version)
    msg = decode_response(frame, offset, METADATA, api_version)
    topics = session.topics
    topics.learn(topic_partitions(msg))
    topics.forget(unknown_topics(msg))
    topics.forget_ids(unknown_topic_ids(msg))
    if msg.brokers:
        topics.broker_ids = broker_ids(msg)
    if rewrite_decoded(msg, METADATA, api_version, session.advertise):
        return reframe(frame, offset, bytes(msg.encode()))
    return frame


class MetadataHandler(Handler):
    def on_response(self, session: Session, frame: bytes, exchange: Exchange, now_ms: int) -> Reply:
        return Reply(read_metadata(session, frame, exchange.api_version))
