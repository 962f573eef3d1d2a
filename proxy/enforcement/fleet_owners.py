"""Owners (issue 51): a fleet in which a member reads the use of the principals it owns and
every owner's totals, not every member's publication.

Every member reading every member's record costs each member bytes that grow with the
members: each other member's header every interval, and each one's corrections for a
principal spread over them. Instead each sensor (its metric tags) falls, by mmh3, in one of
the bus's partitions, and each partition has one owner among the members. A member sends
what it would publish of a sensor (protocol/fleet_records.py's uses and standings) to the
partition's owner only, as a contribution; the owner adds up the contributions it read and
publishes the totals FOLDS times an interval, on the partition every member reads. A member
subtracts its own contributions from the totals and records the rest as the others' use, as
it would have recorded each other member's. Its read bytes are then its partitions'
contributions and the totals: about twice what the principals near their limit say,
whatever the members.

A member sends a partition at most one contribution an interval, and keeps at most
MOST_FOLDED unfolded (what it would send next waits and adds up meanwhile); the owner's
totals say how many of each member's they add (two bits a member), and contributions of one
member reach its owner in order, so a member knows which of its own the totals hold without
the totals naming any sequence. The totals of a standing are its sum over the members (each
member's last standing, as the owner read it); a member subtracts its own, as the owner
holds it. An owner that adds nothing in an
interval publishes nothing: a principal whose use stands still costs nothing.

Sans-IO: which member owns which partition is the caller's (Kafka's group assignment on the
bus; a fixed list in the simulations).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Collection, Mapping, Sequence
from typing import Final

import mmh3

from protocol.fleet_records import (
    MOST_FOLDED,
    READS_NEWEST,
    RESTATE_ASKED,
    SPECIAL,
    TOTALS,
    VERSION,
    Publication,
    Totals,
    Use,
)
from proxy.enforcement.fleet import ANTICIPATED_FOR, FleetMember, remember_producer_ids
from quotas.engine import QuotaEngine
from quotas.managers import SETTLED

#: a sensor's place in a record: its quota type, user tag and client-id tag
Key = tuple[int, str, str]
#: how many times a sync interval an owner publishes its totals: a member's use reaches the
#: others up to an interval / FOLDS later than it would straight (the owner's hop), which a
#: lumpy use split unevenly over the members feels most
FOLDS: Final = 2
#: the first use of what a member of owners publishes to every member: it reads totals
#: (READS_NEWEST names the record version a writer reads; TOTALS is none a straight member
#: reads)
OWNERS_MARK: Final = (READS_NEWEST, "", "", float(TOTALS))
#: how many times GONE_AFTER intervals a contribution may wait for its owner's totals
SILENT_AFTER: Final = 2
#: the least time the cluster may take to answer a member before it counts as cut off: the
#: question waits behind the consumer's fetch on the broker's connection (a long poll of up
#: to 500 ms), whatever the sync interval
ANSWER_WITHIN_MS: Final = 2000
#: the partitions of an owners' bus (members own a share each; more members than partitions
#: leave some owning none)
PARTITIONS: Final = 16


def partition_of(user: str, client_id: str, partitions: int) -> int:
    """Every quota type of a principal's tags falls in one partition: the owner of a
    principal's request time also holds its bytes."""
    return int(mmh3.hash(f"{user}\x00{client_id}", signed=False)) % partitions


def through_owners(publication: Publication) -> bool:
    """Whether a publication's writer shares its use through owners: a member that shares
    it straight cannot read what it does, nor it a straight member's (docs/fleet.md#owners)."""
    uses = publication.uses
    return bool(uses) and uses[0] == OWNERS_MARK


def owners(held: Mapping[str, Sequence[int]], partitions: int) -> dict[str, list[int]]:
    """Which member owns which partition, given what each held before (the group leader's
    assignment): as even as the members allow, and each member keeps what it held up to its
    share, since a partition that moves costs its standings named again to the new owner."""
    names = sorted(held, key=lambda name: (-len(held[name]), name))
    base, extra = divmod(partitions, len(names))
    room = {name: base + (place < extra) for place, name in enumerate(names)}
    owned: dict[str, list[int]] = {name: [] for name in sorted(held)}
    taken: set[int] = set()
    for name in sorted(held):
        for partition in sorted(set(held[name])):
            fits = len(owned[name]) < room[name] and 0 <= partition < partitions
            if fits and partition not in taken:
                taken.add(partition)
                owned[name].append(partition)
    free = (partition for partition in range(partitions) if partition not in taken)
    for name in sorted(held):
        while len(owned[name]) < room[name]:
            owned[name].append(next(free))
    return owned


class Fold:
    """An owner's partition: the contributions it read since its previous totals, in one
    generation of the group."""

    def __init__(self, owner: str, partition: int, generation: int) -> None:
        self.owner = owner
        self.partition = partition
        self.generation = generation
        self._round = 0
        self._folded: dict[int, int] = {}
        self._uses: dict[Key, float] = {}
        #: per sensor, each member's last standing (by its place in the group)
        self._standings: dict[Key, dict[int, float]] = {}
        self._changed: set[Key] = set()
        #: per member, the sequence of its last contribution folded: one read again is a
        #: send its member was told failed that the bus wrote after all, sent again
        self._sequences: dict[int, int] = {}
        #: whether the next totals name every standing: the first do, even if empty, for the
        #: readers to drop what a previous owner named; and the round of the last that did
        self.restate = True
        self._restated: int | None = None

    def add(self, member: int, contribution: Publication) -> None:
        if contribution.sequence <= self._sequences.get(member, -1):
            return
        self._sequences[member] = contribution.sequence
        self._folded[member] = self._folded.get(member, 0) + 1
        uses = self._uses
        for quota_type, user, client_id, value in contribution.uses:
            key = quota_type, user, client_id
            uses[key] = uses.get(key, 0.0) + value
        for quota_type, user, client_id, value in contribution.standings or ():
            key = quota_type, user, client_id
            by_member = self._standings.get(key)
            if by_member is None:
                if not value:
                    continue
                by_member = self._standings[key] = {}
            if value:
                by_member[member] = value
            else:
                by_member.pop(member, None)
            self._changed.add(key)

    def lost(self, totals: Totals) -> None:
        """Totals the bus did not take: what they added goes out with the next (which name
        every standing again if these did)."""
        if totals.round == self._restated:
            self.restate = True
        for member, count in totals.folded.items():
            self._folded[member] = self._folded.get(member, 0) + count
        uses = self._uses
        for quota_type, user, client_id, value in totals.uses:
            key = quota_type, user, client_id
            uses[key] = uses.get(key, 0.0) + value
        self._changed.update(
            (quota_type, user, client_id) for quota_type, user, client_id, _ in totals.standings
        )

    def totals(self) -> Totals | None:
        """What was added since the previous totals; None when nothing was."""
        if not (self._folded or self._changed or self.restate):
            return None
        standings = self._standings
        named = list(standings) if self.restate else self._changed
        totals = Totals(
            self.owner,
            self.partition,
            self.generation,
            self._round,
            dict(self._folded),
            [(*key, value) for key, value in self._uses.items()],
            [(*key, sum(standings.get(key, {}).values())) for key in named],
        )
        for key in named:
            if not standings.get(key, True):
                del standings[key]
        if self.restate:
            self._restated = self._round
        self._round += 1
        self._folded.clear()
        self._uses.clear()
        self._changed = set()
        self.restate = False
        return totals


class Routes:
    """A member's side: its publications split by partition, and the others' use in the
    totals of its owners."""

    def __init__(self, member: int, partitions: int, generation: int = 0) -> None:
        #: this member's place in the group (its bits in the totals) and the group's
        #: generation it holds in
        self.member = member
        self.generation = generation
        self.partitions = partitions
        self._partition: dict[tuple[str, str], int] = {}
        #: per partition: the contributions sent and not yet folded, oldest first, and what
        #: waits for them
        self._in_flight: dict[int, deque[tuple[int, Publication]]] = {}
        #: how long the last contribution folded took to come back in its totals
        self.delay_ms: int | None = None
        self._waiting: dict[int, Publication] = {}
        #: per partition, the last contribution sent, which the caller was told the bus did
        #: not take: sent again as it is (the bus may have written it after all)
        self._resend: dict[int, Publication] = {}
        #: this member's standings as the owners hold them, and as it named them since
        self._standings: dict[Key, float] = {}
        self._named: dict[Key, float] = {}

    def route(
        self, publication: Publication, now_ms: int, sending: Collection[int] = ()
    ) -> tuple[Publication | None, dict[int, Publication]]:
        """What every member reads of a publication (what is not a use of a sensor, and
        producer ids; None when nothing is), and the contributions to send now, by
        partition. A partition whose last contribution is still `sending` takes none: its
        contributions go one at a time, each written or failed before the next (lost)."""
        rest: list[Use] = []
        by_partition: dict[int, tuple[list[Use], list[Use]]] = {}
        named = self._named
        if publication.standings is None:
            # a publication of whole use (its bus down, an older member heard): every
            # standing named ends with it, as a reader of such a record ends them
            standings: list[Use] = [(*key, 0.0) for key in named]
            named.clear()
        else:
            standings = publication.standings
            for quota_type, user, client_id, value in standings:
                if value:
                    named[quota_type, user, client_id] = value
                else:
                    named.pop((quota_type, user, client_id), None)
        for entries, place in ((publication.uses, 0), (standings, 1)):
            for use in entries:
                if use[0] in SPECIAL:
                    rest.append(use)
                    continue
                partition = self.partition(use[1], use[2])
                parts = by_partition.get(partition)
                if parts is None:
                    parts = by_partition[partition] = ([], [])
                parts[place].append(use)
        for partition, (uses, standings) in by_partition.items():
            contribution = publication._replace(uses=uses, standings=standings, producer_ids={})
            waiting = self._waiting.get(partition)
            self._waiting[partition] = (
                contribution if waiting is None else merged(waiting, contribution)
            )
        sends = {p: c for p, c in self._resend.items() if p not in sending}
        for partition in sends:
            del self._resend[partition]
        for partition in list(self._waiting):
            if partition in sends or partition in sending:
                continue
            in_flight = self._in_flight.get(partition)
            if in_flight is None:
                in_flight = self._in_flight[partition] = deque()
            if len(in_flight) < MOST_FOLDED:
                sends[partition] = self._waiting.pop(partition)
                in_flight.append((now_ms, sends[partition]))
        if rest or publication.producer_ids:
            return publication._replace(uses=rest, standings=[]), sends
        return None, sends

    def lost(self, partition: int) -> None:
        """The caller was told the last contribution sent to a partition failed: it is sent
        again as it is, before anything newer, and keeps its place among those unfolded;
        its owner folds it once, whether the bus wrote it or not (the caller sends a
        partition's contributions one at a time, each written or failed before the next)."""
        in_flight = self._in_flight.get(partition)
        if in_flight:
            self._resend[partition] = in_flight[-1][1]

    def rebalance(self, member: int, generation: int, held: Collection[int] = ()) -> None:
        """A new generation of the group: a new place in it, new owners that know none of
        this member's standings (it names them again), and every contribution not yet
        folded sent again to them. An old owner may have folded one too, in totals still
        on their way: that use then counts twice, on the safe side. The contributions of
        the partitions `held` at this member's share are dropped: their use was held by the
        shares, and would only throttle everyone at once if the others heard it now (as a
        straight member drops what its bus lost for long: FleetMember.lost)."""
        self.member, self.generation = member, generation
        self._standings.clear()
        self._named.clear()
        self._resend.clear()
        for partition in held:
            self._in_flight.pop(partition, None)
            self._waiting.pop(partition, None)
        for partition, in_flight in self._in_flight.items():
            for _, contribution in reversed(in_flight):
                waiting = self._waiting.get(partition)
                self._waiting[partition] = (
                    contribution if waiting is None else merged(contribution, waiting)
                )
            in_flight.clear()

    def silent(self, since_ms: int) -> frozenset[int]:
        """The partitions whose oldest contribution unfolded was sent before `since_ms`."""
        return frozenset(
            partition
            for partition, in_flight in self._in_flight.items()
            if in_flight and in_flight[0][0] < since_ms
        )

    def oldest_unfolded_ms(self) -> int | None:
        """When the oldest contribution still unfolded was sent: an owner that folds none
        for long is lost."""
        return min(
            (in_flight[0][0] for in_flight in self._in_flight.values() if in_flight), default=None
        )

    def others(self, totals: Totals, now_ms: int) -> tuple[list[Use], list[Use]]:
        """The others' use and standings in an owner's totals: the totals less this
        member's contribution, if they folded it, and less its standings. Totals of
        another generation are read whole, on the safe side (this member's own use in them,
        if any, counts twice); an older generation's standings not at all (its owner's
        successor names them), a newer one's as the others' (its owner holds none of this
        member's before it sends them in the generation)."""
        if totals.generation != self.generation:
            return totals.uses, (totals.standings if totals.generation > self.generation else [])
        mine: dict[Key, float] = {}
        in_flight = self._in_flight.get(totals.partition)
        for _ in range(totals.folded.get(self.member, 0)):
            if in_flight:
                sent_ms, contribution = in_flight.popleft()
                self.delay_ms = now_ms - sent_ms
                for quota_type, user, client_id, value in contribution.uses:
                    key = quota_type, user, client_id
                    mine[key] = mine.get(key, 0.0) + value
                own = self._standings
                for quota_type, user, client_id, value in contribution.standings or ():
                    if value:
                        own[quota_type, user, client_id] = value
                    else:
                        own.pop((quota_type, user, client_id), None)
        uses = []
        for quota_type, user, client_id, value in totals.uses:
            value -= mine.get((quota_type, user, client_id), 0.0)
            if value > SETTLED or value < -SETTLED:
                uses.append((quota_type, user, client_id, value))
        standings = [
            (
                quota_type,
                user,
                client_id,
                value - self._standings.get((quota_type, user, client_id), 0.0),
            )
            for quota_type, user, client_id, value in totals.standings
        ]
        return uses, standings

    def partition(self, user: str, client_id: str) -> int:
        """The partition a sensor's tags fall in."""
        partition = self._partition.get((user, client_id))
        if partition is None:
            partition = self._partition[user, client_id] = partition_of(
                user, client_id, self.partitions
            )
        return partition


def merged(earlier: Publication, later: Publication) -> Publication:
    """Two contributions as one: uses added, a later standing replacing an earlier one."""
    values: dict[Key, float] = {}
    for quota_type, user, client_id, value in (*earlier.uses, *later.uses):
        key = quota_type, user, client_id
        values[key] = values.get(key, 0.0) + value
    standings: dict[Key, float] = {}
    for quota_type, user, client_id, value in (
        *(earlier.standings or ()),
        *(later.standings or ()),
    ):
        standings[quota_type, user, client_id] = value
    return later._replace(
        uses=[(*key, value) for key, value in values.items()],
        standings=[(*key, value) for key, value in standings.items()],
    )


class Owning:
    """One member of a fleet of owners: its FleetMember's publications routed to the owners,
    the partitions it owns folded, and the owners' totals recorded as the others' use.

    Membership is the group's, not what the bus shows (a member that says nothing publishes
    nothing): the caller assigns it every interval while the group holds.

    An owner lost. A partition whose owner has folded none of this member's contributions
    for silent_after_ms is held: its sensors are judged here as if each other member used
    as much as this one (FleetMember.holding), which is this member's share of their
    budgets, until the owner folds again or the group's next generation gives the
    partition another owner. Only the principals of that partition are held; the others go
    on sharing the whole budget. Held by weight rather than by a lower limit, the fleet's
    use the sensors hold from before the loss ages out as this member's own takes its
    place, instead of throttling the principal for twice its windows (Kafka's arithmetic
    for use far over a limit). That is for an owner lost. A member cut off from the
    cluster hears no owner either, and the others' next generation drops its standings,
    whether it has use in flight or not: it counts its bus down, and holds its share of
    every budget, as with the bus lost, once the cluster has not answered it for
    silent_after_ms (`reached`: the caller asks it every interval; ANSWER_WITHIN_MS at the
    least), or when a partition it owns itself is held (it cannot read its own totals
    back)."""

    def __init__(self, fleet: FleetMember, member: int, partitions: int = PARTITIONS) -> None:
        self.fleet = fleet
        self.routes = Routes(member, partitions)
        self.folds: dict[int, Fold] = {}
        #: per partition, the newest generation whose totals this member read
        self._newest: dict[int, int] = {}
        #: contributions sent in a generation this member has not reached yet, by it
        self._early: dict[int, list[tuple[int, int, Publication]]] = {}
        #: the partitions whose owner's totals are late, and those whose owner is silent,
        #: held at this member's share
        self.late: frozenset[int] = frozenset()
        self.held: frozenset[int] = frozenset()
        #: when the cluster last answered this member; None: the caller does not ask it
        #: (a simulation, where it always answers)
        self._reached_ms: int | None = None

    def assign(
        self, group: Sequence[str], owned: Sequence[int], generation: int, now_ms: int
    ) -> None:
        """The group's members in their order (a member's place is its bits in the
        totals), the partitions this member owns, and the group's generation."""
        fleet = self.fleet
        held = self.routes.silent(now_ms - self.silent_after_ms)
        rebalanced = generation != self.routes.generation
        if rebalanced:
            self.routes.rebalance(group.index(fleet.member), generation, held)
            held = frozenset()
            self.folds = {}
            fleet.gaps.restate = True  # the new owners learn every standing
        # late once the others' report of an interval would have come straight (the
        # anticipation's withdrawal waits for it: FleetMember.publish)
        late = self.routes.silent(
            now_ms - ANTICIPATED_FOR * fleet.sync_interval_ms - fleet.delay_ms
        )
        self.folds = {
            partition: self.folds.get(partition) or Fold(fleet.member, partition, generation)
            for partition in owned
        }
        if rebalanced:
            early = sorted(self._early.pop(generation, ()), key=lambda each: each[2].sequence)
            for member, partition, contribution in early:  # in each member's order
                self.contribution(member, partition, generation, contribution)
            self._early = {g: early for g, early in self._early.items() if g > generation}
        membership = fleet.membership
        for name in group:
            if name != fleet.member:
                membership.heard(name, now_ms, VERSION)
        self.late, self.held = late | held, held
        fleet.awaiting = self._awaiting if self.late else None
        fleet.holding = self._holding if held else None
        if self.cut_off(now_ms):
            membership.fell()
        else:
            membership.heard_self(now_ms)

    def reached(self, now_ms: int) -> None:
        """The cluster answered this member: it is not cut off."""
        self._reached_ms = now_ms

    def cut_off(self, now_ms: int) -> bool:
        """Whether this member is cut off from the cluster, not only from an owner: the
        cluster has not answered it for silent_after_ms (ANSWER_WITHIN_MS at the least), or
        a partition it owns is held."""
        reached = self._reached_ms
        within = max(self.silent_after_ms, ANSWER_WITHIN_MS)
        unanswered = reached is not None and now_ms - reached > within
        return unanswered or bool(self.held & self.folds.keys())

    def _awaiting(self, user: str, client_id: str) -> bool:
        return self.routes.partition(user, client_id) in self.late

    def _holding(self, user: str, client_id: str) -> bool:
        return self.routes.partition(user, client_id) in self.held

    @property
    def silent_after_ms(self) -> int:
        """How long a contribution may wait for its owner's totals: twice what a member's
        own publication may take to come back straight, for the owner's hop (its read, its
        wait for the next totals, their write); on a loaded machine one took over a second."""
        return SILENT_AFTER * self.fleet.membership.gone_after_ms

    def publish(
        self, engine: QuotaEngine, now_ms: int, wall_ms: int
    ) -> tuple[Publication | None, dict[int, Publication]]:
        """What every member reads of this member's publication (None: nothing), and its
        contributions by partition."""
        return self.route(self.fleet.publish(engine, now_ms, wall_ms), now_ms)

    def route(
        self,
        publication: Publication,
        now_ms: int,
        always: bool = False,
        sending: Collection[int] = (),
    ) -> tuple[Publication | None, dict[int, Publication]]:
        """A publication made (and added to: fleet_counts.py), split as publish does; what
        every member reads carries OWNERS_MARK first. `always`: every member reads one
        from this member every interval, if only the mark (the connection guard's escrow
        waits, after a gap, until it has read one of every member: fleet_counts.py).
        `sending`: as Routes.route."""
        broadcast, sends = self.routes.route(publication, now_ms, sending)
        if broadcast is None and always:
            broadcast = publication._replace(uses=[], standings=[], producer_ids={})
        if broadcast is not None:
            rest = [use for use in broadcast.uses if use[0] != READS_NEWEST]
            broadcast = broadcast._replace(uses=[OWNERS_MARK, *rest])
        return broadcast, sends

    def totals(self) -> list[Totals]:
        """The totals of the partitions this member owns that folded anything."""
        totals = [fold.totals() for fold in self.folds.values()]
        return [each for each in totals if each is not None]

    def contribution(
        self, member: int, partition: int, generation: int, contribution: Publication
    ) -> None:
        """A contribution read from a partition, sent in a generation of the group: folded
        if this member owns the partition in it; one of an older generation went to another
        owner, and is sent again to this one; one of a newer, kept until this member
        reaches it."""
        if generation > self.routes.generation:
            self._early.setdefault(generation, []).append((member, partition, contribution))
            return
        fold = self.folds.get(partition)
        if fold is not None and fold.generation == generation:
            fold.add(member, contribution)

    def receive(self, publication: Publication, engine: QuotaEngine, now_ms: int) -> list[Use]:
        """What every member reads of a member's publication (its own too): another's
        producer ids remembered, an ask for every standing heeded by the partitions this
        member owns, and what is not a use returned (fleet_counts.py). Who is in the fleet
        is the group's to say, not this: a member reads its own back for nothing else."""
        uses = publication.uses
        if publication.member != self.fleet.member:
            if any(use[0] == RESTATE_ASKED for use in uses):
                for fold in self.folds.values():
                    fold.restate = True
            remember_producer_ids(publication, engine, now_ms)
        return [use for use in uses if use[0] in SPECIAL and use[0] != RESTATE_ASKED]

    def read_totals(self, totals: Totals, engine: QuotaEngine, now_ms: int) -> None:
        routes = self.routes
        uses, standings = routes.others(totals, now_ms)
        if routes.delay_ms is not None:
            # the others' use comes back as late as this member's own
            self.fleet.delay_ms = routes.delay_ms
        partition = totals.partition
        name = f"partition {partition}"
        newest = self._newest.get(partition, -1)
        if totals.generation > newest:
            # the first totals read of an owner of a new generation name every standing it
            # holds (its first do, and the next if those were lost): the previous owner's end
            self._newest[partition] = totals.generation
            self.fleet.forget_standings(name)
        elif totals.generation < newest:
            standings = []  # a previous owner's, late: its successor names them
        self.fleet.record_others(name, uses, standings, engine, now_ms)
