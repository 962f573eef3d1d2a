"""Walking a message body by its JSON schema without building objects.

Produce and Fetch responses may carry KIP-951 NodeEndpoints in their top-level tagged fields,
which sit after every partition's records. Decoding a whole Fetch response to look there would
copy every record batch; this walker only steps over lengths, so the proxy finds the tagged
section cheaply and decodes the message only when it actually names brokers (rare: only
after leadership changes).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from struct import Struct
from struct import error as struct_error
from typing import Any

from protocol.apis import response_class
from protocol.errors import ProtocolError
from protocol.primitives import read_uvarint, skip_tagged_fields
from protocol.schemas import in_versions

_INT16 = Struct(">h")
_INT32 = Struct(">i")
_FIXED = {
    "bool": 1,
    "int8": 1,
    "int16": 2,
    "uint16": 2,
    "int32": 4,
    "uint32": 4,
    "int64": 8,
    "float64": 8,
    "uuid": 16,
}
_BYTES_LIKE = ("string", "bytes", "records")

Skipper = Callable[[bytes, int], int]


def _skip_fixed(size: int) -> Skipper:
    return lambda data, pos: pos + size


def _skip_bytes(flexible: bool) -> Skipper:
    if flexible:

        def compact(data: bytes, pos: int) -> int:
            length, pos = read_uvarint(data, pos)
            return pos + max(length - 1, 0)

        return compact

    def classic(data: bytes, pos: int) -> int:
        length: int = _INT32.unpack_from(data, pos)[0]
        return pos + 4 + max(length, 0)

    return classic


def _skip_string(flexible: bool) -> Skipper:
    if flexible:
        return _skip_bytes(True)
    return lambda data, pos: pos + 2 + max(_INT16.unpack_from(data, pos)[0], 0)


def _array_length(flexible: bool, data: bytes, pos: int) -> tuple[int, int]:
    if flexible:
        length, pos = read_uvarint(data, pos)
        return length - 1, pos
    return _INT32.unpack_from(data, pos)[0], pos + 4


def compile_walker(
    fields: list[dict[str, Any]], version: int, flexible: bool, trailing_tags: bool = True
) -> Skipper:
    """A walker over `fields`; with trailing_tags=False it stops before the tagged section."""
    steps: list[Skipper] = []
    for field in fields:
        if "tag" in field or not in_versions(field.get("versions"), version):
            continue
        kind: str = field["type"]
        if kind.startswith("[]"):
            inner = kind[2:]
            if "fields" in field:
                element = compile_walker(field["fields"], version, flexible)
            elif inner in _FIXED:
                element = _skip_fixed(_FIXED[inner])
            elif inner == "string":
                element = _skip_string(flexible)
            else:
                element = _skip_bytes(flexible)
            steps.append(_array(element, flexible))
        elif "fields" in field:
            steps.append(compile_walker(field["fields"], version, flexible))
        elif kind in _FIXED:
            steps.append(_skip_fixed(_FIXED[kind]))
        elif kind == "string":
            steps.append(_skip_string(flexible))
        elif kind in _BYTES_LIKE:
            steps.append(_skip_bytes(flexible))
        else:
            raise ValueError(f"schema type {kind!r} of field {field['name']} is not walkable")
    skip_tags = flexible and trailing_tags

    def walk(data: bytes, pos: int) -> int:
        for step in steps:
            pos = step(data, pos)
        if skip_tags:
            pos = skip_tagged_fields(data, pos)
        return pos

    return walk


def _array(element: Skipper, flexible: bool) -> Skipper:
    def walk(data: bytes, pos: int) -> int:
        count, pos = _array_length(flexible, data, pos)
        for _ in range(max(count, 0)):
            pos = element(data, pos)
        return pos

    return walk


@cache
def _tagged_section_finder(api_key: int, version: int) -> Skipper:
    cls = response_class(api_key)
    return compile_walker(cls.json["fields"], version, flexible=True, trailing_tags=False)


def has_top_level_tags(frame: bytes, body_offset: int, api_key: int, version: int) -> bool:
    """Whether a flexible response body carries any top-level tagged field."""
    try:
        end = _tagged_section_finder(api_key, version)(frame, body_offset)
        count, _ = read_uvarint(frame, end)
    except (IndexError, struct_error) as exc:
        raise ProtocolError(f"truncated response api_key={api_key} v{version}") from exc
    return count > 0
