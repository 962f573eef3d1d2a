"""[enforcement]: which quotas run in shadow mode, and what a throttle holds."""

from __future__ import annotations

from typing import Any, Final

from config.values import typed_values
from quotas.entities import CEILING_CLASSES, CLUSTER_CEILINGS, DISK_LIMITS, QUOTA_KEYS, QuotaType

_HOLDS = ("principal", "connection")
#: the quota keys whose throttles shadow mode keeps from clients: a ceiling's class keys,
#: the cluster's ceilings (shadowed with the broker's of their kind) and the disk guard's
#: limits decide no throttle of their own
_NOT_THROTTLES: Final = frozenset({*CEILING_CLASSES, *CLUSTER_CEILINGS.values(), *DISK_LIMITS})
SHADOWED: dict[str, QuotaType] = {
    key: quota_type for key, quota_type in QUOTA_KEYS.items() if quota_type not in _NOT_THROTTLES
}
#: the keys of [enforcement] and their TOML types
KEYS: dict[str, tuple[type, ...]] = {"shadow": (bool, list), "hold": (str,)}


def parse_enforcement(
    section: dict[str, Any], problems: list[str]
) -> tuple[frozenset[QuotaType], bool]:
    """[enforcement]: which quotas run in shadow mode, and whether a throttle holds the
    principal (`hold = "principal"`, the default) or only its connection (`"connection"`).

    shadow: true (every quota), false, or a list of quota keys. Shadowed quota types are
    measured and decided as usual, and the decisions are logged and counted, but no client
    is throttled for them: a way to trial quotas on live traffic.
    """
    values = typed_values("enforcement", section, KEYS, problems)
    hold = values.get("hold", "principal")
    if hold not in _HOLDS:
        problems.append(
            f"[enforcement] key 'hold': expected one of {', '.join(_HOLDS)}, got {hold!r}"
        )
    hold_principal = hold != "connection"
    shadow = values.get("shadow", False)
    if isinstance(shadow, bool):
        return (frozenset(SHADOWED.values()) if shadow else frozenset()), hold_principal
    unknown = [key for key in shadow if not isinstance(key, str) or key not in SHADOWED]
    if unknown:
        problems.append(
            f"[enforcement] key 'shadow': unknown quota {', '.join(map(repr, unknown))} "
            f"(known: {', '.join(SHADOWED)})"
        )
        return frozenset(), hold_principal
    return frozenset(SHADOWED[key] for key in shadow), hold_principal
