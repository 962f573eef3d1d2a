"""CreateTopics, CreatePartitions and DeleteTopics: the requests that mutate partitions
(KIP-599), read per topic, split by topic, and answered or merged back per topic.

A strict quota refuses some topics of a request and lets the others through: the admitted
topics go upstream in a request of their own, and the client gets one response naming every
topic of its request, in its order, refused ones with THROTTLING_QUOTA_EXCEEDED.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any, Final, NamedTuple

from kafka.protocol.admin import DescribeConfigsRequest

from protocol.apis import (
    CREATE_PARTITIONS,
    CREATE_TOPICS,
    DECODED,
    DELETE_TOPICS,
    DESCRIBE_CONFIGS,
)
from protocol.codec import decode_request, decode_response
from protocol.headers import (
    RequestHeader,
    encode_response,
    response_body_offset,
)
from protocol.rewrite import reframe

#: Kafka's THROTTLING_QUOTA_EXCEEDED
THROTTLING_QUOTA_EXCEEDED: Final = 89
#: Errors.THROTTLING_QUOTA_EXCEEDED.message(), what every client shows for the error
THROTTLING_MESSAGE: Final = "The throttling quota has been exceeded."
#: the versions from which a client understands error 89 (ControllerApis' strictSinceVersion);
#: older ones are admitted whole, and throttled by muting
STRICT_SINCE: Final = {CREATE_TOPICS: 6, CREATE_PARTITIONS: 3, DELETE_TOPICS: 5}
#: DescribeConfigs: the broker config that gives a topic created with num_partitions -1 its count
DEFAULT_PARTITIONS_CONFIG: Final = "num.partitions"
_BROKER_RESOURCE: Final = 4
_OWN_DESCRIBE_CONFIGS_VERSION: Final = 4


class TopicMutation(NamedTuple):
    """One topic of a mutating request, as the quota counts it."""

    name: str | None
    #: DeleteTopics v6+ may name a topic by id alone
    topic_id: uuid.UUID | None
    #: CreateTopics: partitions to create (None: the cluster's default); CreatePartitions:
    #: the new total; DeleteTopics: unused (all of the topic's partitions)
    partitions: int | None


class MutationRequest(NamedTuple):
    """A decoded mutating request, kept until its response to split and merge by topic."""

    header: RequestHeader
    body_offset: int
    msg: Any
    topics: list[TopicMutation]
    validate_only: bool

    @property
    def strict(self) -> bool:
        return self.header.api_version >= STRICT_SINCE[self.header.api_key]


class MutationResponse(NamedTuple):
    """The broker's answer to a mutating request, decoded once to refund and to merge."""

    body_offset: int
    msg: Any


#: the response's list of per-topic results
_RESULTS: Final = {
    CREATE_TOPICS: "topics",
    CREATE_PARTITIONS: "results",
    DELETE_TOPICS: "responses",
}


def _topic_list(msg: Any, api_key: int, version: int) -> tuple[str, list[Any]]:
    """(attribute, entries) of the request's topics: DeleteTopics names them as plain
    strings before v6."""
    if api_key == DELETE_TOPICS and version < 6:
        return "topic_names", list(msg.topic_names or ())
    return "topics", list(msg.topics or ())


def _mutation(api_key: int, version: int, entry: Any) -> TopicMutation:
    if api_key == CREATE_TOPICS:
        # explicit assignments count their entries; -1 partitions means the cluster default
        if entry.assignments:
            return TopicMutation(entry.name, None, len(entry.assignments))
        count = entry.num_partitions
        return TopicMutation(entry.name, None, None if count == -1 else count)
    if api_key == CREATE_PARTITIONS:
        return TopicMutation(entry.name, None, entry.count)
    if version < 6:
        return TopicMutation(entry, None, None)
    return TopicMutation(entry.name, entry.topic_id, None)


def read_mutations(frame: bytes, header: RequestHeader, offset: int) -> MutationRequest:
    api_key, version = header.api_key, header.api_version
    msg = decode_request(frame, offset, api_key, version)
    _, entries = _topic_list(msg, api_key, version)
    topics = [_mutation(api_key, version, entry) for entry in entries]
    return MutationRequest(header, offset, msg, topics, bool(getattr(msg, "validate_only", False)))


def keep_topics(request: MutationRequest, frame: bytes, keep: Sequence[int]) -> bytes:
    """The request frame with only the topics at these positions, in their order."""
    header, msg = request.header, request.msg
    attribute, entries = _topic_list(msg, header.api_key, header.api_version)
    cls = type(msg)  # built afresh: kafka-python cannot re-encode a decoded DeleteTopics
    fields = {name: getattr(msg, name) for name in cls.fields}
    fields[attribute] = [entries[index] for index in keep]
    version = header.api_version
    body = bytes(cls(version=version, **fields).encode(version=version))
    return reframe(frame, request.body_offset, body)


def _refusal(api_key: int, topic: TopicMutation) -> Any:
    """The result Kafka gives a topic its strict quota refuses (ControllerApis)."""
    results = DECODED[api_key][1]
    if api_key == CREATE_TOPICS:
        return results.CreatableTopicResult(
            name=topic.name,
            topic_id=None,
            error_code=THROTTLING_QUOTA_EXCEEDED,
            error_message=THROTTLING_MESSAGE,
            topic_config_error_code=0,
            num_partitions=-1,
            replication_factor=-1,
            configs=[],
        )
    if api_key == CREATE_PARTITIONS:
        return results.CreatePartitionsTopicResult(
            name=topic.name, error_code=THROTTLING_QUOTA_EXCEEDED, error_message=THROTTLING_MESSAGE
        )
    return results.DeletableTopicResult(
        name=topic.name,
        topic_id=topic.topic_id,
        error_code=THROTTLING_QUOTA_EXCEEDED,
        error_message=THROTTLING_MESSAGE,
    )


def refuse_all(request: MutationRequest, throttle_ms: int) -> bytes:
    """The response to a request whose every topic was refused: it never reaches the broker."""
    header = request.header
    api_key, version = header.api_key, header.api_version
    msg = DECODED[api_key][1](version=version, throttle_time_ms=throttle_ms)
    setattr(msg, _RESULTS[api_key], [_refusal(api_key, topic) for topic in request.topics])
    return encode_response(header.correlation_id, api_key, version, bytes(msg.encode()))


def read_mutation_response(frame: bytes, api_key: int, version: int) -> MutationResponse:
    offset = response_body_offset(frame, api_key, version)
    return MutationResponse(offset, decode_response(frame, offset, api_key, version))


def topic_errors(response: MutationResponse, api_key: int) -> dict[object, int]:
    """The broker's error code per topic, under its name and under its id where given."""
    errors: dict[object, int] = {}
    for result in getattr(response.msg, _RESULTS[api_key]) or ():
        for key in (result.name, getattr(result, "topic_id", None)):
            if key is not None:
                errors[key] = result.error_code
    return errors


def merge_refused(
    request: MutationRequest, response: MutationResponse, frame: bytes, refused: Sequence[int]
) -> bytes:
    """The broker's response to the admitted topics with the refused ones put back, every
    topic in the order the client asked (the throttle is settled afterwards, for all)."""
    api_key = request.header.api_key
    msg = response.msg
    attribute = _RESULTS[api_key]
    results = list(getattr(msg, attribute) or ())
    # a v6 DeleteTopics result names the topic and its id; the client may have named either
    by_key: dict[object, list[int]] = {}
    for position, result in enumerate(results):
        for key in (result.name, getattr(result, "topic_id", None)):
            if key is not None:
                by_key.setdefault(key, []).append(position)
    used: set[int] = set()
    refused_at = set(refused)
    merged = []
    for index, topic in enumerate(request.topics):
        if index in refused_at:
            merged.append(_refusal(api_key, topic))
            continue
        for key in (topic.name, topic.topic_id):
            candidates = (
                [p for p in by_key.get(key, ()) if p not in used] if key is not None else []
            )
            if candidates:
                used.add(candidates[0])
                merged.append(results[candidates[0]])
                break
    merged.extend(result for p, result in enumerate(results) if p not in used)
    setattr(msg, attribute, merged)
    return reframe(frame, response.body_offset, bytes(msg.encode()))


def describe_default_partitions_body(broker_ids: Sequence[int]) -> tuple[int, bytes]:
    """(version, body) of a DescribeConfigs request for num.partitions of these brokers: a
    broker answers only for itself, so every known id is asked and one answer is enough."""
    version = _OWN_DESCRIBE_CONFIGS_VERSION
    cls = DescribeConfigsRequest
    msg = cls(
        version=version,
        resources=[
            cls.DescribeConfigsResource(
                resource_type=_BROKER_RESOURCE,
                resource_name=str(broker_id),
                configuration_keys=[DEFAULT_PARTITIONS_CONFIG],
            )
            for broker_id in broker_ids
        ],
        include_synonyms=False,
        include_documentation=False,
    )
    return version, bytes(msg.encode(version=version))


def default_partitions(frame: bytes, version: int) -> int | None:
    """num.partitions from the first broker that described itself, or None."""
    offset = response_body_offset(frame, DESCRIBE_CONFIGS, version)
    msg = decode_response(frame, offset, DESCRIBE_CONFIGS, version)
    for result in msg.results or ():
        if result.error_code != 0:
            continue
        for config in result.configs or ():
            if config.name == DEFAULT_PARTITIONS_CONFIG and config.value is not None:
                try:
                    return int(config.value)
                except ValueError:
                    return None
    return None
