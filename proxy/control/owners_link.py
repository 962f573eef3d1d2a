"""A fleet bus's owners (issue 51; docs/fleet.md#owners): the asyncio shell of Owning
(proxy/enforcement/fleet_owners.py) around the owners' topic (owners_topic.py).

A member's contributions go to the partitions' owners on the owners' topic, each partition's
one at a time (Routes.lost counts on it: each is written or failed before the next); the
totals of the partitions it owns go FOLDS times an interval to the bus's topic, which every
member reads. The bus is up while the group holds an assignment and no owner is silent.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Final

from config.cluster import ClusterSettings
from config.fleet import OWNERS_SUFFIX
from protocol.fleet_records import (
    Publication,
    Totals,
    contribution_key,
    decode,
    decode_totals,
    encode,
    encode_totals,
    read_contribution_key,
)
from proxy.control.own_topic import RETRY_S, UNREACHABLE, OwnTopic
from proxy.control.owners_topic import SESSION_TIMEOUT_MS, OwnersTopic
from proxy.enforcement.fleet_membership import GONE_AFTER
from proxy.enforcement.fleet_owners import FOLDS, Owning
from proxy.runtime.context import ProxyContext
from proxy.runtime.counters import FleetStats

log = logging.getLogger(__name__)

#: how long a contribution may wait for its owner before this member joins the group again:
#: past the broker's session timeout (a dead owner's partitions have a new owner by then)
STUCK_AFTER_MS: Final = 2 * SESSION_TIMEOUT_MS
#: how often at most this member asks the cluster whether it answers (an interval, or
#: this, whichever is longer)
ASK_EVERY_MS: Final = 250


class OwnersLink:
    def __init__(
        self,
        owning: Owning,
        bus: OwnTopic,
        context: ProxyContext,
        cluster: ClusterSettings,
        servers: list[str],
        configs: dict[str, str],
        stats: FleetStats,
    ) -> None:
        self.owning = owning
        self._bus = bus
        self._context = context
        self._stats = stats
        interval_ms = owning.fleet.sync_interval_ms
        self._interval_s = interval_ms / 1000
        self.topic = OwnersTopic(
            bus.topic + OWNERS_SUFFIX,
            owning.fleet.member,
            cluster,
            servers,
            configs,
            read_back_ms=GONE_AFTER * interval_ms,
        )
        #: per partition, the send of its contribution in flight
        self._sending: dict[int, asyncio.Task[None]] = {}
        #: the question to the cluster in flight (_reach), and when it was last asked
        self._reaching: asyncio.Task[None] | None = None
        self._asked_ms = -ASK_EVERY_MS
        self._generation: int | None = None
        self._rejoin = False
        #: the partitions held when last assigned
        self._held: frozenset[int] = frozenset()

    async def join(self) -> None:
        """Open the owners' topic and read it until the group assigns this member."""
        if not self.topic.is_open:
            await self.topic.open()
        while self.topic.group is None:
            await self._fold()

    async def run(self) -> None:
        """Fold the contributions to the partitions this member owns, and publish their
        totals FOLDS times an interval; open the topic again when it fails."""
        totalling = asyncio.get_running_loop().create_task(self._total_every_fold())
        try:
            while True:
                try:
                    await self.join()
                    await self._fold()
                    if self._rejoin or self.stuck():
                        log.warning(
                            "fleet: the owners' group is joined again, for its next generation "
                            "(%s)",
                            "the bus was opened again"
                            if self._rejoin
                            else "a contribution of "
                            f"this member's has waited over {STUCK_AFTER_MS} ms for its owner",
                        )
                        self._rejoin = False
                        await self._close_topic()
                except UNREACHABLE as exc:
                    log.warning("fleet: the owners' topic %s failed: %r", self.topic.topic, exc)
                    await self._close_topic()
                    await asyncio.sleep(RETRY_S)
        finally:
            totalling.cancel()
            await asyncio.gather(totalling, return_exceptions=True)

    def rejoin(self) -> None:
        """The bus was opened again from its end: totals that counted this member's
        contributions may be among what it skipped, and the group's next generation starts
        the count again."""
        self._rejoin = True

    def stuck(self) -> bool:
        """A contribution of this member's has waited past the session timeout and more:
        had its owner died, the group would have a new generation by now. Its owner lives
        but adds nothing up (its totals cannot be written), or this member missed totals
        that counted its contributions; leaving and joining the group again makes a new
        generation, in which every member sends what is not added up again."""
        group, routes = self.topic.group, self.owning.routes
        if group is None or group.generation != routes.generation:
            return False  # a generation this member has not taken up yet starts afresh
        oldest = routes.oldest_unfolded_ms()
        return oldest is not None and self._context.clock.now_ms() - oldest > STUCK_AFTER_MS

    def renew(self, cluster: ClusterSettings) -> None:
        self.topic.renew(cluster)

    async def close(self) -> None:
        for task in list(self._sending.values()):
            task.cancel()
        await asyncio.gather(*self._sending.values(), return_exceptions=True)
        await self._close_topic()

    async def _close_topic(self) -> None:
        """Close the topic, and the question to the cluster its consumer carries: the next
        consumer asks anew (a question left on a closed one would wait out its timeout)."""
        reaching, self._reaching = self._reaching, None
        if reaching is not None:
            reaching.cancel()
            await asyncio.gather(reaching, return_exceptions=True)
        await self.topic.close()

    def assign(self, now_ms: int) -> None:
        """The group as last assigned, if it holds (else the bus falls down after
        GONE_AFTER intervals, and this member holds its share)."""
        group = self.topic.group
        if group is None:
            return
        owning = self.owning
        if group.generation != self._generation:
            self._generation = group.generation
            log.info(
                "fleet: generation %d of the owners' group: %d members; partitions owned here: %s",
                group.generation,
                len(group.order),
                ", ".join(map(str, group.owned)) or "none",
            )
            owning.reached(now_ms)  # the group's assignment is the cluster's answer
        owning.assign(group.order, group.owned, group.generation, now_ms)
        reaching = self._reaching
        asked = self._asked_ms
        if (reaching is None or reaching.done()) and now_ms - asked >= ASK_EVERY_MS:
            self._asked_ms = now_ms
            # a partition by this member's place: a leader's election does not stop all
            partition = owning.routes.member % owning.routes.partitions
            self._reaching = asyncio.get_running_loop().create_task(self._reach(partition))
        held, before = owning.held, self._held
        if held - before:
            log.warning(
                "fleet: partitions %s: their owner has folded none of this member's use for "
                "%d ms: their principals are held here as 1/%d of each budget until it "
                "folds again or the group's next generation",
                ", ".join(map(str, sorted(held - before))),
                owning.silent_after_ms,
                owning.fleet.membership.members(now_ms),
            )
        if before - held:
            log.info(
                "fleet: partitions %s: folded again, or given a new owner: their principals "
                "share the fleet's budget again",
                ", ".join(map(str, sorted(before - held))),
            )
        self._held = held
        self._stats.partitions_held = len(held)

    def failure(self, now_ms: int) -> str:
        """Why the bus is down, as far as the owners go."""
        if self.topic.group is None:
            return f"the owners' group on {self.topic.topic} has not assigned this member"
        if self.owning.cut_off(now_ms):
            return (
                f"the cluster has not answered this member for {self.owning.silent_after_ms} "
                "ms, or its own totals do not come back"
            )
        return "a member sharing its use the other way is heard, or the bus's topic failed"

    def route(self, publication: Publication, now_ms: int) -> Publication | None:
        """Send a publication's contributions to their owners; what every member reads of
        it is returned (None: nothing)."""
        # the connection guard's escrow hears every member after a gap (fleet_counts.py)
        always = self._context.quotas.engine.connections.enabled
        broadcast, sends = self.owning.route(publication, now_ms, always, self._sending)
        routes = self.owning.routes
        key = contribution_key(routes.member, routes.generation)
        loop = asyncio.get_running_loop()
        for partition, contribution in sends.items():
            self._sending[partition] = loop.create_task(self._send(partition, key, contribution))
        return broadcast

    def read_totals(self, value: bytes, now_ms: int) -> None:
        """ValueError for what is not an owner's totals."""
        totals = decode_totals(value)
        self.owning.read_totals(totals, self._context.quotas.engine, now_ms)

    async def _send(self, partition: int, key: bytes, contribution: Publication) -> None:
        """One partition's one contribution in flight: Routes.route gives a partition none
        while it is here."""
        started = time.thread_time()
        record = encode(contribution)
        self._stats.cpu_seconds += time.thread_time() - started
        try:
            await self.topic.send(partition, key, record)
            self._stats.bytes_published += len(record)
        except UNREACHABLE:
            self.owning.routes.lost(partition)
            self._stats.publications_lost += 1
        finally:
            del self._sending[partition]

    async def _fold(self) -> None:
        records = await self.topic.read(int(self.owning.fleet.sync_interval_ms))
        started = time.thread_time()
        for record in records:
            value = record.value or b""
            self._stats.bytes_read += len(value)
            try:
                place, generation = read_contribution_key(record.key)
                contribution = decode(value)
            except ValueError as exc:
                log.warning(
                    "fleet: the contribution at %d/%d skipped: %s",
                    record.partition,
                    record.offset,
                    exc,
                )
                continue
            self.owning.contribution(place, record.partition, generation, contribution)
        self._stats.cpu_seconds += time.thread_time() - started

    async def _reach(self, partition: int) -> None:
        """Whether this member still reaches the cluster (Owning.reached), asked every
        interval: an owner silent alone holds its partitions, a member cut off holds its
        share of every budget, idle or not. Beside the folding, which it must not hold up;
        one at a time, each for up to a session timeout."""
        try:
            await asyncio.wait_for(self.topic.reach(partition), SESSION_TIMEOUT_MS / 1000)
        except UNREACHABLE:
            return
        self.owning.reached(self._context.clock.now_ms())

    async def _total_every_fold(self) -> None:
        while True:
            await asyncio.sleep(self._interval_s / FOLDS)
            await asyncio.gather(*map(self._publish_totals, self.owning.totals()))

    async def _publish_totals(self, totals: Totals) -> None:
        try:
            started = time.thread_time()
            record = encode_totals(totals)
            self._stats.cpu_seconds += time.thread_time() - started
            await self._bus.send(record)
            self._stats.bytes_published += len(record)
        except ValueError as exc:  # the encoder's: the members' rejoin (stuck) mends it
            log.error("fleet: totals of partition %d not written: %s", totals.partition, exc)
        except UNREACHABLE:
            fold = self.owning.folds.get(totals.partition)
            if fold is not None:
                fold.lost(totals)
            self._stats.publications_lost += 1
