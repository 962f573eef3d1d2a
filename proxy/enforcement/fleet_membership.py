"""Who is in a fleet, as one member hears its bus: the other members heard lately, which of
them write records a member of version 1 reads, and whether this member reads its own
publications back (its bus is up).

Membership is what the bus shows: a member whose publications stop for GONE_AFTER intervals
is gone. A member that stops reading its own publications back has lost the bus: it holds
its share of every budget (the limit over the members it last saw), never the whole limit,
until it reads itself again.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import Final

#: sync intervals of silence after which a member is gone (or, for its own publications, the
#: bus is)
GONE_AFTER: Final = 4
#: how long after a member of record version 1 was last heard its records are still written:
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
        #: members heard writing version 1 records (they read no standings), when last
        self._older: dict[str, int] = {}
        #: when this member's own last publication came back from the bus
        self._own_ms: int | None = None
        #: the members alive when the bus was last up: the budget is shared among them
        #: while it is down
        self._members_when_up = 1

    def heard_self(self, now_ms: int) -> None:
        """This member's own publication came back: its bus is up."""
        self._own_ms = now_ms
        self._members_when_up = self.members(now_ms)

    def heard(self, member: str, now_ms: int, older: bool) -> bool:
        """Another member's publication (`older`: of version 1); True if the member was not
        heard lately (it joined)."""
        joined = member not in self._heard
        self._heard[member] = now_ms
        if older:
            self._older[member] = now_ms
        return joined

    def hears_older(self, now_ms: int) -> bool:
        """Whether a member that reads only STANDINGLESS records was heard in the last
        OLDER_FOR_MS: then every use is published whole, in records it reads."""
        gone = [m for m, heard in self._older.items() if now_ms - heard > OLDER_FOR_MS]
        for member in gone:
            del self._older[member]
        return bool(self._older)

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
        own = self._own_ms
        return own is not None and now_ms - own <= self.gone_after_ms

    def share(self, now_ms: int) -> float:
        """The share of each budget this member enforces on its own: all of it while the bus
        carries the fleet's use, 1 / the members last seen while it does not."""
        return 1.0 if self.bus_up(now_ms) else 1.0 / self._members_when_up
