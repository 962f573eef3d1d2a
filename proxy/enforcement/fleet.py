"""One member of a fleet: proxy processes and hosts that hold one budget per quota entity.

Every sync interval a member publishes what the sensors it watches (those near their limit:
see the lines below) charged since its previous publication, keyed by metric tags, and
records every other member's publication into the same sensors
(QuotaManager.record_remote): a principal's rate is then the fleet's rate wherever its
connections land, and each member throttles it on that rate. KIP-936's producer ids a member
admits are published too, so a producer that reconnects through another member is not
charged again. Sans-IO: the bus that carries publications is the caller's
(proxy/control/fleet_bus.py over a topic of the cluster; a simulated one in
tests/support/fleet_simulation.py).

Time base: remote use is recorded on the receiving member's own clock, when it arrives, into
the sample current then. Monotonic clocks of two hosts do not compare.

Anticipation. The others' use reaches a member up to a sync interval plus the bus's delay
late, and a greedy principal fills in that lag whatever room its window has: when a window
full of use ages out, every member sees the same room at once and each would fill it. So a
member charges each unit of use weighted by what it expects meanwhile on the others: 1 + the
ratio of their recent use to its own (at most the other members' count; that count for a
sensor with no use here yet). When their publications arrive, the use they report replaces
what was anticipated for them, and what they did not report is withdrawn after
ANTICIPATED_FOR intervals. A principal spread evenly is then held as one process holds it;
one that uses a single member is weighted 1 there once a publication has shown it. The bound
this leaves is stated and tested in tests/unit/proxy/enforcement/test_fleet.py (docs/fleet.md).
A sensor whose others' report is late (fleet_owners.py: its owner's totals) withdraws nothing
until the report comes; one held (its owner silent) is weighted by the members and keeps what
it anticipated: this member's share of it.

What is published follows the principals near their limit, not every principal (issue 51).
Demarcation lines (Barbara and Garcia-Molina's protocol, or escrow): a sensor no member
watches is judged on each member as if its use were spread evenly (weighted by the members),
against a line of LINE_SHARE of its limit. While every member stays under its line, the
fleet's use stays under LINE_SHARE of the limit: nobody needs to hear of it, and it costs
the bus nothing. The first use past the line (checked where the use is recorded:
QuotaManager.line_share) makes the member watch the sensor: it publishes its use every
interval, and every member that reads a use that matters watches it too, so the fleet's use
is known everywhere as before. A sensor is left again once the fleet's use, as this member
sees it, has stayed under half the line for COOL_AFTER_MS. A topic's sensors are watched
from their first use, since `top` reads topics from the bus; a sensor whose limit no entity
sets is never watched.

Standings (dead reckoning). A watched sensor whose use here holds steady (charged every
interval, within half the tolerance of its pace, for STEADY_MS) is named as a standing: the
use per interval every other member adds for this one at the end of each of its own
intervals. This member then publishes what its use drifted from the standings once that
passes the tolerance (DRIFT_SHARE of the quota over the windows), names the standing anew
once its pace would drift past the tolerance within RESTATE_MS, and names every standing
again when a reader asks (RESTATE_ASKED). A reader asks when a member's sequence skips one
(a record it did not read: its bus was reopened at the end of the topic, or a record was
unreadable) and when it hears a member it had not heard lately (it joined, or was taken for
gone and missed what it said meanwhile). A steady principal near its limit then costs the
bus nothing once its standing is named. While a member of record version 2 is heard, which
asks for nothing, every standing is named again every RESTATE_MS instead. A reader adds a
standing from the interval after the one that follows its publication, which reported the
interval the previous standing covered: the others' use lands no later than when it was
published every interval, and the bound holds as before. Use that stops and starts (a client
throttled, a consumer's large fetches) is not steady, and is published every interval. A
member that hears one of version 1 (which reads no standings) publishes every use whole
while it does (protocol/fleet_records.py).

Membership is what the bus shows (fleet_membership.py).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator, Sequence
from typing import Final

from protocol.fleet_records import (
    READS_NEWEST,
    RESTATE_ASKED,
    RESTATING,
    STANDINGLESS,
    VERSION,
    Publication,
    Use,
)
from proxy.enforcement.fleet_gaps import Gaps
from proxy.enforcement.fleet_membership import Membership
from proxy.enforcement.fleet_outbox import Outbox
from quotas.engine import QuotaEngine
from quotas.entities import MetricTags
from quotas.managers import (
    SETTLED,
    UNLIMITED,
    ClientSensors,
    QuotaManager,
    TokenBucketQuotaManager,
)
from quotas.topics import TopicQuotaManager

#: the share of a sensor's limit the fleet may use unheard: a member's use weighted by the
#: members, as if spread evenly (a half: a principal takes some time to be heard, and the
#: others' use meanwhile is at most the rest of their lines)
LINE_SHARE: Final = 0.5
#: a watched sensor under half its line this long is left (8 intervals of the default 250 ms)
COOL_AFTER_MS: Final = 2000
#: intervals after which use anticipated on the others and not reported by them is withdrawn
ANTICIPATED_FOR: Final = 2
#: how much of its recent use, here and elsewhere, a sensor's weight remembers per interval
DECAY: Final = 0.9
#: how far a member's use may drift from its standing unpublished, as a share of the quota
#: over the windows (with 11 x 1 s windows, 0.11 s of the quota)
DRIFT_SHARE: Final = 0.01
#: use is steady once it has been so long within STEADY of its pace
STEADY_MS: Final = 2000
#: a standing is named anew once its pace would drift past the tolerance within this long;
#: and named again this often though unchanged while a member of record version 2 is heard
#: (it asks for none)
RESTATE_MS: Final = 10_000
#: the weight of an interval's use in the pace a standing is taken from
PACE: Final = 0.1
#: use is steady while every interval's is within this share of the tolerance of the pace
STEADY: Final = 0.5


class _Share:
    """One sensor's part in the fleet, as this member sees it."""

    __slots__ = (
        "anticipated",
        "cool",
        "drift",
        "elsewhere",
        "fresh",
        "here",
        "pace",
        "pending",
        "sensors",
        "since",
        "standing",
        "standings",
        "standings_total",
        "steady",
        "unpublished",
        "whole",
    )

    def __init__(self, sensors: ClientSensors) -> None:
        self.sensors = sensors
        #: use charged here up to the previous publication and reported by the others up to
        #: now, decayed every interval: the others' reports of an interval arrive after it,
        #: so this interval's own use (fresh) joins `here` only once it is over
        self.here = 0.0
        self.fresh = 0.0
        self.elsewhere = 0.0
        #: charged here and not yet published (a publication the bus lost adds up)
        self.unpublished = 0.0
        #: intervals in a row under half its line
        self.cool = 0
        #: [settled at ms, use the weight added for the others], oldest first
        self.anticipated: deque[list[float]] = deque()
        #: this member's standing (use per interval the others add for it), what its use
        #: differed from it since it was named, the intervals since, and the recent use per
        #: interval the next standing is taken from (None before the first interval)
        self.standing = 0.0
        self.drift = 0.0
        self.since = 0
        self.pace: float | None = None
        self.steady = 0
        #: whether an interval of its own, after the one it was watched in, has passed
        self.whole = False
        #: the other members' standings and their total, added every interval; and what a
        #: standing named anew since the last interval leaves of the one before it: the
        #: publication that named it reported the interval the one before covered
        self.standings: dict[str, float] | None = None
        self.standings_total = 0.0
        self.pending = 0.0

    def replace_anticipated(self, reported: float) -> float:
        """The part of use reported by another member that was already charged as
        anticipated: the rest is recorded."""
        matched = 0.0
        anticipated = self.anticipated
        while anticipated and matched < reported:
            entry = anticipated[0]
            take = min(entry[1], reported - matched)
            matched += take
            entry[1] -= take
            if entry[1] <= SETTLED:
                anticipated.popleft()
        return matched

    def reckon(
        self,
        local: float,
        tolerance: float,
        steady_after: int,
        horizon: int,
        restate_after: int | None,
    ) -> tuple[float, float | None]:
        """What to publish of an interval's use here: what it drifted from the standings
        (0 while that is within the tolerance), and a standing named anew (None: the same):
        once its pace would drift past the tolerance within `horizon` intervals, and every
        `restate_after` intervals (0: now; None: never unasked)."""
        if not self.whole:
            # the first interval's use holds what the sensor charged before it was watched
            self.whole = True
            self.drift = 0.0
            return local, None
        pace = self.pace
        pace = self.pace = local if pace is None else pace + PACE * (local - pace)
        steady_now = local > 0 and abs(local - pace) <= tolerance * STEADY
        self.steady = self.steady + 1 if steady_now else 0
        steady = self.steady >= steady_after
        drift = self.drift + local - self.standing
        self.since += 1
        due = restate_after is not None and self.since >= restate_after
        if self.standing:
            if steady and not due and abs(drift) <= tolerance:
                self.drift = drift
                return 0.0, None
            restate = not steady or due or abs(pace - self.standing) * horizon > tolerance
        elif steady:
            restate = True
        else:
            self.drift = 0.0
            return drift, None
        self.drift = 0.0
        if not restate:
            return drift, None
        self.standing = pace if steady else 0.0
        self.since = 0
        return drift, self.standing

    def stand(self, member: str, standing: float) -> None:
        """Another member's standing from the next interval on (0 ends it)."""
        standings = self.standings
        if standings is None:
            if not standing:
                return
            standings = self.standings = {}
        before = standings.get(member, 0.0)
        if standing:
            standings[member] = standing
        else:
            standings.pop(member, None)
        self.standings_total = sum(standings.values())
        self.pending += before - standing

    def carry(self, before: _Share) -> None:
        """The standings of the share this one replaces (new managers, of a reload)."""
        self.standing, self.drift, self.since = before.standing, before.drift, before.since
        self.pace, self.steady, self.whole = before.pace, before.steady, before.whole
        self.standings, self.standings_total = before.standings, before.standings_total
        self.pending = before.pending

    def forget(self, member: str) -> None:
        """A member's standings end at once: it is gone, or publishes its use whole again
        (its record of the interval holds what the standing covered)."""
        if self.standings and self.standings.pop(member, None) is not None:
            self.standings_total = sum(self.standings.values())


class FleetMember:
    def __init__(self, member: str, sync_interval_ms: int) -> None:
        self.member = member
        self.sync_interval_ms = sync_interval_ms
        #: who else is in the fleet, and whether this member's bus is up
        self.membership = Membership(sync_interval_ms, self._gone)
        #: its publications until they come back, and what the bus did not take
        self.outbox = Outbox()
        #: how long its publications took to come back (among owners, the caller's: how
        #: long a contribution took to come back in its owner's totals)
        self.delay_ms = 0
        #: members whose standings some share holds; what this member missed of the bus, and
        #: whose standings are named again
        self._standing: set[str] = set()
        self.gaps = Gaps()
        #: the engine's managers the shares are of, and per manager its sensors' shares
        self._managers: Sequence[QuotaManager] = ()
        self._shares: list[dict[MetricTags, _Share]] = []
        #: whether the others' report of a sensor's use (by its tags) is late, and whether
        #: it is held at this member's share though the bus is up, its others' use unheard
        #: (fleet_owners.py: its owner's totals are late, or its owner is silent); None:
        #: none is
        self.awaiting: Callable[[str, str], bool] | None = None
        self.holding: Callable[[str, str], bool] | None = None

    def publish(self, engine: QuotaEngine, now_ms: int, wall_ms: int) -> Publication:
        """What this member charged since its last publication of the sensors it watches,
        beyond its standings, and the standings it names anew; every watched sensor's weight
        renewed from the use seen here and elsewhere, the others' standings added."""
        shares = self._shares_of(engine, now_ms)
        membership = self.membership
        up = membership.bus_up(now_ms)
        others = membership.members(now_ms) - 1 if up else 0
        reads = membership.oldest_read(now_ms) if up else STANDINGLESS
        reckoning = reads > STANDINGLESS
        cool_after = cool_after_intervals(self.sync_interval_ms)
        steady_after = max(1, STEADY_MS // self.sync_interval_ms)
        horizon = max(1, RESTATE_MS // self.sync_interval_ms)
        # every standing named again now if a member joined or asked since the last
        # publication, and every RESTATE_MS for a member that cannot ask
        gaps = self.gaps
        restate_after = 0 if gaps.restate else horizon if reads == RESTATING else None
        gaps.restate = False
        # the others' reports of an interval come at most an interval after it, and a bus
        # delay later: what they did not report by then, they did not use
        expired_ms = now_ms - ANTICIPATED_FOR * self.sync_interval_ms - self.delay_ms
        awaiting, holding = self.awaiting, self.holding
        uses: list[Use] = []
        standings: list[Use] = []
        for index, (manager, by_tags) in enumerate(zip(self._managers, shares, strict=True)):
            crossed = manager.take_crossed()
            if not manager.enabled:
                continue
            for sensors in crossed:
                if sensors.tags not in by_tags and sensors.limit != UNLIMITED:
                    # settled with the weight its use was charged with, before it changes
                    _settle(manager, _watch(manager, by_tags, sensors), now_ms)
            topics = isinstance(manager, TopicQuotaManager)
            manager.set_lines(0.0 if topics else LINE_SHARE, 1.0 + others)
            cool = _cooling(manager, self.sync_interval_ms)
            # a topic's use is published whole: `top` reads it from the bus
            drift_per_limit = (
                DRIFT_SHARE * _quota_span(manager) if reckoning and not topics else 0.0
            )
            for tags, share in list(by_tags.items()):
                sensors = share.sensors
                _settle(manager, share, now_ms)
                if share.standings:
                    standing_elsewhere = share.standings_total + share.pending
                    share.pending = 0.0
                    if standing_elsewhere:
                        _record_elsewhere(manager, share, standing_elsewhere, now_ms)
                held = holding is not None and holding(*tags)
                late = held or (awaiting is not None and awaiting(*tags))
                anticipated = share.anticipated
                if held:
                    # unheard, the others may have used what it anticipated: it stays
                    # charged, and no report heard later replaces it
                    anticipated.clear()
                elif anticipated and anticipated[0][0] <= expired_ms and not late:
                    # (late: what the others did not report is known once their report is)
                    _withdraw(manager, share, expired_ms, now_ms)
                local = share.unpublished
                share.unpublished = 0.0
                if drift_per_limit and not local and not share.standing and share.whole:
                    # no use here and none standing (a principal that used another member,
                    # or cools): nothing drifts, and it is not steady here; saves a call
                    share.steady = 0
                    if share.pace:
                        share.pace -= PACE * share.pace
                elif drift_per_limit:
                    tolerance = drift_per_limit * sensors.limit
                    drift, standing = share.reckon(
                        local, tolerance, steady_after, horizon, restate_after
                    )
                    if drift:
                        uses.append((index, tags[0], tags[1], drift))
                    if standing is not None:
                        standings.append((index, tags[0], tags[1], standing))
                else:
                    if share.standing or share.drift:
                        # no longer reckoned (an older member is heard, or the bus lost):
                        # what the standing left out goes with the use
                        local += share.drift
                        share.standing = share.drift = 0.0
                    if local:
                        uses.append((index, tags[0], tags[1], local))
                here, elsewhere = share.here, share.elsewhere
                if held:
                    # as if each other member used as much: this member's share
                    sensors.weight = 1.0 + others
                elif here > SETTLED:
                    ratio = elsewhere / here
                    sensors.weight = 1.0 + (others if ratio > others else max(ratio, 0.0))
                else:
                    sensors.weight = 1.0 + others
                share.here = here * DECAY + share.fresh
                share.fresh = 0.0
                if not late:
                    # late, the others' use is not heard, not gone: once heard again, this
                    # member's weight starts from what they used before
                    share.elsewhere = elsewhere * DECAY
                if share.standings_total:
                    continue  # not left while the others name standings for it
                share.cool = share.cool + 1 if cool(sensors, 0.0, now_ms) else 0
                if share.cool >= cool_after:
                    if share.standing or share.drift:
                        # its last standing ends with it
                        if share.drift:
                            uses.append((index, tags[0], tags[1], share.drift))
                        standings.append((index, tags[0], tags[1], 0.0))
                    _withdraw(manager, share, now_ms, now_ms)
                    manager.unwatch(sensors)
                    del by_tags[tags]
        engine.producer_ids.sharing = True  # a reload may have made the manager anew
        producer_ids = {tags[0]: ids for tags, ids in engine.producer_ids.take_admitted().items()}
        publication = Publication(
            self.member,
            self.outbox.sequence + 1,
            wall_ms,
            uses,
            producer_ids,
            standings if reckoning else None,
            reads if reckoning else VERSION,
        )
        if gaps.asking:
            publication.uses.append((RESTATE_ASKED, "", "", 0.0))
            gaps.asking = False
        publication = self.outbox.send(publication, now_ms, membership.gone_after_ms)
        if publication.standings is None or publication.version < VERSION:
            publication.uses.insert(0, (READS_NEWEST, "", "", float(VERSION)))
        return publication

    def lost(self, publication: Publication, now_ms: int) -> None:
        """The bus did not take a publication (Outbox.lost): the next one names every
        standing again."""
        self.outbox.lost(publication, now_ms)
        self.gaps.restate = True

    def receive(self, publication: Publication, engine: QuotaEngine, now_ms: int) -> list[Use]:
        """A publication the bus carried: this member's own says the bus is up; another
        member's use is recorded into the same sensors, unjudged, less what was already
        charged here in anticipation of it, and its standings are added from now on. What
        is not a use of a quota type this member knows is returned (fleet_counts.py), of its
        own publication too."""
        member = publication.member
        if member == self.member:
            delay = self.outbox.came_back(publication.sequence, now_ms)
            if delay is not None:
                self.delay_ms = delay
            self.membership.heard_self(now_ms)
            places = len(engine.shared())
            return [use for use in publication.uses if use[0] >= places]
        uses, standings = publication.uses, publication.standings
        if uses and uses[0][0] == READS_NEWEST:
            reads = int(uses[0][3])
        else:
            reads = STANDINGLESS if standings is None else publication.version
        joined = self.membership.heard(member, now_ms, reads)
        self.gaps.heard(member, publication.sequence, joined)
        if standings is None:
            self.forget_standings(member)
        skipped = self.record_others(member, uses, standings, engine, now_ms)
        remember_producer_ids(publication, engine, now_ms)
        return skipped

    def record_others(
        self,
        member: str,
        uses: list[Use],
        standings: list[Use] | None,
        engine: QuotaEngine,
        now_ms: int,
    ) -> list[Use]:
        """Another member's uses and standings, or an owner's totals of the others'
        (fleet_owners.py: a partition as the member): what is not a use of a quota type
        this member knows is returned."""
        shares = self._shares_of(engine, now_ms)
        managers = self._managers
        coolings: dict[int, Callable[[ClientSensors, float, int], bool]] = {}
        skipped: list[Use] = []
        for quota_type, user, client_id, value in uses:
            if not 0 <= quota_type < len(shares):  # not a use, or a newer member's quota type
                if quota_type == RESTATE_ASKED:
                    self.gaps.restate = True
                else:
                    skipped.append((quota_type, user, client_id, value))
                continue
            manager = managers[quota_type]
            if not manager.enabled:
                continue
            by_tags = shares[quota_type]
            share = by_tags.get((user, client_id))
            if share is None:
                if value <= SETTLED:
                    continue  # less than a standing that was never added here
                sensors = manager.sensors_of_tags((user, client_id), now_ms)
                if sensors.limit == UNLIMITED:
                    continue  # unlimited here: nothing to judge
                cooling = coolings.get(quota_type)
                if cooling is None:
                    cooling = coolings[quota_type] = _cooling(manager, self.sync_interval_ms)
                if cooling(sensors, value, now_ms):
                    # a sensor left as it cooled: recorded, and judged with its weight
                    manager.record_remote(sensors, value, now_ms)
                    continue
                # watched from the first report of a use that matters, so that what the
                # others use is known when this member's own use is weighted
                share = _watch(manager, by_tags, sensors)
            _settle(manager, share, now_ms)
            _record_elsewhere(manager, share, value, now_ms)
        if standings and _stand(member, standings, managers, shares, now_ms):
            self._standing.add(member)
        return skipped

    def _gone(self, member: str) -> None:
        self.gaps.gone(member)
        self.forget_standings(member)

    def forget_standings(self, member: str) -> None:
        """A member gone, or writing records without standings, or a partition with a new
        owner (fleet_owners.py): its standings end here."""
        if member not in self._standing:
            return
        self._standing.discard(member)
        for by_tags in self._shares:
            for share in by_tags.values():
                share.forget(member)

    def _shares_of(self, engine: QuotaEngine, now_ms: int) -> list[dict[MetricTags, _Share]]:
        """The shares of the engine's managers: a reload that changed the quota windows
        made new managers, whose sensors start afresh, and so do their shares, but for the
        standings, which go on (the others add this member's until it names them anew, and
        name theirs only when asked). A use names its manager by its place in
        QuotaEngine.shared (a member that knows fewer managers skips the places past its
        own)."""
        managers = engine.shared()
        if managers != self._managers:
            before = self._shares
            self._managers = managers
            self._shares = [{} for _ in managers]
            for manager, by_tags, old in zip(managers, self._shares, before, strict=False):
                for tags, share in old.items():
                    if share.standing or share.standings:
                        sensors = manager.sensors_of_tags(tags, now_ms)
                        if sensors.limit != UNLIMITED:
                            _watch(manager, by_tags, sensors).carry(share)
        return self._shares

    def local_rates(self) -> Iterator[tuple[QuotaManager, MetricTags, float]]:
        """Each shared sensor's rate per second of the use charged here alone, averaged
        over the intervals its weight remembers (the sensor's own rate is the fleet's, as
        this member judges it)."""
        per_second = (1 - DECAY) * 1000 / self.sync_interval_ms
        for manager, by_tags in zip(self._managers, self._shares, strict=True):
            if isinstance(manager, TopicQuotaManager):
                continue  # not a principal's: its own metrics are to come (issue 38)
            for tags, share in by_tags.items():
                yield manager, tags, share.here * per_second

    def watched(self) -> int:
        """The sensors this member watches, over every quota type and topic."""
        return sum(map(len, self._shares))


def remember_producer_ids(publication: Publication, engine: QuotaEngine, now_ms: int) -> None:
    """The producer ids another member admitted (KIP-936): not charged again here."""
    producer_ids = engine.producer_ids
    if producer_ids.enabled:
        for user, ids in publication.producer_ids.items():
            producer_ids.remember((user, ""), ids, now_ms)


def _stand(
    member: str,
    standings: list[Use],
    managers: Sequence[QuotaManager],
    shares: list[dict[MetricTags, _Share]],
    now_ms: int,
) -> bool:
    """Another member's standings, each from the next interval on: whether any was
    stood."""
    stood = False
    for quota_type, user, client_id, value in standings:
        if not 0 <= quota_type < len(shares) or not managers[quota_type].enabled:
            continue
        by_tags = shares[quota_type]
        share = by_tags.get((user, client_id))
        if share is None:
            if not value:
                continue
            manager = managers[quota_type]
            sensors = manager.sensors_of_tags((user, client_id), now_ms)
            if sensors.limit == UNLIMITED:
                continue
            share = _watch(manager, by_tags, sensors)
        share.stand(member, value)
        stood = True
    return stood


def _record_elsewhere(manager: QuotaManager, share: _Share, value: float, now_ms: int) -> None:
    """Use of the other members', reported or standing, recorded less what this member
    anticipated of it."""
    share.elsewhere += value
    if share.anticipated:
        value -= share.replace_anticipated(value)
    if value > SETTLED or value < -SETTLED:
        manager.record_remote(share.sensors, value, now_ms)


def _quota_span(manager: QuotaManager) -> float:
    """The quota over the manager's whole windows, per unit of limit."""
    if isinstance(manager, TokenBucketQuotaManager):
        return manager.burst(1.0)
    return manager.config.samples * manager.config.window_ms / 1000


def _cooling(
    manager: QuotaManager, interval_ms: int
) -> Callable[[ClientSensors, float, int], bool]:
    """Whether the fleet's use of one of the manager's sensors, as this member sees it,
    with a use just reported over one interval, is under half the line it has when not
    watched: left then, it does not cross again at once. Made once per manager for a
    walk over its sensors."""
    if isinstance(manager, TokenBucketQuotaManager):
        bucket = manager

        def spent_under_half(sensors: ClientSensors, reported: float, now_ms: int) -> bool:
            spent = bucket.burst(sensors.limit) - bucket.tokens(sensors, now_ms) + reported
            return spent <= bucket.line_of(sensors.limit) / 2

        return spent_under_half
    # the samples' sum over the whole windows, not Kafka's measure: a measure purges
    # samples, and the fleet's bookkeeping must not move what the quota judges
    span_ms = manager.config.samples * manager.config.window_ms
    line_of = manager.line_of

    def rate_under_half(sensors: ClientSensors, reported: float, now_ms: int) -> bool:
        rate = sensors.rate.total() * 1000 / span_ms
        return rate + reported * 1000 / interval_ms <= line_of(sensors.limit) / 2

    return rate_under_half


def cool_after_intervals(sync_interval_ms: int) -> int:
    """The intervals a watched sensor stays under half its line before it is left."""
    return max(1, COOL_AFTER_MS // sync_interval_ms)


def _watch(
    manager: QuotaManager, by_tags: dict[MetricTags, _Share], sensors: ClientSensors
) -> _Share:
    manager.watch(sensors)
    share = by_tags[sensors.tags] = _Share(sensors)
    return share


def _settle(manager: QuotaManager, share: _Share, now_ms: int) -> None:
    """Take what the sensor charged here since it was last settled into its share: the use
    to publish, and what its weight anticipated for the others (replaced by what they
    report from now on)."""
    settled = manager.settle(share.sensors)
    if settled is None:
        return
    local, anticipated = settled
    share.fresh += local
    share.unpublished += local
    if anticipated:
        share.anticipated.append([now_ms, anticipated])


def _withdraw(manager: QuotaManager, share: _Share, expired_ms: int, now_ms: int) -> None:
    """Anticipated use the others never reported is taken back out of the sensor."""
    anticipated = share.anticipated
    while anticipated and anticipated[0][0] <= expired_ms:
        manager.record_remote(share.sensors, -anticipated.popleft()[1], now_ms)
