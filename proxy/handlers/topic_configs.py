"""Topic quotas through `kafka-configs --entity-type topics`: IncrementalAlterConfigs and
AlterConfigs take the proxy's keys out of what the broker is sent and store them; a
DescribeConfigs answer gets them back in, so the tool lists and deletes them as a topic's own.

An alteration that names a proxy key is sent to the broker by the proxy, on the client's own
connection, with the proxy's keys taken out and its other resources and keys as they were:
the cluster's authorizer and the topic's existence decide each resource as for any
alteration, and its Kafka configs are altered there. The proxy stores its keys only for a
resource the broker took, so each resource is all or nothing, in Kafka's error codes; a
resource whose proxy keys are refused here is not sent at all. An alteration without proxy
keys is forwarded as its original bytes.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Final

from protocol.apis import ALTER_CONFIGS
from protocol.topic_configs import (
    DYNAMIC_DEFAULT_BROKER_CONFIG,
    DYNAMIC_TOPIC_CONFIG,
    STATIC_BROKER_CONFIG,
    TOPIC_RESOURCE,
    AlterableConfig,
    AlterRequest,
    AlterResource,
    AlterResult,
    Described,
    alter_body,
    alter_response,
    alter_results,
    read_alter,
    read_describe,
    with_topic_configs,
)
from proxy.handlers.base import Answer, Channel, Defer, Forward, Handler, Outcome, Request
from quotas.admin import Changes
from quotas.entities import QuotaEntity
from quotas.store import ALTERED, FILE
from quotas.topic_configs import (
    CONFIG_KEYS,
    DOCUMENTATION,
    Config,
    Setting,
    changes_of,
    is_own,
    settings,
)
from quotas.validation import INVALID_REQUEST, QuotaError

#: REQUEST_TIMED_OUT: the broker could not be asked, or the quota not stored
_TIMED_OUT: Final = 7
_UNASKED: Final = "the cluster could not be asked to alter this resource"
#: ConfigAdminManager.preprocess's refusal of a resource named twice in one request
_TWICE: Final = QuotaError("Each resource must appear at most once.", INVALID_REQUEST)

#: ConfigSource by where a quota is set: (store layer, set on the default topic)
_SOURCES: Final = {
    (ALTERED, False): DYNAMIC_TOPIC_CONFIG,
    (FILE, False): STATIC_BROKER_CONFIG,
    (ALTERED, True): DYNAMIC_DEFAULT_BROKER_CONFIG,
    (FILE, True): STATIC_BROKER_CONFIG,
}

#: a resource as a response names it
_Named = tuple[int, str]


@dataclass
class _Altering:
    """What an alteration decided, and learned while it was deferred."""

    #: by resource index: the topic quota changes its proxy keys make, or why they are refused
    planned: dict[int, Changes | QuotaError]
    throttle_ms: int = 0
    #: the broker's results, by resource
    results: dict[_Named, AlterResult] = field(default_factory=dict)
    #: a resource whose Kafka configs were altered but whose quotas could not be stored
    unstored: dict[_Named, str] = field(default_factory=dict)


class AlterConfigsHandler(Handler):
    """IncrementalAlterConfigs and AlterConfigs, which differ only in what a resource's
    configs replace (quotas/topic_configs.py)."""

    def on_request(self, channel: Channel, request: Request) -> Outcome:
        alter = request.parsed_as(AlterRequest, read_alter)
        state = request.state
        if isinstance(state, _Altering):  # handled again: everything is known
            return Answer(_answer(request, alter, state))
        planned = _plan(channel, alter)
        if not planned:
            return Forward(request.frame)
        state = request.state = _Altering(planned)
        asked = AlterRequest(
            alter.api_key,
            [
                AlterResource(r.resource_type, r.name, _kafkas(r))
                for index, r in enumerate(alter.resources)
                if not isinstance(planned.get(index), QuotaError)
            ],
            alter.validate_only,
        )
        if not asked.resources:
            return Answer(_answer(request, alter, state))
        api_key, version = alter.api_key, request.header.api_version

        def answered(frame: bytes) -> None:
            state.throttle_ms, results = alter_results(frame, api_key, version)
            for result in results:
                state.results.setdefault((result.resource_type, result.name), result)
            if not alter.validate_only:
                _store(channel, alter, state)

        if channel.cluster.ask(api_key, version, alter_body(version, asked), answered):
            return Defer()
        return Answer(_answer(request, alter, state))


def _kafkas(resource: AlterResource) -> list[AlterableConfig]:
    """What the broker is sent of a resource: a topic's configs without the proxy's keys;
    any other resource's as they came (a broker takes custom configs of its own)."""
    if resource.resource_type != TOPIC_RESOURCE:
        return resource.configs
    return [config for config in resource.configs if not is_own(config.name)]


def _plan(channel: Channel, alter: AlterRequest) -> dict[int, Changes | QuotaError]:
    """Each topic resource's proxy keys as quota changes (none: the request is not ours)."""
    admin = channel.runtime.quota_admin
    replace = alter.api_key == ALTER_CONFIGS
    planned: dict[int, Changes | QuotaError] = {}
    for index, resource in enumerate(alter.resources):
        if resource.resource_type != TOPIC_RESOURCE:
            continue
        own = [Config(*c) for c in resource.configs if is_own(c.name)]
        altered = {}
        if replace:
            entity = QuotaEntity(topic=resource.name)
            for key in CONFIG_KEYS.values():
                value = admin.store.value(ALTERED, entity, key)
                if value is not None:
                    altered[key] = value
        if own or altered:
            try:
                planned[index] = changes_of(own, altered, replace)
            except QuotaError as exc:
                planned[index] = exc
    if not planned:
        return planned
    named = Counter((r.resource_type, r.name) for r in alter.resources)
    for index, resource in enumerate(alter.resources):
        if named[resource.resource_type, resource.name] > 1:
            planned[index] = _TWICE
    unavailable = admin.unavailable()
    if unavailable is not None and not alter.validate_only:
        refused = QuotaError(unavailable[1], unavailable[0])
        planned = {
            index: refused if isinstance(changes, dict) and changes else changes
            for index, changes in planned.items()
        }
    return planned


def _store(channel: Channel, alter: AlterRequest, state: _Altering) -> None:
    """The broker answered: store the quotas of the resources it took (deferred until stored)."""
    changes: dict[QuotaEntity, Changes] = {}
    named: list[_Named] = []
    for index, planned in state.planned.items():
        resource = alter.resources[index]
        result = state.results.get((resource.resource_type, resource.name))
        if isinstance(planned, dict) and planned and result is not None and result.code == 0:
            changes[QuotaEntity(topic=resource.name)] = planned
            named.append((resource.resource_type, resource.name))
    if not changes:
        return
    done = channel.cluster.begin()

    def stored(problem: str | None) -> None:
        if problem is not None:
            for resource in named:
                state.unstored[resource] = (
                    f"its Kafka configs were altered, but not its kafka-quota-proxy quotas: "
                    f"{problem}"
                )
        done()

    channel.runtime.quota_admin.apply(changes, stored)


def _answer(request: Request, alter: AlterRequest, state: _Altering) -> bytes:
    """Each resource of the request, in its order: refused here, or as the broker answered
    it (a resource named twice was refused here, every copy)."""
    answered: list[AlterResult] = []
    for index, resource in enumerate(alter.resources):
        named = (resource.resource_type, resource.name)
        planned = state.planned.get(index)
        if isinstance(planned, QuotaError):
            answered.append(AlterResult(planned.code, planned.message, *named))
        elif named in state.unstored:
            answered.append(AlterResult(_TIMED_OUT, state.unstored[named], *named))
        else:
            answered.append(state.results.get(named) or AlterResult(_TIMED_OUT, _UNASKED, *named))
    return alter_response(request.header, state.throttle_ms, answered)


class DescribeConfigsHandler(Handler):
    """A topic's quotas in its DescribeConfigs answer, as configs of the topic's own."""

    def on_response(self, channel: Channel, frame: bytes, request: Request) -> bytes:
        store = channel.runtime.quota_admin.store
        if not store.has_topics():
            return frame
        describe = read_describe(request.frame, request.header, request.body_offset)
        # Kafka reads an empty key list as every key; a topic asked twice gets what either
        # copy asks for, once
        wanted: dict[str, set[str] | None] = {}
        for resource in describe.resources:
            if resource.resource_type == TOPIC_RESOURCE:
                keys = wanted.get(resource.name, set())
                asked = set(resource.keys) if resource.keys else None
                wanted[resource.name] = None if keys is None or asked is None else keys | asked
        added: dict[str, list[Described]] = {}
        for topic, keys in wanted.items():
            for name, key in CONFIG_KEYS.items():
                found = settings(store, topic, key) if keys is None or name in keys else []
                if found:
                    added.setdefault(topic, []).append(_described(name, key, found))
        if not added:
            return frame
        return with_topic_configs(frame, request.header.api_version, describe, added)


def _described(name: str, key: str, found: list[Setting]) -> Described:
    sources = [(str(s.value), _SOURCES[s.layer, s.default]) for s in found]
    return Described(name, sources[0][0], sources[0][1], sources, DOCUMENTATION[key])
