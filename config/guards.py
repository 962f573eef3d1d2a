"""[guards.*]: limits on what Kafka's quotas let through (issue 52). Each guard is a table of
its own, and is on when its table is in the file."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from config.values import typed_values

#: the guards, by table name under [guards]
GUARDS = ("failed_logins",)


@dataclass(frozen=True)
class FailedLoginSettings:
    """[guards.failed_logins]: the wait before a user's, or a client address's, next SASL
    authentication after the broker refused one (proxy/enforcement/failed_logins.py)."""

    #: the wait after the first refusal; each refusal after it doubles it
    first_wait_ms: int = 100
    #: the longest wait, and how long a user or address is remembered once its wait has run
    #: out
    max_wait_ms: int = 20_000
    #: decide, log and count the waits, but hold no client
    shadow: bool = False


_FAILED_LOGIN_KEYS: dict[str, tuple[type, ...]] = {
    "first_wait_ms": (int,),
    "max_wait_ms": (int,),
    "shadow": (bool,),
}


def parse_guards(section: dict[str, Any], problems: list[str]) -> FailedLoginSettings | None:
    """[guards]: each guard's table; None for failed logins without [guards.failed_logins]."""
    for name, table in section.items():
        if name not in GUARDS:
            problems.append(f"unknown table [guards.{name}] (known: {', '.join(GUARDS)})")
        elif not isinstance(table, dict):
            problems.append(f"[guards.{name}] must be a table")
    failed_logins = section.get("failed_logins")
    if not isinstance(failed_logins, dict):
        return None
    values = typed_values("guards.failed_logins", failed_logins, _FAILED_LOGIN_KEYS, problems)
    settings = FailedLoginSettings(**values)
    nonpositive = [key for key in ("first_wait_ms", "max_wait_ms") if getattr(settings, key) <= 0]
    for key in nonpositive:
        problems.append(
            f"[guards.failed_logins] key '{key}': expected a positive number of "
            f"milliseconds, got {getattr(settings, key)}"
        )
    if not nonpositive and settings.max_wait_ms < settings.first_wait_ms:
        problems.append(
            f"[guards.failed_logins] key 'max_wait_ms': {settings.max_wait_ms} is less than "
            f"first_wait_ms ({settings.first_wait_ms})"
        )
    return settings
