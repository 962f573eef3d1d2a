"""DescribeClientQuotas (api key 48) and AlterClientQuotas (49), KIP-546: the requests
`kafka-configs --entity-type users|clients|ips` and the Admin API send, read and answered
with kafka-python's codecs from Kafka's message specs (v0, and v1 flexible)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

from protocol.apis import ALTER_CLIENT_QUOTAS, DECODED, DESCRIBE_CLIENT_QUOTAS
from protocol.codec import decode_request, decode_response, non_null_array, non_null_string
from protocol.headers import RequestHeader, encode_response, response_body_offset

#: (entity type, name) pairs; None names the default entity
Pairs = list[tuple[str, str | None]]


class AlterEntry(NamedTuple):
    pairs: Pairs
    #: key -> value, or None to remove it
    ops: list[tuple[str, float | None]]


class AlterRequest(NamedTuple):
    entries: list[AlterEntry]
    validate_only: bool


class DescribeRequest(NamedTuple):
    #: (entity type, match type, match) filter components
    components: list[tuple[str, int, str | None]]
    strict: bool


def _pairs(entity: Any) -> Pairs:
    return [
        (non_null_string(part.entity_type), part.entity_name) for part in non_null_array(entity)
    ]


def read_alter(frame: bytes, header: RequestHeader, offset: int) -> AlterRequest:
    msg = decode_request(frame, offset, ALTER_CLIENT_QUOTAS, header.api_version)
    entries = [
        AlterEntry(
            _pairs(entry.entity),
            [
                (non_null_string(op.key), None if op.remove else float(op.value))
                for op in non_null_array(entry.ops)
            ],
        )
        for entry in non_null_array(msg.entries)
    ]
    return AlterRequest(entries, bool(msg.validate_only))


def read_describe(frame: bytes, header: RequestHeader, offset: int) -> DescribeRequest:
    msg = decode_request(frame, offset, DESCRIBE_CLIENT_QUOTAS, header.api_version)
    components = [
        (non_null_string(c.entity_type), int(c.match_type), c.match)
        for c in non_null_array(msg.components)
    ]
    return DescribeRequest(components, bool(msg.strict))


def alter_body(version: int, entries: Sequence[AlterEntry], validate_only: bool) -> bytes:
    cls = DECODED[ALTER_CLIENT_QUOTAS][0]
    entry, entity, op = cls.EntryData, cls.EntryData.EntityData, cls.EntryData.OpData
    msg = cls(
        version=version,
        entries=[
            entry(
                entity=[entity(entity_type=t, entity_name=n) for t, n in pairs],
                ops=[
                    op(key=key, value=0.0 if value is None else value, remove=value is None)
                    for key, value in ops
                ],
            )
            for pairs, ops in entries
        ],
        validate_only=validate_only,
    )
    return bytes(msg.encode(version=version))


def describe_body(version: int, request: DescribeRequest) -> bytes:
    cls = DECODED[DESCRIBE_CLIENT_QUOTAS][0]
    component = cls.ComponentData
    msg = cls(
        version=version,
        components=[
            component(entity_type=t, match_type=m, match=match)
            for t, m, match in request.components
        ],
        strict=request.strict,
    )
    return bytes(msg.encode(version=version))


def alter_response(
    header: RequestHeader, outcomes: Sequence[tuple[Pairs, int, str | None]]
) -> bytes:
    cls = DECODED[ALTER_CLIENT_QUOTAS][1]
    entry, entity = cls.EntryData, cls.EntryData.EntityData
    msg = cls(
        version=header.api_version,
        throttle_time_ms=0,
        entries=[
            entry(
                error_code=code,
                error_message=message,
                entity=[entity(entity_type=t, entity_name=n) for t, n in pairs],
            )
            for pairs, code, message in outcomes
        ],
    )
    body = bytes(msg.encode(version=header.api_version))
    return encode_response(header.correlation_id, ALTER_CLIENT_QUOTAS, header.api_version, body)


def describe_response(
    header: RequestHeader,
    entries: Mapping[tuple[tuple[str, str | None], ...], Mapping[str, float]] | None,
    error_code: int = 0,
    error_message: str | None = None,
) -> bytes:
    """Entries by entity pairs; None with an error, as Kafka answers a refused filter."""
    cls = DECODED[DESCRIBE_CLIENT_QUOTAS][1]
    entry, entity, value = cls.EntryData, cls.EntryData.EntityData, cls.EntryData.ValueData
    listed = None
    if entries is not None:
        listed = [
            entry(
                entity=[entity(entity_type=t, entity_name=n) for t, n in pairs],
                values=[value(key=key, value=v) for key, v in values.items()],
            )
            for pairs, values in entries.items()
        ]
    msg = cls(
        version=header.api_version,
        throttle_time_ms=0,
        error_code=error_code,
        error_message=error_message,
        entries=listed,
    )
    body = bytes(msg.encode(version=header.api_version))
    return encode_response(header.correlation_id, DESCRIBE_CLIENT_QUOTAS, header.api_version, body)


def alter_errors(frame: bytes, version: int) -> list[tuple[Pairs, int, str | None]]:
    """A broker's AlterClientQuotas answer: each entity's error."""
    offset = response_body_offset(frame, ALTER_CLIENT_QUOTAS, version)
    msg = decode_response(frame, offset, ALTER_CLIENT_QUOTAS, version)
    return [(_pairs(e.entity), int(e.error_code), e.error_message) for e in msg.entries]


def describe_error(frame: bytes, version: int) -> tuple[int, str | None]:
    """A broker's DescribeClientQuotas answer: its error, if any."""
    offset = response_body_offset(frame, DESCRIBE_CLIENT_QUOTAS, version)
    msg = decode_response(frame, offset, DESCRIBE_CLIENT_QUOTAS, version)
    return int(msg.error_code), msg.error_message


def read_describe_entries(
    frame: bytes, version: int
) -> tuple[int, str | None, list[tuple[Pairs, dict[str, float]]]]:
    """A DescribeClientQuotas answer whole: (error, message, entries), for the quotas tool."""
    offset = response_body_offset(frame, DESCRIBE_CLIENT_QUOTAS, version)
    msg = decode_response(frame, offset, DESCRIBE_CLIENT_QUOTAS, version)
    entries = [
        (_pairs(e.entity), {str(v.key): float(v.value) for v in e.values})
        for e in msg.entries or ()
    ]
    return int(msg.error_code), msg.error_message, entries
