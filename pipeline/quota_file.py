"""The recommended quotas as a config file the proxy loads: `check-config` accepts it and a
running proxy hot-reloads it when it replaces the proxy's config file.

Given the proxy's current config, everything but the quota entities is kept as it is, and
the current entities stay unless a recommendation replaces their value; without it, the
file holds the entities alone (every other setting at its default).
"""

from __future__ import annotations

import json
import math
import re
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from quotas.entities import QuotaType

#: the recommended value of each quota key for one entity path: ("alice", "app") is
#: users/alice/clients/app, ("alice", None) is users/alice
Recommendations = Mapping[tuple[str, str | None], Mapping[str, float]]

_BARE_KEY = re.compile(r"^[A-Za-z0-9_-]+$")
_SETTINGS_SECTIONS = ("proxy", "metrics", "usage", "enforcement", "broker")
#: Kafka declares the byte rates LONG
_INTEGER_KEYS = frozenset({QuotaType.PRODUCE.key, QuotaType.FETCH.key})


def quota_file(recommended: Recommendations, current: Path | None, header: str) -> str:
    document: dict[str, Any] = tomllib.loads(current.read_text()) if current else {}
    users = document.setdefault("users", {})
    for (user, client_id), quotas in sorted(recommended.items(), key=lambda kv: str(kv[0])):
        table = users.setdefault(user, {})
        if client_id is not None:
            table = table.setdefault("clients", {}).setdefault(client_id, {})
        for key, value in quotas.items():
            table[key] = math.ceil(value) if key in _INTEGER_KEYS else value
    lines = [f"# {line}" for line in header.splitlines()]
    for section in _SETTINGS_SECTIONS:
        if section in document:
            lines += ["", f"[{section}]"]
            lines += [f"{key} = {_value(value)}" for key, value in _dotted(document[section])]
    for kind in ("users", "clients"):
        for name, table in document.get(kind, {}).items():
            lines += _entity([kind, name], table)
    return "\n".join(lines) + "\n"


def _entity(path: list[str], table: Mapping[str, Any]) -> list[str]:
    nested = table.get("clients", {})
    quotas = {key: value for key, value in table.items() if key != "clients"}
    lines = []
    if quotas:
        lines += ["", "[" + ".".join(_key(part) for part in path) + "]"]
        lines += [f"{_key(key)} = {_value(value)}" for key, value in quotas.items()]
    for client_id, client_table in nested.items():
        lines += _entity([*path, "clients", client_id], client_table)
    return lines


def _dotted(table: Mapping[str, Any], prefix: str = "") -> list[tuple[str, Any]]:
    """`quota.window.num = 11` is a nested table once parsed: written back dotted."""
    items: list[tuple[str, Any]] = []
    for key, value in table.items():
        name = f"{prefix}{_key(key)}"
        if isinstance(value, dict):
            items += _dotted(value, f"{name}.")
        else:
            items.append((name, value))
    return items


def _key(key: str) -> str:
    return key if _BARE_KEY.match(key) else _string(key)


def _string(text: str) -> str:
    """A TOML basic string: JSON's escapes, without its surrogate pairs, which TOML refuses,
    and with DEL escaped, which JSON leaves alone."""
    return json.dumps(text, ensure_ascii=False).replace("\x7f", "\\u007f")


def _value(value: Any) -> str:
    """TOML's scalars and arrays; JSON's string escapes are TOML's basic-string escapes."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return "[" + ", ".join(_value(item) for item in value) + "]"
    if isinstance(value, float):
        return repr(value)  # quotas are finite: config/quotas.py refuses others
    if isinstance(value, str):
        return _string(value)
    return json.dumps(value)
