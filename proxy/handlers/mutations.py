"""CreateTopics, CreatePartitions, DeleteTopics: partition mutations charged to a token
bucket per principal (KIP-599, controller_mutation_rate).

The count is Kafka's: the partitions of each created topic (the cluster's num.partitions for
-1, the assignment entries when given), the partitions added, the partitions of each deleted
topic. Current counts come from the topic cache, refreshed for the named topics before each
CreatePartitions and DeleteTopics, since another client may have changed them; a topic the
cluster does not know counts nothing and gets the broker's own error.
"""

from __future__ import annotations

import logging
from typing import NamedTuple

from protocol.apis import CREATE_PARTITIONS, CREATE_TOPICS
from protocol.mutations import (
    MutationRequest,
    TopicMutation,
    keep_topics,
    merge_refused,
    read_mutations,
    refuse_all,
    topic_errors,
)
from proxy.enforcement import Decision
from proxy.handlers.base import (
    Answer,
    Defer,
    Exchange,
    Forward,
    Handler,
    Outcome,
    Reply,
    Request,
    Session,
)
from proxy.topics import TopicCache
from quotas.managers import ClientSensors

log = logging.getLogger(__name__)

#: Kafka's own num.partitions default, when the cluster could not be asked
_KAFKA_DEFAULT_PARTITIONS = 1


class _Charged(NamedTuple):
    """What the response needs: which topics to put back refused, which to refund."""

    request: MutationRequest
    sensors: ClientSensors
    counts: list[int]
    refused: list[int]
    decision: Decision | None


def _current(topics: TopicCache, topic: TopicMutation) -> int | None:
    known = None
    if topic.topic_id is not None:
        known = topics.by_id(topic.topic_id)
    if known is None and topic.name is not None:
        known = topics.by_name(topic.name)
    return None if known is None else known.partitions


def _count(api_key: int, topics: TopicCache, topic: TopicMutation) -> int:
    if api_key == CREATE_TOPICS:
        if topic.partitions is not None:
            return max(topic.partitions, 0)
        return topics.default_partitions or _KAFKA_DEFAULT_PARTITIONS
    current = _current(topics, topic)
    if current is None:
        return 0  # the broker answers UNKNOWN_TOPIC_OR_PARTITION (or _ID); nothing mutates
    if api_key == CREATE_PARTITIONS:
        return max((topic.partitions or 0) - current, 0)
    return current


def _inquiry(request: MutationRequest, topics: TopicCache) -> Defer | None:
    """What to ask the cluster before counting, or None."""
    if request.header.api_key == CREATE_TOPICS:
        needs_default = topics.default_partitions is None and any(
            topic.partitions is None for topic in request.topics
        )
        return Defer(default_partitions=True) if needs_default else None
    names = tuple(t.name for t in request.topics if t.topic_id is None and t.name is not None)
    ids = tuple(t.topic_id for t in request.topics if t.topic_id is not None)
    return Defer(names, ids) if names or ids else None


class MutationsHandler(Handler):
    def on_request(self, session: Session, request: Request) -> Outcome:
        enforcer, now = session.enforcer, request.now_ms
        sensors = enforcer.mutation_sensors(session.principal(request.client_id), now)
        if sensors is None:
            return Forward(request.frame)
        mutations = read_mutations(request.frame, request.header)
        if mutations.validate_only or not mutations.topics:
            return Forward(request.frame)  # KIP-599: validation mutates nothing
        topics, api_key = session.topics, request.header.api_key
        if not request.refreshed:
            inquiry = _inquiry(mutations, topics)
            if inquiry is not None:
                return inquiry
        if api_key == CREATE_TOPICS and _inquiry(mutations, topics) is not None:
            log.warning("num.partitions unknown: a topic created with -1 partitions counts as 1")
        counts = [_count(api_key, topics, topic) for topic in mutations.topics]
        refused, decision = enforcer.admit_mutations(sensors, counts, mutations.strict, now)
        charged = _Charged(mutations, sensors, counts, refused, decision)
        if not refused:
            return Forward(request.frame, charged)
        throttle = decision.throttle_ms if decision is not None else 0
        if len(refused) == len(counts):
            applied = enforcer.settle_without_response(decision, now) if decision else 0
            return Answer(refuse_all(mutations, throttle), mute_ms=applied)
        admitted = sorted(set(range(len(counts))) - set(refused))
        return Forward(keep_topics(mutations, request.frame, admitted), charged)

    def on_response(self, session: Session, frame: bytes, exchange: Exchange, now_ms: int) -> Reply:
        charged = exchange.state
        if not isinstance(charged, _Charged):
            return Reply(frame)
        request = charged.request
        api_key, version = request.header.api_key, request.header.api_version
        errors = topic_errors(frame, api_key, version)
        refused = set(charged.refused)
        for index, topic in enumerate(request.topics):
            if index in refused or not charged.counts[index]:
                continue
            error = errors.get(topic.name) or errors.get(topic.topic_id)
            if error:  # Kafka charges a topic only once the controller has accepted it
                session.enforcer.refund_mutations(charged.sensors, charged.counts[index], now_ms)
        if charged.refused:
            throttle = charged.decision.throttle_ms if charged.decision is not None else 0
            frame = merge_refused(request, frame, charged.refused, throttle)
        return Reply(frame, charged.decision)
