"""Who is in a fleet, as one member hears its bus: the other members heard lately, the oldest
record version one of them reads, and whether this member reads its own publications back
(its bus is up).

Membership is what the bus shows: a member whose publications stop for GONE_AFTER intervals
is gone. A member that stops reading its own publications back has lost the bus: it holds
its share of every budget (the limit over the members it last saw), never the whole limit,
until it reads itself again.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import Final

from protocol.fleet_records import VERSION

#: sync intervals of silence after which a member is gone (or, for its own publications, the
#: bus is)
GONE_AFTER: Final = 4
#: how long after a member of an older record version was last heard its records are still
#: written:
#: far longer than a member is gone after, since one that reads the bus late for a second
#: (a loaded host) must not see records it cannot read
OLDER_FOR_MS: Final = 30_000


class Membership:
    def __init__(self, sync_interval_ms: int, gone: Callable[[str], None]) -> None:
        self.gone_after_ms = GONE_AFTER * sync_interval_ms
        #: told of each member found gone
        self._gone = gone
        #: other members -> when their last publication arrived (this member's clock)
        self._heard: dict[str, int] = {}
        #: members heard reading an older record version than VERSION: (it, when last)
        self._older: dict[str, tuple[int, int]] = {}
        #: when this member's own last publication came back from the bus
        self._own_ms: int | None = None
        #: the members alive when the bus was last up: the budget is shared among them
        #: while it is down
        self._members_when_up = 1
        #: when a member sharing its use the other way (owners, or straight) was last heard
        self._other_kind_ms: int | None = None

    def heard_self(self, now_ms: int) -> None:
        """This member's own publication came back: its bus is up."""
        self._own_ms = now_ms
        self._members_when_up = self.members(now_ms)

    def fell(self) -> None:
        """This member's bus is down now, not GONE_AFTER intervals after it was last up
        (fleet_owners.py: its owner adds up none of its use)."""
        self._own_ms = None

    def heard(self, member: str, now_ms: int, reads: int) -> bool:
        """Another member's publication, of a member that reads records up to version
        `reads`; True if the member was not heard lately (it joined)."""
        joined = member not in self._heard
        self._heard[member] = now_ms
        if reads < VERSION:
            self._older[member] = (reads, now_ms)
        return joined

    def heard_other_kind(self, member: str, now_ms: int) -> bool:
        """A member that shares its use the other way (through owners, or straight:
        docs/fleet.md#owners). Neither reads the other's use, so while one is heard, and
        OLDER_FOR_MS after, this member's bus is down: it holds its share of every budget,
        that member counted. True if none was heard lately."""
        last = self._other_kind_ms
        self._other_kind_ms = now_ms
        self.heard(member, now_ms, VERSION)
        self._members_when_up = max(self._members_when_up, self.members(now_ms))
        return last is None or now_ms - last > OLDER_FOR_MS

    def oldest_read(self, now_ms: int) -> int:
        """The oldest record version a member heard in the last OLDER_FOR_MS reads: what
        this member writes."""
        older = self._older
        gone = [m for m, (_, heard) in older.items() if now_ms - heard > OLDER_FOR_MS]
        for member in gone:
            del older[member]
        return min((reads for reads, _ in older.values()), default=VERSION)

    def others(self, now_ms: int) -> Collection[str]:
        """The other members heard from lately."""
        self.members(now_ms)
        return self._heard.keys()

    def members(self, now_ms: int) -> int:
        """This member and every other heard from lately."""
        gone = [m for m, heard in self._heard.items() if now_ms - heard > self.gone_after_ms]
        for member in gone:
            del self._heard[member]
            self._gone(member)
        return 1 + len(self._heard)

    def bus_up(self, now_ms: int) -> bool:
        own, other_kind = self._own_ms, self._other_kind_ms
        if other_kind is not None and now_ms - other_kind <= OLDER_FOR_MS:
            return False
        return own is not None and now_ms - own <= self.gone_after_ms

    def share(self, now_ms: int) -> float:
        """The share of each budget this member enforces on its own: all of it while the bus
        carries the fleet's use, 1 / the members last seen while it does not."""
        return 1.0 if self.bus_up(now_ms) else 1.0 / self._members_when_up
