"""The records of the quota store's topic: one per (entity, quota key) altered through the
proxy, so a compacted topic keeps the last value of each, and two instances altering two keys
of one entity at once do not overwrite each other. A removed key is a tombstone.

    key   {"entity": [["user", "alice"], ["client-id", null]], "key": "producer_byte_rate"}
    value {"schema": 1, "value": 1048576.0}        (null: removed)

Entity types are Kafka's (user, client-id, ip) in that order, a null name the default entity.
"""

from __future__ import annotations

import json
from typing import Final

#: a reader skips, and logs, a record of a schema it does not know
SCHEMA_VERSION: Final = 1

Pairs = list[tuple[str, str | None]]


def record_key(pairs: Pairs, key: str) -> bytes:
    entity = [[entity_type, name] for entity_type, name in pairs]
    return json.dumps({"entity": entity, "key": key}, separators=(",", ":")).encode()


def record_value(value: float | None) -> bytes | None:
    if value is None:
        return None
    return json.dumps({"schema": SCHEMA_VERSION, "value": value}, separators=(",", ":")).encode()


def read_record(key: bytes, value: bytes | None) -> tuple[Pairs, str, float | None]:
    """(entity pairs, quota key, value or None); ValueError for a record this is not."""
    try:
        parsed = json.loads(key)
        if not isinstance(parsed, dict):
            raise ValueError("a quota record's key is not a JSON object")
        pairs = [(str(entity_type), name) for entity_type, name in parsed["entity"]]
        quota_key = parsed["key"]
        if not isinstance(quota_key, str) or not all(
            name is None or isinstance(name, str) for _, name in pairs
        ):
            raise ValueError("an entity name or the key is not a string")
        if value is None:
            return pairs, quota_key, None
        body = json.loads(value)
        if not isinstance(body, dict):
            raise ValueError("a quota record's value is not a JSON object")
        if body.get("schema") != SCHEMA_VERSION:
            raise ValueError(f"schema {body.get('schema')!r}, this proxy reads {SCHEMA_VERSION}")
        number = body["value"]
        if isinstance(number, bool) or not isinstance(number, int | float):
            raise ValueError(f"a value of {number!r}")
    except (json.JSONDecodeError, UnicodeDecodeError, KeyError, TypeError, RecursionError) as exc:
        # RecursionError: JSON nested deeper than Python's stack
        raise ValueError(f"not a quota record: {exc!r}") from exc
    return pairs, quota_key, float(number)
