"""DescribeConfigs (api key 32), AlterConfigs (33) and IncrementalAlterConfigs (44): the
requests `kafka-configs --entity-type topics|brokers` and the Admin API send for a resource's
configs, read and written with kafka-python's codecs from Kafka's message specs.

The proxy reads them to take its own keys out of what the broker is sent and to put them
into what the client is answered; every other resource and key passes as the broker has it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final, NamedTuple

from protocol.apis import DECODED, DESCRIBE_CONFIGS, INCREMENTAL_ALTER_CONFIGS
from protocol.codec import decode_request, decode_response, non_null_array, non_null_string
from protocol.headers import (
    RequestHeader,
    encode_response,
    response_body_offset,
    response_correlation_id,
)

#: ConfigResource.Type's TOPIC and BROKER
TOPIC_RESOURCE: Final = 2
BROKER_RESOURCE: Final = 4
#: AlterConfigOp.OpType.SET: what every AlterConfigs entry is
SET: Final = 0

#: DescribeConfigsResponse's ConfigSource: a topic's own dynamic config
DYNAMIC_TOPIC_CONFIG: Final = 1
#: a broker's own dynamic config
DYNAMIC_BROKER_CONFIG: Final = 2
#: a default set dynamically for every topic or broker (Kafka's cluster-wide default)
DYNAMIC_DEFAULT_BROKER_CONFIG: Final = 3
#: set in a file at start-up (Kafka's server.properties)
STATIC_BROKER_CONFIG: Final = 4
#: ConfigEntry.ConfigType by the name of a config's type
CONFIG_TYPES: Final = {"INT": 3, "LONG": 5, "DOUBLE": 6}


class AlterableConfig(NamedTuple):
    name: str
    #: AlterConfigOp.OpType; SET for every AlterConfigs entry
    operation: int
    value: str | None


class AlterResource(NamedTuple):
    resource_type: int
    name: str
    configs: list[AlterableConfig]


class AlterRequest(NamedTuple):
    """An AlterConfigs or IncrementalAlterConfigs request: the same shape, but AlterConfigs
    replaces a resource's whole dynamic config where IncrementalAlterConfigs changes keys."""

    api_key: int
    resources: list[AlterResource]
    validate_only: bool


class AlterResult(NamedTuple):
    code: int
    message: str | None
    resource_type: int
    name: str


class DescribeResource(NamedTuple):
    resource_type: int
    name: str
    #: the keys asked for; None: every key
    keys: list[str] | None


class DescribeRequest(NamedTuple):
    resources: list[DescribeResource]
    synonyms: bool
    documentation: bool


class Described(NamedTuple):
    """One config as DescribeConfigs lists it: its value, where that comes from, and the
    values it overrides (its synonyms, strongest first)."""

    name: str
    value: str
    source: int
    synonyms: list[tuple[str, int]]
    documentation: str
    #: its type's name, a key of CONFIG_TYPES
    config_type: str


def read_alter(frame: bytes, header: RequestHeader, offset: int) -> AlterRequest:
    api_key, version = header.api_key, header.api_version
    msg = decode_request(frame, offset, api_key, version)
    incremental = api_key == INCREMENTAL_ALTER_CONFIGS
    resources = [
        AlterResource(
            int(resource.resource_type),
            non_null_string(resource.resource_name),
            [
                AlterableConfig(
                    non_null_string(config.name),
                    int(config.config_operation) if incremental else SET,
                    config.value,
                )
                for config in non_null_array(resource.configs)
            ],
        )
        for resource in non_null_array(msg.resources)
    ]
    return AlterRequest(api_key, resources, bool(msg.validate_only))


def alter_body(version: int, request: AlterRequest) -> bytes:
    cls = DECODED[request.api_key][0]
    resource, config = cls.AlterConfigsResource, cls.AlterConfigsResource.AlterableConfig
    incremental = request.api_key == INCREMENTAL_ALTER_CONFIGS

    def made(entry: AlterableConfig) -> Any:
        if incremental:
            return config(name=entry.name, config_operation=entry.operation, value=entry.value)
        return config(name=entry.name, value=entry.value)

    msg = cls(
        version=version,
        resources=[
            resource(
                resource_type=r.resource_type,
                resource_name=r.name,
                configs=[made(entry) for entry in r.configs],
            )
            for r in request.resources
        ],
        validate_only=request.validate_only,
    )
    return bytes(msg.encode(version=version))


def alter_results(frame: bytes, api_key: int, version: int) -> tuple[int, list[AlterResult]]:
    """A broker's answer to an alteration: its throttle_time_ms and each resource's result."""
    offset = response_body_offset(frame, api_key, version)
    msg = decode_response(frame, offset, api_key, version)
    results = [
        AlterResult(
            int(r.error_code),
            r.error_message,
            int(r.resource_type),
            non_null_string(r.resource_name),
        )
        for r in non_null_array(msg.responses)
    ]
    return int(msg.throttle_time_ms), results


def alter_response(
    header: RequestHeader, throttle_ms: int, results: Sequence[AlterResult]
) -> bytes:
    api_key, version = header.api_key, header.api_version
    cls = DECODED[api_key][1]
    response = cls.AlterConfigsResourceResponse
    msg = cls(
        version=version,
        throttle_time_ms=throttle_ms,
        responses=[
            response(
                error_code=r.code,
                error_message=r.message,
                resource_type=r.resource_type,
                resource_name=r.name,
            )
            for r in results
        ],
    )
    body = bytes(msg.encode(version=version))
    return encode_response(header.correlation_id, api_key, version, body)


def read_describe(frame: bytes, header: RequestHeader, offset: int) -> DescribeRequest:
    version = header.api_version
    msg = decode_request(frame, offset, DESCRIBE_CONFIGS, version)
    resources = [
        DescribeResource(
            int(r.resource_type),
            non_null_string(r.resource_name),
            None
            if r.configuration_keys is None
            else [non_null_string(k) for k in r.configuration_keys],
        )
        for r in non_null_array(msg.resources)
    ]
    synonyms = version >= 1 and bool(msg.include_synonyms)
    documentation = version >= 3 and bool(msg.include_documentation)
    return DescribeRequest(resources, synonyms, documentation)


def with_configs(
    frame: bytes,
    version: int,
    request: DescribeRequest,
    added: Mapping[tuple[int, str], Sequence[Described]],
) -> bytes:
    """A broker's DescribeConfigs answer with configs added to the resources it described
    without error (by resource type and name); the frame as it is when there is nothing to
    add."""
    offset = response_body_offset(frame, DESCRIBE_CONFIGS, version)
    msg = decode_response(frame, offset, DESCRIBE_CONFIGS, version)
    cls = DECODED[DESCRIBE_CONFIGS][1]
    entry = cls.DescribeConfigsResult.DescribeConfigsResourceResult
    synonym = entry.DescribeConfigsSynonym
    changed = False
    for result in non_null_array(msg.results):
        configs = added.get((result.resource_type, result.resource_name))
        if result.error_code or not configs:
            continue
        for described in configs:
            synonyms = [
                synonym(name=described.name, value=value, source=source)
                for value, source in described.synonyms
            ]
            non_null_array(result.configs).append(
                entry(
                    name=described.name,
                    value=described.value,
                    read_only=False,
                    config_source=described.source,
                    is_default=False,
                    is_sensitive=False,
                    synonyms=synonyms if request.synonyms else [],
                    config_type=CONFIG_TYPES[described.config_type],
                    documentation=described.documentation if request.documentation else None,
                )
            )
            changed = True
    if not changed:
        return frame
    rebuilt = cls(version=version, throttle_time_ms=msg.throttle_time_ms, results=msg.results)
    body = bytes(rebuilt.encode(version=version))
    return encode_response(response_correlation_id(frame), DESCRIBE_CONFIGS, version, body)
