"""[guards.*]: limits on what Kafka's quotas let through (issue 52). Each guard is a table of
its own, and is on when its table is in the file."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Final

from config.values import typed_values
from quotas.entities import BUCKETS
from quotas.settings import GuardSettings

#: the guards, by table name under [guards]
GUARDS = ("connections", "disk", "failed_logins", "requests")
#: half of Kafka's group.min.session.timeout.ms default, the shortest session a broker
#: grants: a guard's throttle mutes a connection at most this long, so a group member
#: muted between two heartbeats still heartbeats within its session (docs/guards.md)
MAX_GUARD_THROTTLE_MS: Final = 3000


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


#: [guards.connections]: the limits are quota keys of the entities; the creation rate's
#: bucket is sized and its delay capped by [guards.requests]
CONNECTION_KEYS: dict[str, tuple[type, ...]] = {"shadow": (bool,)}


@dataclass(frozen=True)
class DiskGuardSettings:
    """[guards.disk]: how the disk guard reads the brokers' log directories; the limits are
    keys of the broker entities (docs/ceilings.md#the-disk-guard)."""

    #: how often each broker's log directories are read (DescribeLogDirs)
    interval_s: float = 10.0
    #: a broker not read for this long is said stale; its decisions are kept
    stale_after_s: float = 60.0
    #: bytes per second every writer of a directory together is held at, at its hard limit
    minimum_rate: int = 10240
    #: decide, log and count, but hold no writer
    shadow: bool = False


DISK_KEYS: dict[str, tuple[type, ...]] = {
    "interval_s": (int, float),
    "stale_after_s": (int, float),
    "minimum_rate": (int,),
    "shadow": (bool,),
}


REQUEST_KEYS: dict[str, tuple[type, ...]] = {
    "burst_s": (int,),
    "bursts": (dict,),
    "max_throttle_ms": (int,),
    "shadow": (bool,),
}


@dataclass(frozen=True)
class Guards:
    """[guards]: what each guard's table sets."""

    #: None: the failed-login backoff is off
    failed_logins: FailedLoginSettings | None = None
    #: the request-rate guards' buckets; the rates are quota keys of the entities
    requests: GuardSettings = field(default_factory=GuardSettings)
    #: [guards.requests] shadow: every request-rate guard decides, logs and counts only
    requests_shadow: bool = False
    #: [guards.connections] shadow: both connection guards decide, log and count only
    connections_shadow: bool = False
    #: None: the disk guard is off
    disk: DiskGuardSettings | None = None


def parse_guards(section: dict[str, Any], problems: list[str]) -> Guards:
    """[guards]: each guard's table."""
    for name, table in section.items():
        if name not in GUARDS:
            problems.append(f"unknown table [guards.{name}] (known: {', '.join(GUARDS)})")
        elif not isinstance(table, dict):
            problems.append(f"[guards.{name}] must be a table")
    requests = section.get("requests")
    values = (
        typed_values("guards.requests", requests, REQUEST_KEYS, problems)
        if isinstance(requests, dict)
        else {}
    )
    shadow = values.pop("shadow", False)
    connections = section.get("connections")
    connection_values = (
        typed_values("guards.connections", connections, CONNECTION_KEYS, problems)
        if isinstance(connections, dict)
        else {}
    )
    return Guards(
        _failed_logins(section, problems),
        _requests(values, problems),
        shadow,
        connection_values.get("shadow", False),
        _disk(section, problems),
    )


def _disk(section: dict[str, Any], problems: list[str]) -> DiskGuardSettings | None:
    """[guards.disk]; None without the table."""
    disk = section.get("disk")
    if not isinstance(disk, dict):
        return None
    settings = DiskGuardSettings(**typed_values("guards.disk", disk, DISK_KEYS, problems))
    for key in ("interval_s", "stale_after_s", "minimum_rate"):
        if getattr(settings, key) <= 0:
            problems.append(
                f"[guards.disk] key '{key}': expected more than 0, got {getattr(settings, key)}"
            )
    return settings


def _requests(values: dict[str, Any], problems: list[str]) -> GuardSettings:
    bursts = _bursts(values.pop("bursts", {}), problems)
    settings = GuardSettings(**values, bursts=bursts)
    if settings.burst_s < 1:
        problems.append(
            f"[guards.requests] key 'burst_s': expected at least 1 second, got {settings.burst_s}"
        )
    if not 1 <= settings.max_throttle_ms <= MAX_GUARD_THROTTLE_MS:
        problems.append(
            f"[guards.requests] key 'max_throttle_ms': expected 1 to {MAX_GUARD_THROTTLE_MS}, "
            f"got {settings.max_throttle_ms}: a guard's throttle mutes the connection, and a "
            f"longer one could keep a group member's heartbeat past Kafka's shortest session "
            f"(group.min.session.timeout.ms, 6000 ms by default), expelling it from its group"
        )
    return settings


def _bursts(table: dict[str, Any], problems: list[str]) -> tuple[tuple[str, int], ...]:
    """[guards.requests] bursts: seconds of its rate by guard, for the guards whose bucket is
    not burst_s."""
    names = [guard.guard_name for guard in BUCKETS]
    bursts = []
    for name, seconds in table.items():
        if name not in names:
            problems.append(
                f"[guards.requests] key 'bursts': unknown guard '{name}' (known: "
                f"{', '.join(names)})"
            )
        elif isinstance(seconds, bool) or not isinstance(seconds, int) or seconds < 1:
            problems.append(
                f"[guards.requests] key 'bursts': '{name}' expected at least 1 second, got "
                f"{seconds!r}"
            )
        else:
            bursts.append((name, seconds))
    return tuple(bursts)


def _failed_logins(section: dict[str, Any], problems: list[str]) -> FailedLoginSettings | None:
    """[guards.failed_logins]; None without the table."""
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
