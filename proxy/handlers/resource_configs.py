"""The proxy's quotas through `kafka-configs --entity-type topics` and `--entity-type brokers`
(quotas/resource_configs.py): IncrementalAlterConfigs and AlterConfigs take the proxy's keys
out of what the broker is sent and store them; a DescribeConfigs answer gets them back in, so
the tool lists and deletes them as the resource's own.

An alteration that names a proxy key is sent to the broker by the proxy, on the client's own
connection, with the proxy's keys taken out and its other resources and keys as they were:
the cluster's authorizer and the resource's existence decide each resource as for any
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
from protocol.resource_configs import (
    BROKER_RESOURCE,
    DYNAMIC_BROKER_CONFIG,
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
    with_configs,
)
from proxy.handlers.base import Answer, Channel, Defer, Forward, Handler, Outcome, Request
from quotas.admin import Changes
from quotas.entities import QuotaEntity
from quotas.resource_configs import (
    BROKER_CONFIGS,
    TOPIC_CONFIGS,
    Config,
    OwnConfigs,
    Setting,
    changes_of,
    is_own,
    settings,
)
from quotas.store import ALTERED, FILE
from quotas.validation import INVALID_REQUEST, KeyType, QuotaError, validate_value

#: REQUEST_TIMED_OUT: the broker could not be asked, or the quota not stored
_TIMED_OUT: Final = 7
_UNASKED: Final = "the cluster could not be asked to alter this resource"
#: ConfigAdminManager.preprocess's refusal of a resource named twice in one request
_TWICE: Final = QuotaError("Each resource must appear at most once.", INVALID_REQUEST)

#: the resource types whose configs carry the proxy's keys
OWN_CONFIGS: Final = {TOPIC_RESOURCE: TOPIC_CONFIGS, BROKER_RESOURCE: BROKER_CONFIGS}

#: a resource as a response names it
_Named = tuple[int, str]


@dataclass
class _Altering:
    """What an alteration decided, and learned while it was deferred."""

    #: by resource index: the quota changes its proxy keys make, or why they are refused
    planned: dict[int, Changes | QuotaError]
    throttle_ms: int = 0
    #: the broker's results, by resource
    results: dict[_Named, AlterResult] = field(default_factory=dict)
    #: a resource whose Kafka configs were altered but whose quotas could not be stored
    unstored: dict[_Named, str] = field(default_factory=dict)


class AlterConfigsHandler(Handler):
    """IncrementalAlterConfigs and AlterConfigs, which differ only in what a resource's
    configs replace (quotas/resource_configs.py)."""

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
    """What the broker is sent of a resource: a topic's or a broker's configs without the
    proxy's keys; any other resource's as they came."""
    if resource.resource_type not in OWN_CONFIGS:
        return resource.configs
    return [config for config in resource.configs if not is_own(config.name)]


def _plan(channel: Channel, alter: AlterRequest) -> dict[int, Changes | QuotaError]:
    """Each topic's or broker's proxy keys as quota changes (none: the request is not
    ours)."""
    admin = channel.runtime.quota_admin
    replace = alter.api_key == ALTER_CONFIGS
    planned: dict[int, Changes | QuotaError] = {}
    for index, resource in enumerate(alter.resources):
        kind = OWN_CONFIGS.get(resource.resource_type)
        if kind is None:
            continue
        own = [Config(*c) for c in resource.configs if is_own(c.name)]
        altered = {}
        if replace:
            entity = kind.entity(resource.name)
            for known in kind.keys.values():
                value = admin.store.value(ALTERED, entity, known.key)
                if value is not None:
                    altered[known.key] = value
        if own or altered:
            try:
                planned[index] = changes = changes_of(kind, own, altered, replace)
                entity = kind.entity(resource.name)
                for key, value in changes.items():  # a key another entity of the kind takes
                    if value is not None:
                        validate_value(entity, key, value)
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
            changes[OWN_CONFIGS[resource.resource_type].entity(resource.name)] = planned
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
    """A topic's quotas and a broker's ceilings in their DescribeConfigs answers, as configs
    of the resource's own."""

    def on_response(self, channel: Channel, frame: bytes, request: Request) -> bytes:
        store = channel.runtime.quota_admin.store
        if not store.has_resources():
            return frame
        describe = read_describe(request.frame, request.header, request.body_offset)
        # Kafka reads an empty key list as every key; a resource asked twice gets what
        # either copy asks for, once
        wanted: dict[tuple[int, str], set[str] | None] = {}
        for resource in describe.resources:
            if resource.resource_type in OWN_CONFIGS:
                named = (resource.resource_type, resource.name)
                keys = wanted.get(named, set())
                asked = set(resource.keys) if resource.keys else None
                wanted[named] = None if keys is None or asked is None else keys | asked
        added: dict[tuple[int, str], list[Described]] = {}
        for (resource_type, name), keys in wanted.items():
            kind = OWN_CONFIGS[resource_type]
            for config, known in kind.keys.items():
                if keys is None or config in keys:
                    found = settings(store, kind, name, known.key)
                    if found:
                        described = _described(kind, config, found)
                        added.setdefault((resource_type, name), []).append(described)
        if not added:
            return frame
        return with_configs(frame, request.header.api_version, describe, added)


def _described(kind: OwnConfigs, name: str, found: list[Setting]) -> Described:
    known = kind.keys[name]
    double = known.key_type is KeyType.DOUBLE
    # as Kafka writes a value: a LONG's without a fraction
    sources = [(str(s.value if double else int(s.value)), _source(kind, s)) for s in found]
    return Described(
        name, sources[0][0], sources[0][1], sources, known.documentation, known.key_type.name
    )


def _source(kind: OwnConfigs, setting: Setting) -> int:
    """Kafka's ConfigSource for where a quota is set."""
    if setting.layer == FILE:
        return STATIC_BROKER_CONFIG
    if setting.default:
        return DYNAMIC_DEFAULT_BROKER_CONFIG
    return DYNAMIC_TOPIC_CONFIG if kind is TOPIC_CONFIGS else DYNAMIC_BROKER_CONFIG
