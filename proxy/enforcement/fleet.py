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

Membership is what the bus shows: a member whose publications stop for GONE_AFTER intervals
is gone. A member that stops reading its own publications back has lost the bus: it falls
back to its share of every budget (the limit divided by the members it last saw), never to
the whole limit, until it reads itself again.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator, Sequence
from typing import Final

from protocol.fleet_records import Publication, Use
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

#: sync intervals of silence after which a member is gone (or, for its own publications, the
#: bus is)
GONE_AFTER: Final = 4
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


class _Share:
    """One sensor's part in the fleet, as this member sees it."""

    __slots__ = ("anticipated", "cool", "elsewhere", "fresh", "here", "sensors", "unpublished")

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


class FleetMember:
    def __init__(self, member: str, sync_interval_ms: int) -> None:
        self.member = member
        self.sync_interval_ms = sync_interval_ms
        self._gone_after_ms = GONE_AFTER * sync_interval_ms
        self._sequence = 0
        #: when this member's publications were made (by sequence), until they come back:
        #: the bus's delay is how long they took
        self._published_ms: dict[int, int] = {}
        self._delay_ms = 0
        #: a publication the bus did not take: its use goes out with the next one; and
        #: when the first of those lost in a row was
        self._lost: Publication | None = None
        self._lost_ms = 0
        #: other members -> when their last publication arrived (this member's clock)
        self._heard: dict[str, int] = {}
        #: when this member's own last publication came back from the bus
        self._own_ms: int | None = None
        #: the members alive when the bus was last up: the budget is shared among them
        #: while it is down
        self._members_when_up = 1
        #: the engine's managers the shares are of, and per manager its sensors' shares
        self._managers: Sequence[QuotaManager] = ()
        self._shares: list[dict[MetricTags, _Share]] = []

    def publish(self, engine: QuotaEngine, now_ms: int, wall_ms: int) -> Publication:
        """What this member charged since its last publication of the sensors it watches;
        every watched sensor's weight renewed from the use seen here and elsewhere."""
        shares = self._shares_of(engine)
        up = self.bus_up(now_ms)
        others = self.members(now_ms) - 1 if up else 0
        cool_after = cool_after_intervals(self.sync_interval_ms)
        # the others' reports of an interval come at most an interval after it, and a bus
        # delay later: what they did not report by then, they did not use
        expired_ms = now_ms - ANTICIPATED_FOR * self.sync_interval_ms - self._delay_ms
        uses = []
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
            cool = self._cooling(manager)
            for tags, share in list(by_tags.items()):
                sensors = share.sensors
                _settle(manager, share, now_ms)
                anticipated = share.anticipated
                if anticipated and anticipated[0][0] <= expired_ms:
                    _withdraw(manager, share, expired_ms, now_ms)
                if share.unpublished:
                    uses.append((index, tags[0], tags[1], share.unpublished))
                    share.unpublished = 0.0
                here, elsewhere = share.here, share.elsewhere
                if here > SETTLED:
                    ratio = elsewhere / here
                    sensors.weight = 1.0 + (others if ratio > others else max(ratio, 0.0))
                else:
                    sensors.weight = 1.0 + others
                share.here = here * DECAY + share.fresh
                share.fresh = 0.0
                share.elsewhere = elsewhere * DECAY
                share.cool = share.cool + 1 if cool(sensors, 0.0, now_ms) else 0
                if share.cool >= cool_after:
                    _withdraw(manager, share, now_ms, now_ms)
                    manager.unwatch(sensors)
                    del by_tags[tags]
        engine.producer_ids.sharing = True  # a reload may have made the manager anew
        producer_ids = {tags[0]: ids for tags, ids in engine.producer_ids.take_admitted().items()}
        if self._lost is not None:
            uses, producer_ids = _merged(self._lost, uses, producer_ids)
            self._lost = None
        self._sequence += 1
        self._published_ms[self._sequence] = now_ms
        self._published_ms.pop(self._sequence - 2 * GONE_AFTER, None)  # never read back
        return Publication(self.member, self._sequence, wall_ms, uses, producer_ids)

    def lost(self, publication: Publication, now_ms: int) -> None:
        """The bus did not take a publication: its use goes out with the next one, unless
        the bus stays down so long that the others have fallen back to their shares (then
        it was held by the shares, and would only throttle everyone at once on return).
        One that timed out may have been written after all: its use then counts twice,
        on the safe side."""
        self._published_ms.pop(publication.sequence, None)
        if self._lost is not None and now_ms - self._lost_ms <= self._gone_after_ms:
            uses, producer_ids = _merged(self._lost, publication.uses, publication.producer_ids)
            publication = publication._replace(uses=uses, producer_ids=producer_ids)
        else:
            self._lost_ms = now_ms
        self._lost = publication

    def receive(self, publication: Publication, engine: QuotaEngine, now_ms: int) -> None:
        """A publication the bus carried: this member's own says the bus is up; another
        member's use is recorded into the same sensors, unjudged, less what was already
        charged here in anticipation of it."""
        if publication.member == self.member:
            self._own_ms = now_ms
            published = self._published_ms.pop(publication.sequence, None)
            if published is not None:
                self._delay_ms = now_ms - published
                for older in [seq for seq in self._published_ms if seq < publication.sequence]:
                    del self._published_ms[older]
            # the members the budget is shared among if the bus is lost from here on
            self._members_when_up = self.members(now_ms)
            return
        self._heard[publication.member] = now_ms
        shares = self._shares_of(engine)
        managers = self._managers
        coolings = [self._cooling(manager) for manager in managers]
        for quota_type, user, client_id, value in publication.uses:
            if not 0 <= quota_type < len(shares):
                continue  # a newer member's quota type
            manager = managers[quota_type]
            if not manager.enabled:
                continue
            by_tags = shares[quota_type]
            share = by_tags.get((user, client_id))
            if share is None:
                sensors = manager.sensors_of_tags((user, client_id), now_ms)
                if sensors.limit == UNLIMITED:
                    continue  # unlimited here: nothing to judge
                if coolings[quota_type](sensors, value, now_ms):
                    # a sensor left as it cooled: recorded, and judged with its weight
                    manager.record_remote(sensors, value, now_ms)
                    continue
                # watched from the first report of a use that matters, so that what the
                # others use is known when this member's own use is weighted
                share = _watch(manager, by_tags, sensors)
            _settle(manager, share, now_ms)
            share.elsewhere += value
            if share.anticipated:
                value -= share.replace_anticipated(value)
            if value > SETTLED:
                manager.record_remote(share.sensors, value, now_ms)
        producer_ids = engine.producer_ids
        if producer_ids.enabled:
            for user, ids in publication.producer_ids.items():
                producer_ids.remember((user, ""), ids, now_ms)

    def _shares_of(self, engine: QuotaEngine) -> list[dict[MetricTags, _Share]]:
        """The shares of the engine's managers: a reload that changed the quota windows
        made new managers, whose sensors start afresh, and so do their shares. A use names
        its manager by its place here: the quota types' managers in QuotaType's order, then
        the topics' (a member that knows no topic quotas skips those places)."""
        managers = (*engine.managers(), *engine.topic_managers())
        if managers != self._managers:
            self._managers = managers
            self._shares = [{} for _ in managers]
        return self._shares

    def _cooling(self, manager: QuotaManager) -> Callable[[ClientSensors, float, int], bool]:
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
        interval_ms = self.sync_interval_ms
        line_of = manager.line_of

        def rate_under_half(sensors: ClientSensors, reported: float, now_ms: int) -> bool:
            rate = sensors.rate.total() * 1000 / span_ms
            return rate + reported * 1000 / interval_ms <= line_of(sensors.limit) / 2

        return rate_under_half

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

    def members(self, now_ms: int) -> int:
        """This member and every other heard from lately."""
        gone = [m for m, heard in self._heard.items() if now_ms - heard > self._gone_after_ms]
        for member in gone:
            del self._heard[member]
        return 1 + len(self._heard)

    def bus_up(self, now_ms: int) -> bool:
        own = self._own_ms
        return own is not None and now_ms - own <= self._gone_after_ms

    def share(self, now_ms: int) -> float:
        """The share of each budget this member enforces on its own: all of it while the bus
        carries the fleet's use, 1 / the members last seen while it does not."""
        return 1.0 if self.bus_up(now_ms) else 1.0 / self._members_when_up


def _merged(
    lost: Publication, uses: list[Use], producer_ids: dict[str, list[int]]
) -> tuple[list[Use], dict[str, list[int]]]:
    """A lost publication's use and producer ids added to a new one's."""
    values = {(quota_type, user, client_id): value for quota_type, user, client_id, value in uses}
    for quota_type, user, client_id, value in lost.uses:
        key = quota_type, user, client_id
        values[key] = values.get(key, 0.0) + value
    merged = {user: [*lost.producer_ids.get(user, ()), *ids] for user, ids in producer_ids.items()}
    for user, ids in lost.producer_ids.items():
        merged.setdefault(user, ids)
    return [(*key, value) for key, value in values.items()], merged


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
