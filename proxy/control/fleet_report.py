"""What a fleet's bus says of itself (fleet_bus.py): the budget share in force and the
metrics, and a log line each time the bus goes up or down, the members heard change, or the
oldest record version a member reads does. Its state is what was last reported."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Final

from protocol.fleet_records import RESTATING, STANDINGLESS, VERSION
from proxy.enforcement.fleet import FleetMember
from proxy.enforcement.fleet_membership import OLDER_FOR_MS
from proxy.runtime.context import ProxyContext
from proxy.runtime.counters import FleetStats

#: its lines are the bus's, under the bus's logger, as before the cut
log = logging.getLogger("proxy.control.fleet_bus")

#: what a member writes for a member of an older record version, by the version it reads
_WRITTEN_FOR: Final = {
    STANDINGLESS: "its whole use, and no standings",
    RESTATING: "every standing named again every few seconds",
}


class BusReport:
    def __init__(
        self, member: FleetMember, context: ProxyContext, stats: FleetStats, name: str, topic: str
    ) -> None:
        self._member = member
        self._context = context
        self._stats = stats
        self._name = name
        self._topic = topic
        #: whether the bus was up when last reported; the oldest record version a member
        #: heard then reads
        self._up = False
        self._reads = VERSION
        #: the other members heard when last reported
        self._others: frozenset[str] = frozenset()

    def report(self, now_ms: int, why_down: Callable[[int], str]) -> None:
        """The budget share in force, the metrics, and a log line when the bus changes
        (`why_down`: why it fell, asked only then)."""
        up = self._member.membership.bus_up(now_ms)
        share = self._member.membership.share(now_ms)
        self._context.share_budgets(share)
        self._stats.members = self._member.membership.members(now_ms)
        self._stats.bus_up = up
        self._stats.budget_share = share
        self._stats.watched = self._member.watched()
        if up and not self._up:
            log.info(
                "fleet %s: bus up on %s (members heard: %d): one budget per quota entity",
                self._name,
                self._topic,
                self._stats.members,
            )
        elif self._up and not up:
            log.warning(
                "fleet %s: bus %s lost (%s): each budget is held as 1/%d of it here until "
                "the bus is back",
                self._name,
                self._topic,
                why_down(now_ms),
                round(1 / share),
            )
        self._up = up
        others = frozenset(self._member.membership.others(now_ms))
        if others != self._others:
            log.info(
                "fleet %s: members heard: %d (joined: %s; gone, silent for %d ms: %s)",
                self._name,
                1 + len(others),
                ", ".join(sorted(others - self._others)) or "none",
                self._member.membership.gone_after_ms,
                ", ".join(sorted(self._others - others)) or "none",
            )
            self._others = others
        reads = self._member.membership.oldest_read(now_ms)
        if reads != self._reads:
            if reads < VERSION:
                log.warning(
                    "fleet %s: a member of record version %d is heard: every member writes "
                    "records it reads (%s) until it is gone",
                    self._name,
                    reads,
                    _WRITTEN_FOR[reads],
                )
            else:
                log.info(
                    "fleet %s: no member of an older record version heard for %d s: records "
                    "of version %d again",
                    self._name,
                    OLDER_FOR_MS // 1000,
                    VERSION,
                )
        self._reads = reads
