"""Open connections per principal (issue 52's connection guard), held across a fleet.

`kafka-quota-proxy.connections` caps the connections a quota entity (a user, a client-id or
both, with Kafka's precedence and `<default>`) holds open at once. Kafka limits connections
per address only (max.connections.per.ip), which means nothing behind a NAT or a load
balancer. A connection counts from its first request past authentication, when its
principal is known, until it closes; one that would pass the limit is refused then. Every
open connection is counted by its (user, client-id) whatever the limits, so a reload that
sets a limit finds the connections already open.

Across a fleet the limit is held in escrow (the demarcation protocol): each member may hold
its floor, `line_share` of the limit over the members, without a word. A member whose count
passes half its floor asks every interval for what it may hold until its next ask: its count
and its share of the room the others' asks leave (all of it, split among the members that
refused connections, for one that refused one). A member that hears an ask while the
principal is busy asks too, and so gives back what of its floor it does not use. Each member
grants its own ask when it reads it back from the bus (one partition, one order for all): up
to the limit less every other member's latest ask read before it, whole (its floor where it
has none), and never below the claim it had. It admits up to that claim, and up to the
lowest of its asks not yet read back (an ask may give some back). So the members' claims
never sum past the limit: of any members, the one whose grant came last in the bus's order
was granted at most what the others' asks before it left, and each of them holds no more
than that ask, or a later one still in flight. No member needs to know what another was
granted, and one that reads the bus late only asks late. A member that refuses a connection
asks again at the next interval; a storm reaches the limit in a few intervals. A principal
is busy while a member's count is past half its floor, the fleet's past half the line, or a
member refuses one; a member leaves it once it has not been busy for `cool_after` intervals
and its claim is back at its floor (it asks for that first): COLD, said a few times in case
one is lost, returns it to its floor.

A member that missed records of the bus (it started and read only the last intervals, its
bus was opened again at the end of the topic, a record could not be read) may not know the
others' latest asks: it grants itself nothing more until it has read a publication of every
other member, one that asks nothing of a principal holding no more than its floor there. A
reload that lowers a limit holds at once: a member admits no more than the others' asks
leave. The claims hold while members agree on who is in the fleet (each floor is the limit
over them): a member joining or leaving moves every floor, and until all have heard it the
line share's slack is what holds the limit. A member gone takes its ask with it. A member
whose bus is down holds its share of each limit alone (its limits are then that share:
proxy/runtime/context.py). A member of a release before the claims publishes its count
alone, which stands as its ask.

Pure: the fleet passes the members it hears and the bus's records in its order.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Iterator, Mapping
from typing import Final, NamedTuple

from quotas.entities import EntityQuotas, MetricTags, QuotaEntity, QuotaType

#: the count and ask a member publishes for a principal it leaves: not a count, the end of
#: its claim (it holds its floor again)
COLD: Final = -1.0

#: (user, client_id) as a request names them
Client = tuple[str, str]


#: a published count with this added: its member refused a connection of the principal
#: (read by a member of a release before the claims)
WANTING: Final = 0.5


class Report(NamedTuple):
    """What a member says of a principal at one interval: its count, and its ask."""

    tags: MetricTags
    #: its open connections (COLD: it left the principal), with WANTING if it refused one
    connections: float
    #: the connections it asks to hold until its next ask (COLD: its floor again)
    ask: float


class _Escrow:
    """One principal in escrow: the members' latest asks, and this member's own claim."""

    __slots__ = ("asking", "claims", "cool", "counts", "pending", "wanting")

    def __init__(self) -> None:
        #: member -> its latest ask read, whole; this member's own as granted once read back
        self.claims: dict[str, int] = {}
        #: other member -> its last count, WANTING added if it refused one (a claim where its
        #: member asks none)
        self.counts: dict[str, float] = {}
        #: sequence of this member's publication -> its ask, until read back
        self.pending: dict[int, int] = {}
        #: whether this member asks for the principal
        self.asking = False
        #: intervals in a row the principal was not busy (_busy)
        self.cool = 0
        #: connections this member refused since it last asked
        self.wanting = 0

    def claim(self, member: str, floor: int) -> int:
        return max(self.claims.get(member, floor), int(self.counts.get(member, 0)))

    def cap(self, member: str, floor: int) -> int:
        """What this member may hold: its claim, and none of its asks not yet read back."""
        own = self.claims.get(member, floor)
        return min(own, *self.pending.values()) if self.pending else own


class PrincipalConnections:
    def __init__(self) -> None:
        self._quotas = EntityQuotas({})
        #: whether some entity sets a limit
        self.enabled = False
        #: every open connection past authentication, by the client it first named
        self._clients: Counter[Client] = Counter()
        #: open connections here, by the metric tags the limits resolve them to (enabled only)
        self.here: Counter[MetricTags] = Counter()
        self._escrows: dict[MetricTags, _Escrow] = {}
        #: principals left lately -> the publications that still say so (one may be lost)
        self._leaving: dict[MetricTags, int] = {}
        #: a fleet's line share (None outside a fleet), whether this member holds each limit
        #: alone (its bus is down), its name and the others heard lately
        self.line_share: float | None = None
        self.alone = False
        self.member = ""
        self.others: frozenset[str] = frozenset()
        #: the members none of whose publications this one has read since it missed records
        #: of the bus: until it has, its claims may be behind theirs (resync)
        self._unheard: set[str] = set()
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
        self._escrows = {t: e for t, e in self._escrows.items() if self.limit(t) is not None}

    def tags(self, user: str, client_id: str) -> MetricTags:
        return self._quotas.metric_tags(user, client_id)

    def limit(self, tags: MetricTags) -> float | None:
        return self._quotas.limit(tags)

    def entity_for(self, tags: MetricTags) -> QuotaEntity | None:
        return self._quotas.entity_for(tags)

    def members(self) -> int:
        return 1 + len(self.others)

    def floor(self, limit: float) -> int:
        """What each member holds of a limit without a word."""
        return int((self.line_share or 0.0) * limit / self.members())

    def room(self, tags: MetricTags, limit: float) -> bool:
        """Whether one more connection of these tags stays within what this member may hold;
        past half its floor it asks for a claim from the next interval on."""
        here = self.here[tags] + 1
        if self.line_share is None or self.alone:
            return here <= limit
        floor = self.floor(limit)
        escrow = self._escrows.get(tags)
        if here * 2 > floor:
            if escrow is None:
                escrow = self._escrows[tags] = _Escrow()
            if not escrow.asking:
                escrow.asking, escrow.cool = True, 0
                self._leaving.pop(tags, None)
        if escrow is None:
            if here <= floor:
                return True
        elif here <= min(
            escrow.cap(self.member, floor),
            # what the others' asks leave: a member that joins while they hold the limit,
            # or a limit lowered by a reload, holds no more than that
            int(limit) - self._others(escrow, self.member, floor),
        ):
            return True
        if escrow is not None:
            escrow.wanting += 1
        return False

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
        alone where no other member reports the principal)."""
        escrow = self._escrows.get(tags)
        reported = 0 if escrow is None else sum(int(c) for c in escrow.counts.values())
        return self.here[tags] + reported

    def _others(self, escrow: _Escrow, member: str, floor: int) -> int:
        """What every member but `member` may hold: its latest ask (its count, for a member
        of a release before the asks; its floor where it asks none)."""
        total = sum(escrow.claim(other, floor) for other in self.others if other != member)
        if member != self.member:
            total += escrow.claim(self.member, floor)
        return total

    def place(
        self, line_share: float | None, member: str, others: Collection[str], alone: bool
    ) -> None:
        """The fleet as its member knows it now; the claims and counts of members gone are
        dropped."""
        self.line_share, self.member, self.alone = line_share, member, alone
        if others == self.others:
            return
        self.others = frozenset(others)
        self._unheard &= self.others
        for tags, escrow in list(self._escrows.items()):
            for table in (escrow.claims, escrow.counts):
                for gone in [m for m in table if m != member and m not in others]:
                    del table[gone]
            self._forget_if_idle(tags, escrow)

    def publish(self, sequence: int, cool_after: int, repeat: int) -> Iterator[Report]:
        """This member's count and ask for each principal it asks for, and COLD for each it
        left in the last `repeat` publications (so that one lost does not leave the others
        holding it to its last ask)."""
        if self.line_share is None or self.alone:
            return
        leaving = self._leaving
        for tags, escrow in list(self._escrows.items()):
            if not escrow.asking:
                continue
            limit = self.limit(tags)
            here = self.here[tags]
            if limit is None:
                del self._escrows[tags]
                leaving[tags] = repeat
                continue
            floor = self.floor(limit)
            escrow.cool = 0 if self._busy(escrow, here, floor) else escrow.cool + 1
            cool = escrow.cool >= cool_after
            if cool and escrow.claims.get(self.member, floor) >= floor and not escrow.pending:
                # back to its floor: it holds that without a word again
                escrow.asking = False
                escrow.pending[sequence] = floor
                leaving[tags] = repeat
                continue
            ask = here + self._headroom(escrow, limit, floor, here)
            if cool:
                ask = max(ask, floor)
            escrow.pending[sequence] = ask
            wanting, escrow.wanting = escrow.wanting, 0
            yield Report(tags, here + WANTING if wanting else float(here), float(ask))
        for tags, left in list(leaving.items()):
            yield Report(tags, COLD, COLD)
            if left > 1:
                leaving[tags] = left - 1
            else:
                del leaving[tags]

    def _busy(self, escrow: _Escrow, here: int, floor: int) -> bool:
        """Whether a principal is kept in escrow: this member's count past half its floor,
        the fleet's past half the line, or a member that refused one."""
        counts = escrow.counts.values()
        counted = here + sum(int(count) for count in counts)
        return (
            here * 2 > floor
            or escrow.wanting > 0
            or counted * 2 > floor * self.members()
            or any(count % 1 for count in counts)
        )

    def _headroom(self, escrow: _Escrow, limit: float, floor: int, here: int) -> int:
        """What a member asks past its count: where it refused connections, the room the
        claims leave split among the members that refused some; else a small reserve, so
        that one wanting takes the room in few intervals."""
        free = int(limit) - self._others(escrow, self.member, floor) - here
        if free <= 0:
            return 0
        if escrow.wanting:
            contenders = 1 + sum(1 for count in escrow.counts.values() if count % 1)
            return -(-free // contenders)
        return free // self.members()

    def receive(self, member: str, tags: MetricTags, count: float) -> None:
        """Another member's count of a principal (COLD: it left the principal)."""
        escrow = self._escrows.get(tags)
        if count < 0:
            if escrow is not None:
                escrow.counts.pop(member, None)
                self._forget_if_idle(tags, escrow)
            return
        if escrow is None:
            if self.limit(tags) is None:
                return
            escrow = self._escrows[tags] = _Escrow()
        escrow.counts[member] = count

    def receive_claim(self, member: str, sequence: int, tags: MetricTags, ask: float) -> None:
        """A member's ask, in the bus's order: another's is taken whole, this member's own
        granted up to the limit less every other member's latest ask, and never below the
        claim it had."""
        escrow = self._escrows.get(tags)
        if member == self.member and escrow is not None:
            escrow.pending = {s: a for s, a in escrow.pending.items() if s > sequence}
        limit = self.limit(tags)
        if ask < 0 or limit is None:
            if escrow is not None:
                escrow.claims.pop(member, None)
                self._forget_if_idle(tags, escrow)
            return
        if escrow is None:
            escrow = self._escrows[tags] = _Escrow()
        floor = self.floor(limit)
        if (
            member != self.member
            and not escrow.asking
            and self._busy(escrow, self.here[tags], floor)
        ):
            # asking too, it gives back what of its floor it does not use
            escrow.asking, escrow.cool = True, 0
            self._leaving.pop(tags, None)
        asked = int(ask)
        if member == self.member:
            had = escrow.claims.get(member, floor)
            if self._unheard:
                asked = min(asked, had)  # maybe behind the others: nothing more for now
            elif asked > had:
                asked = max(had, min(asked, int(limit) - self._others(escrow, member, floor)))
        # another member's ask is taken whole: what it may come to hold at most
        escrow.claims[member] = asked

    def resync(self) -> None:
        """This member missed records of the bus (it started, its bus was opened again at
        the end of the topic, or a record could not be read): asks it missed may have been
        granted. Until it has read a publication of every other member, it grants itself
        nothing more and takes the others' asks whole, so that it holds itself to no more,
        and each of them to no less, than the others do."""
        self._unheard = set(self.others)
        member = self.member
        for tags, escrow in self._escrows.items():
            limit = self.limit(tags)
            if escrow.pending and limit is not None:
                # an ask of its own that it missed may have given some back
                escrow.claims[member] = escrow.cap(member, self.floor(limit))

    def heard(self, member: str, asked: Collection[MetricTags]) -> None:
        """A whole publication of another member was read, which asked for (or left) the
        principals `asked`: of any other it holds no more than its floor, and is taken to
        hold that much at least (a COLD of it this member missed ended a claim below it)."""
        self._unheard.discard(member)
        for tags, escrow in self._escrows.items():
            claim = escrow.claims.get(member)
            if claim is not None and tags not in asked:
                limit = self.limit(tags)
                if limit is not None:
                    escrow.claims[member] = max(claim, self.floor(limit))

    def _forget_if_idle(self, tags: MetricTags, escrow: _Escrow) -> None:
        if not (escrow.asking or escrow.claims or escrow.counts or escrow.pending):
            del self._escrows[tags]

    def watched(self) -> int:
        return len(self._escrows)
