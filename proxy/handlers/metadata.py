"""Metadata: clients learn only proxy addresses, and the topic cache learns partition counts."""

from __future__ import annotations

from protocol.metadata import read_metadata_response, with_proxy_addresses
from proxy.handlers.base import Channel, Handler, Request


def read_metadata(channel: Channel, frame: bytes, api_version: int) -> bytes:
    """Read once: record the topics' partition counts, splice in the proxy's addresses."""
    answer = read_metadata_response(frame, api_version)
    runtime = channel.runtime
    topics = runtime.topics
    topics.learn(answer.topics)
    topics.forget(answer.unknown_topics)
    topics.forget_ids(answer.unknown_topic_ids)
    if answer.brokers:
        topics.broker_ids = [broker.node_id for broker in answer.brokers]
    spliced = with_proxy_addresses(frame, answer.brokers, api_version, runtime.advertise)
    return frame if spliced is None else spliced


class MetadataHandler(Handler):
    def on_response(self, channel: Channel, frame: bytes, request: Request) -> bytes:
        return read_metadata(channel, frame, request.header.api_version)
