"""[fleet]: the instances that hold one budget per quota entity together."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from config.values import typed_values
from quotas.validation import legal_topic

#: a fleet's bus is this topic, suffixed with the fleet's name
FLEET_TOPIC_PREFIX = "kafka-quota-proxy-fleet."
#: the owners' topic of a fleet of owners is its bus's, suffixed
OWNERS_SUFFIX = ".owners"


@dataclass(frozen=True)
class FleetSettings:
    """[fleet]: instances (and workers) with the same name in front of the same cluster hold
    one budget per quota entity, through a topic of their own on it (proxy/control/fleet_bus.py).
    No name: an instance of one worker holds its budgets alone; one of several workers is a
    fleet of its own host (see fleet_name)."""

    name: str = ""
    #: how often each member publishes the use it charged
    sync_interval_ms: int = 250
    #: each member's use through the owners of its principals, not to every member
    #: (docs/fleet.md#owners); every member of a fleet sets it alike
    owners: bool = False


#: bounds of sync_interval_ms: below, the bus costs more than it buys; above, the fleet's
#: error grows past what a quota window can hide (docs/fleet.md, "The bound, and why")
SYNC_INTERVAL_MS = (10, 10_000)


def parse_fleet(section: dict[str, Any], problems: list[str]) -> FleetSettings:
    values = typed_values(
        "fleet", section, {"name": (str,), "sync_interval_ms": (int,), "owners": (bool,)}, problems
    )
    name = values.get("name", "")
    topic = FLEET_TOPIC_PREFIX + "<name>" + (OWNERS_SUFFIX if values.get("owners") else "")
    if name and not legal_topic(topic.replace("<name>", name)):
        problems.append(
            f"[fleet] key 'name': {name!r} cannot name a Kafka topic "
            f"({topic}: up to {249 - len(topic) + len('<name>')} of a-z A-Z 0-9 . _ -)"
        )
        values.pop("name")
    low, high = SYNC_INTERVAL_MS
    interval = values.get("sync_interval_ms")
    if interval is not None and not low <= interval <= high:
        problems.append(
            f"[fleet] key 'sync_interval_ms': must be between {low} and {high}, got {interval}"
        )
        values.pop("sync_interval_ms")
    if section and not values.get("name") and "name" not in section:
        problems.append("[fleet] key 'name': missing (the fleet's members share it)")
    return FleetSettings(**values)
