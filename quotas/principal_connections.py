"""Open connections per principal (issue 52's connection guard), held across a fleet.

`kafka-quota-proxy.connections` caps the connections a quota entity (a user, a client-id or
both, with Kafka's precedence and `<default>`) holds open at once. Kafka limits connections
per address only (max.connections.per.ip), which means nothing behind a NAT or a load
balancer. A connection counts from its first request past authentication, when its
principal is known, until it closes; one that would pass the limit is refused then. Every
open connection is counted by its (user, client-id) whatever the limits, so a reload that
sets a limit finds the connections already open.

A count is a gauge, not a use: across a fleet each member publishes its own count whole,
and a member gone takes its counts with it (proxy/enforcement/fleet.py carries them). As
for the rates, what is published follows the principals near their limit. A principal no
member watches is held on each member to its share of the line (`line_share` of the limit
over the members), so the fleet's connections stay under the line unheard. The connection
that passes it makes the member watch the principal and publish its count every interval;
a member that hears a count that matters watches the principal too.

A watched principal's room is its limit less this member's count at its last publication
and each other member's last count (where a member has reported none: as many as this one,
and at least its share of the line, for it may have passed its line unheard as this one
did; while none is heard, each member then holds at most its limit over the members).
Between two publications a member admits room // members (the whole room while no other
member is admitting: its count rose, it refused one, or it has not reported); a member not
heard since this one last published may have admitted its own part meanwhile, which is
taken off the room first. The last NEAR connections per member are admitted only in turns:
once every member that reports the principal has reported since this member last published,
their counts are newer than its own, and each of them, waiting for this member's next
report, admits nothing meanwhile, so a late bus makes them wait rather than pass the limit
together. Far from the limit nobody waits for a turn; near it (a principal at 46 of 50 on
two members, in a simulation of connections that live 2 s) a connection that comes outside
its member's turn is refused though there is room, and its client's reconnect backoff
brings it back. Members storming together can leave the last connection or two unused. A
count published with a half added says its member refused one. A principal is left once the
fleet's count, and this member's weighted by the members, have stayed under half the line
for `cool_after` intervals; its COLD is said a few times, in case a publication is lost. A
member whose bus is down holds its share of each limit alone (its limits are then that
share: proxy/runtime/context.py).

Pure: the fleet passes the members it hears.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Iterator, Mapping
from typing import Final, NamedTuple

from quotas.entities import EntityQuotas, MetricTags, QuotaEntity, QuotaType

#: the count a member publishes for a principal it leaves: not a count, the end of one (the
#: principal is held there to its share of the line again)
COLD: Final = -1.0

#: (user, client_id) as a request names them
Client = tuple[str, str]


#: a published count with this added: its member refused a connection of the principal
WANTING: Final = 0.5
#: a room of at most this many connections per member is admitted in turns alone
NEAR: Final = 2


class _Report(NamedTuple):
    connections: int
    #: whether its member is admitting: its count rose, or it refused one
    admitting: bool


class _Watched:
    __slots__ = ("base", "cool", "heard", "reports", "wanting")

    def __init__(self, base: int) -> None:
        #: this member's count when it last published it
        self.base = base
        #: intervals in a row under half the line
        self.cool = 0
        #: whether this member refused a connection of the principal since it published
        self.wanting = False
        #: other member -> its last report
        self.reports: dict[str, _Report] = {}
        #: the members whose report came since this member last published
        self.heard: set[str] = set()


class PrincipalConnections:
    def __init__(self) -> None:
        self._quotas = EntityQuotas({})
        #: whether some entity sets a limit
        self.enabled = False
        #: every open connection past authentication, by the client it first named
        self._clients: Counter[Client] = Counter()
        #: open connections here, by the metric tags the limits resolve them to (enabled only)
        self.here: Counter[MetricTags] = Counter()
        self._watched: dict[MetricTags, _Watched] = {}
        #: principals left lately -> the publications that still say so (one may be lost)
        self._leaving: dict[MetricTags, int] = {}
        #: a fleet's line share (None outside a fleet, or while its bus is down: each limit
        #: is held alone then), this member's name and the others heard lately
        self.line_share: float | None = None
        self.member = ""
        self.others: frozenset[str] = frozenset()
        #: connections refused, and those shadow mode let through, by quota type and tags
        self.refused: Counter[tuple[QuotaType, MetricTags]] = Counter()
        self.shadowed: Counter[tuple[QuotaType, MetricTags]] = Counter()

    def update_limits(self, limits: Mapping[QuotaEntity, float]) -> None:
        """New limits: the open connections are counted again under the tags they resolve to
        now (a limit set on a principal already connected finds its connections)."""
        self._quotas = EntityQuotas(limits)
        self.enabled = self._quotas.levels_enabled != 0
        self.here = Counter()
        if self.enabled:
            for (user, client_id), count in self._clients.items():
                self.here[self._quotas.metric_tags(user, client_id)] += count
        self._watched = {t: w for t, w in self._watched.items() if self.limit(t) is not None}

    def tags(self, user: str, client_id: str) -> MetricTags:
        return self._quotas.metric_tags(user, client_id)

    def limit(self, tags: MetricTags) -> float | None:
        return self._quotas.limit(tags)

    def entity_for(self, tags: MetricTags) -> QuotaEntity | None:
        return self._quotas.entity_for(tags)

    def room(self, tags: MetricTags, limit: float) -> bool:
        """Whether one more connection of these tags stays within the limit, as this member
        knows the fleet; a principal that passes its line here is watched from now."""
        here = self.here[tags] + 1
        line_share = self.line_share
        if line_share is None:
            return here <= limit
        members = 1 + len(self.others)
        watched = self._watched.get(tags)
        if watched is None:
            if here * members <= line_share * limit:
                return True
            watched = self._watched[tags] = _Watched(here - 1)
            self._leaving.pop(tags, None)
        reports = watched.reports
        room = int(limit - watched.base - self._others(watched, limit))
        # a member not heard since this one published may have admitted its part since;
        # the last few connections are admitted only in turns
        unheard = sum(1 for m in reports if m not in watched.heard)
        room -= unheard * (room // members)
        if room <= 0 or (unheard and room <= NEAR * members):
            watched.wanting = True
            return False
        alone = not any(_admitting(reports.get(m)) for m in self.others)
        if here - watched.base > (room if alone else room // members):
            watched.wanting = True
            return False
        return True

    def connected(self, client: Client) -> None:
        """A connection counted (admitted, or let through by shadow mode)."""
        self._clients[client] += 1
        if self.enabled:
            self.here[self._quotas.metric_tags(*client)] += 1

    def closed(self, client: Client) -> None:
        clients = self._clients
        clients[client] -= 1
        if not clients[client]:
            del clients[client]
        if self.enabled:
            tags = self._quotas.metric_tags(*client)
            here = self.here
            here[tags] -= 1
            if here[tags] <= 0:
                del here[tags]

    def fleet(self, tags: MetricTags) -> float:
        """The principal's connections over the fleet as this member knows them (its own
        alone where it does not watch the principal)."""
        watched = self._watched.get(tags)
        reported = 0 if watched is None else sum(r.connections for r in watched.reports.values())
        return self.here[tags] + reported

    def _others(self, watched: _Watched, limit: float) -> float:
        """The other members' connections: as reported; where a member has reported none,
        as many as this member had at its last publication, and at least its share of the
        line (it may have passed its line as this one did, and not been heard yet)."""
        reports = watched.reports
        unreported = sum(1 for m in self.others if m not in reports)
        line = (self.line_share or 0.0) * limit / (1 + len(self.others))
        return sum(r.connections for r in reports.values()) + unreported * max(line, watched.base)

    def _matters(self, total: float, here: int, limit: float) -> bool:
        """Whether a count is past half the line: the fleet's, or this member's weighted."""
        half_line = (self.line_share or 0.0) * limit / 2
        return total > half_line or here * (1 + len(self.others)) > half_line

    def place(self, line_share: float | None, member: str, others: Collection[str]) -> None:
        """The fleet as its member knows it now; the reports of members gone are dropped:
        a live member's last report stands until it names another, however late the bus
        brings it."""
        self.line_share, self.member = line_share, member
        if others == self.others:
            return
        self.others = frozenset(others)
        for watched in self._watched.values():
            reports = watched.reports
            for other in [m for m in reports if m not in others]:
                del reports[other]

    def publish(self, cool_after: int, repeat: int) -> Iterator[tuple[MetricTags, float]]:
        """This member's count of each principal it watches (with WANTING added if it
        refused one since), and COLD for each it left in the last `repeat` publications
        (so that one lost does not leave the others counting it)."""
        leaving = self._leaving
        for tags, watched in list(self._watched.items()):
            reports = watched.reports
            limit = self.limit(tags)
            here = self.here[tags]
            if limit is not None:
                total = here + sum(r.connections for r in reports.values())
                watched.cool = 0 if self._matters(total, here, limit) else watched.cool + 1
            if limit is None or watched.cool >= cool_after:
                del self._watched[tags]
                leaving[tags] = repeat
                continue
            wanting = watched.wanting
            watched.base, watched.wanting = here, False
            watched.heard.clear()
            yield tags, here + WANTING if wanting else float(here)
        for tags, left in list(leaving.items()):
            yield tags, COLD
            if left > 1:
                leaving[tags] = left - 1
            else:
                del leaving[tags]

    def receive(self, member: str, tags: MetricTags, count: float) -> None:
        """Another member's count of a principal (COLD: it left the principal)."""
        watched = self._watched.get(tags)
        if count < 0:
            if watched is not None:
                watched.reports.pop(member, None)
                watched.heard.discard(member)
            return
        if watched is None:
            limit = self.limit(tags)
            here = self.here[tags]
            if limit is None or not self._matters(here + count, here, limit):
                return
            watched = self._watched[tags] = _Watched(here)
            self._leaving.pop(tags, None)
        whole = int(count)
        before = watched.reports.get(member)
        admitting = count > whole or before is None or whole > before.connections
        watched.reports[member] = _Report(whole, admitting)
        watched.heard.add(member)

    def watched(self) -> int:
        return len(self._watched)


def _admitting(report: _Report | None) -> bool:
    """Whether another member may be admitting connections now (one that has not
    reported may)."""
    return report is None or report.admitting
