"""What every section's parser shares: a table's keys by type, and the shapes of values
(addresses) that several sections accept."""

from __future__ import annotations

from typing import Any


def typed_values(
    name: str, section: dict[str, Any], types: dict[str, tuple[type, ...]], problems: list[str]
) -> dict[str, Any]:
    """The keys of one table that exist and have the right type; a message for each other."""
    values: dict[str, Any] = {}
    for key, value in section.items():
        expected = types.get(key)
        where = f"[{name}] key '{key}'"
        if expected is None:
            problems.append(f"{where}: unknown key (known: {', '.join(sorted(types))})")
        elif not has_type(value, expected):
            names = " or ".join(t.__name__ for t in expected)
            problems.append(f"{where}: expected {names}, got {type(value).__name__} {value!r}")
        else:
            values[key] = value
    return values


def has_type(value: Any, expected: tuple[type, ...]) -> bool:
    """isinstance, except that TOML's true/false is not accepted where a number is expected."""
    if isinstance(value, bool) and bool not in expected:
        return False
    return isinstance(value, expected)


def is_host_port(server: object) -> bool:
    if not isinstance(server, str):
        return False
    host, sep, port = server.rpartition(":")
    return bool(sep and host and port.isdigit() and 0 < int(port) <= 65535)
