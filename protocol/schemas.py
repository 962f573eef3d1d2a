"""Apache Kafka's JSON message specs, as shipped inside kafka-python, indexed by api_key.

Used where the proxy needs a fact about *every* API rather than the few it decodes: where
throttle_time_ms sits in each response version.
"""

from __future__ import annotations

import importlib.resources
from functools import cache
from typing import Any

from kafka.protocol.schemas import BaseField
from kafka.protocol.schemas.load_json import load_json

_RESOURCES = "kafka.protocol.schemas.resources"


@cache
def response_schemas() -> dict[int, dict[str, Any]]:
    return _schemas("Response.json")


@cache
def request_schemas() -> dict[int, dict[str, Any]]:
    return _schemas("Request.json")


def _schemas(suffix: str) -> dict[int, dict[str, Any]]:
    schemas: dict[int, dict[str, Any]] = {}
    for entry in importlib.resources.files(_RESOURCES).iterdir():
        if entry.name.endswith(suffix):
            schema = load_json(entry.name.removesuffix(".json"))
            schemas[int(schema["apiKey"])] = schema
    return schemas


def in_versions(spec: str | None, version: int) -> bool:
    """Whether `version` is within a spec's "versions" string ("3+", "0-4", "none")."""
    versions = BaseField.parse_versions(spec)
    return versions is not None and versions[0] <= version <= versions[1]


def first_flexible_version(schema: dict[str, Any]) -> int:
    """The first version with compact encodings and tagged fields (2**15 for none)."""
    versions = BaseField.parse_versions(schema.get("flexibleVersions"))
    return versions[0] if versions is not None and versions[0] >= 0 else 1 << 15
