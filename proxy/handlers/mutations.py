"""CreateTopics, CreatePartitions, DeleteTopics: partition mutations charged to a token
bucket per principal (KIP-599, controller_mutation_rate).

The count is Kafka's: the partitions of each created topic (the cluster's num.partitions for
-1, the assignment entries when given), the partitions added, the partitions of each deleted
topic. Current counts come from the topic cache, refreshed for the named topics before each
CreatePartitions and DeleteTopics, since another client may have changed them; a topic the
cluster does not know counts nothing and gets the broker's own error.

Kafka's controller charges a topic only once it has passed validation. The proxy charges
before the broker has looked, so it counts nothing for what the controller fails before
charging (a topic that already exists, a topic named twice in one request, a deletion naming
both a topic and an id), and refunds what the broker refuses.
"""

from __future__ import annotations

from collections import Counter
from typing import Final, NamedTuple

from protocol.apis import CREATE_PARTITIONS, CREATE_TOPICS, DELETE_TOPICS
from protocol.metadata import TopicPartitions
from protocol.mutations import (
    MutationRequest,
    TopicMutation,
    keep_topics,
    merge_refused,
    read_mutation_response,
    read_mutations,
    refuse_all,
    topic_errors,
)
from proxy.handlers.base import Answer, Channel, Defer, Forward, Handler, Outcome, Request
from proxy.handlers.inquiries import inquire
from proxy.handlers.topic_cache import TopicCache
from quotas.entities import QuotaType

#: Kafka's own num.partitions default, when the cluster could not be asked
_KAFKA_DEFAULT_PARTITIONS: Final = 1
#: REQUEST_TIMED_OUT and NOT_CONTROLLER: the controller may have made the change all the same
#: (a timed-out creation still completes), so what was charged stays charged
_OUTCOME_UNKNOWN: Final = frozenset({7, 41})


class _Charged(NamedTuple):
    """What the response needs: which topics to put back refused, what to refund."""

    request: MutationRequest
    #: what each topic was charged, in request order
    charged: list[int]
    refused: list[int]


def _known(topics: TopicCache, topic: TopicMutation) -> TopicPartitions | None:
    known = None
    if topic.topic_id is not None:
        known = topics.by_id(topic.topic_id)
    if known is None and topic.name is not None:
        known = topics.by_name(topic.name)
    return known


def _invalid(request: MutationRequest) -> set[int]:
    """Topics the controller fails with INVALID_REQUEST before charging anything: a name or
    id given twice, a deletion naming both. They count nothing and are never refused, so they
    go upstream together and a split never turns an invalid request into a valid one."""
    given = Counter(key for t in request.topics for key in (t.name, t.topic_id) if key is not None)
    return {
        index
        for index, topic in enumerate(request.topics)
        if (topic.name is not None and topic.topic_id is not None)
        or any(given[key] > 1 for key in (topic.name, topic.topic_id) if key is not None)
    }


def _counts(request: MutationRequest, topics: TopicCache) -> list[int]:
    api_key = request.header.api_key
    invalid = _invalid(request)
    deleted: set[str] = set()
    counts = []
    for index, topic in enumerate(request.topics):
        known = _known(topics, topic)
        if index in invalid:
            count = 0
        elif api_key == CREATE_TOPICS:
            # a topic that exists fails with TOPIC_ALREADY_EXISTS before the quota
            count = 0 if known is not None else _created(topics, topic)
        elif known is None:
            count = 0  # UNKNOWN_TOPIC_OR_PARTITION (or _ID): nothing mutates
        elif api_key == CREATE_PARTITIONS:
            count = max((topic.partitions or 0) - known.partitions, 0)
        else:  # one topic named by name and by id in two entries is deleted once
            count = 0 if known.name in deleted else known.partitions
            deleted.add(known.name)
        counts.append(count)
    return counts


def _created(topics: TopicCache, topic: TopicMutation) -> int:
    if topic.partitions is not None:
        return max(topic.partitions, 0)
    return topics.default_partitions or _KAFKA_DEFAULT_PARTITIONS


def _needs_default(request: MutationRequest, topics: TopicCache, now_ms: int) -> bool:
    return (
        request.header.api_key == CREATE_TOPICS
        and any(topic.partitions is None for topic in request.topics)
        and topics.needs_default_partitions(now_ms)
    )


def _inquire(channel: Channel, request: MutationRequest, topics: TopicCache, now_ms: int) -> bool:
    """Ask the cluster what counting needs: the topics' current state (whether they exist,
    their partitions), and num.partitions for topics created with -1. False when nothing
    needs asking, or the cluster cannot be asked now: count with what the cache knows."""
    names = tuple(t.name for t in request.topics if t.topic_id is None and t.name is not None)
    ids = tuple(t.topic_id for t in request.topics if t.topic_id is not None)
    default = _needs_default(request, topics, now_ms)
    return bool(names or ids or default) and inquire(channel, names, ids, default, now_ms)


def _resolved(request: MutationRequest, topics: TopicCache) -> MutationRequest:
    """A deletion by name or by id with the other filled in from the cache, as the
    controller answers a refused one with both."""
    if request.header.api_key != DELETE_TOPICS:
        return request
    filled = []
    for topic in request.topics:
        known = _known(topics, topic)
        if known is not None and (topic.name is None) != (topic.topic_id is None):
            topic = topic._replace(name=known.name, topic_id=known.topic_id)
        filled.append(topic)
    return request._replace(topics=filled)


class MutationsHandler(Handler):
    quotas = (QuotaType.CONTROLLER_MUTATION,)

    def on_request(self, channel: Channel, request: Request) -> Outcome:
        quota = channel.runtime.quotas.mutations
        if not quota.limited(request):
            return Forward(request.frame)
        mutations = request.parsed_as(MutationRequest, read_mutations)
        if mutations.validate_only or not mutations.topics:
            return Forward(request.frame)  # KIP-599: validation mutates nothing
        topics = channel.runtime.topics
        if not request.refreshed and _inquire(channel, mutations, topics, request.now_ms):
            return Defer()
        counts = _counts(mutations, topics)
        refused, charged = quota.admit(request, counts, mutations.strict)
        if refused:
            mutations = _resolved(mutations, topics)
        request.state = _Charged(mutations, charged, refused)
        if not refused:
            return Forward(request.frame)
        if len(refused) == len(counts):
            verdict = request.verdict
            return Answer(refuse_all(mutations, verdict.throttle_ms if verdict is not None else 0))
        admitted = sorted(set(range(len(counts))) - set(refused))
        return Forward(keep_topics(mutations, request.frame, admitted))

    def on_response(self, channel: Channel, frame: bytes, request: Request) -> bytes:
        charged = request.state
        if not isinstance(charged, _Charged):
            return frame
        mutations, quota = charged.request, channel.runtime.quotas.mutations
        api_key, version = mutations.header.api_key, mutations.header.api_version
        response = read_mutation_response(frame, api_key, version)
        errors = topic_errors(response, api_key)
        for topic, count in zip(mutations.topics, charged.charged, strict=True):
            if not count:
                continue
            error = errors.get(topic.name) or errors.get(topic.topic_id)
            if error and error not in _OUTCOME_UNKNOWN:
                quota.refund(request, count)
        if charged.refused:
            frame = merge_refused(mutations, response, frame, charged.refused)
        return frame
