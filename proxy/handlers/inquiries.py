"""What a handler asks the cluster before it decides: the topics' current state (Metadata)
and the partitions a topic gets by default (DescribeConfigs), asked on the client's own
connection and answered into the topic cache, which every connection shares."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Sequence

from protocol.apis import DESCRIBE_CONFIGS, METADATA
from protocol.errors import ProtocolError
from protocol.metadata import OWN_METADATA_VERSION, metadata_request_body
from protocol.mutations import default_partitions, describe_default_partitions_body
from proxy.handlers.base import Channel
from proxy.handlers.metadata import read_metadata

log = logging.getLogger(__name__)


def ask_topics(
    channel: Channel,
    names: Sequence[str],
    topic_ids: Sequence[uuid.UUID] = (),
    then: Callable[[], object] | None = None,
) -> bool:
    """Refresh the topic cache for these topics (no names and no ids: the brokers alone);
    `then` runs once the last answer is in. A broker given topic ids answers for those
    alone, so names and ids are asked in two requests, answered in order."""
    if names and topic_ids:
        return ask_topics(channel, names) and ask_topics(channel, (), topic_ids, then)

    def learn(frame: bytes) -> None:
        read_metadata(channel, frame, OWN_METADATA_VERSION)
        if then is not None:
            then()

    body = metadata_request_body(names, topic_ids=topic_ids)
    return channel.cluster.ask(METADATA, OWN_METADATA_VERSION, body, learn)


def ask_default_partitions(channel: Channel, now_ms: int) -> bool:
    """Ask the brokers for num.partitions; a broker describes only itself, so every known
    broker is named. False when no broker is known yet or nothing can be sent. A cluster
    that does not answer is asked again a while after `now_ms`."""
    topics = channel.runtime.topics
    if not topics.broker_ids:
        return False
    version, body = describe_default_partitions_body(topics.broker_ids)

    def learn(frame: bytes) -> None:
        try:
            count = default_partitions(frame, version)
        except ProtocolError as exc:
            log.warning("num.partitions unreadable in the cluster's answer: %s", exc)
            count = None
        topics.learn_default_partitions(count, now_ms)

    return channel.cluster.ask(DESCRIBE_CONFIGS, version, body, learn)


def inquire(
    channel: Channel,
    names: Sequence[str],
    topic_ids: Sequence[uuid.UUID],
    default: bool,
    now_ms: int,
) -> bool:
    """Ask about these topics, and num.partitions when `default`; the topics come first,
    since their answer also names the brokers num.partitions is asked of."""
    if not (names or topic_ids):
        if channel.runtime.topics.broker_ids:
            return default and ask_default_partitions(channel, now_ms)
        if not default:
            return False
    then = (lambda: ask_default_partitions(channel, now_ms)) if default else None
    return ask_topics(channel, names, topic_ids, then)
