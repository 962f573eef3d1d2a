"""A fleet's bus: a topic of the proxy's own on the cluster it fronts, one partition, that
every member writes its publication to once per sync interval and reads everyone's from.

The member's logic is sans-IO (proxy/enforcement/fleet.py); this is its asyncio shell. A
member serves once its bus is up: it has read the last few intervals of the topic (who the
members are, and their recent use) and its own first publication back. While the topic
cannot be written or read, the member enforces its share of every budget, says so in its
log and in kafka_quota_proxy_fleet_bus_up, and tries again every RETRY_S; once it reads its
own publications again, the fleet converges within two sync intervals.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
from collections.abc import Sequence
from typing import Final

from aiokafka.errors import KafkaError

from config.cluster import ClusterSettings
from config.fleet import FLEET_TOPIC_PREFIX
from protocol.fleet_records import (
    TOTALS,
    Publication,
    decode,
    decode_totals,
    encode,
    split,
)
from proxy.control.fleet_report import BusReport
from proxy.control.own_topic import RETRY_S, UNREACHABLE, OwnTopic
from proxy.control.owners_link import OwnersLink
from proxy.enforcement.fleet import FleetMember
from proxy.enforcement.fleet_counts import FleetCounts
from proxy.enforcement.fleet_membership import GONE_AFTER
from proxy.enforcement.fleet_owners import Owning, through_owners
from proxy.runtime.clock import Clock, wall_ms
from proxy.runtime.context import ProxyContext
from proxy.runtime.counters import FleetStats

log = logging.getLogger(__name__)

#: how long the topic keeps publications: only the last few intervals are ever read
_TOPIC_CONFIGS: Final = {
    "cleanup.policy": "delete",
    "retention.ms": "300000",
    "segment.ms": "60000",
}
#: one record stays under Kafka's default message.max.bytes (a use or a standing is 13 bytes
#: and its names)
USES_PER_RECORD: Final = 5_000
#: the first byte of an owner's totals
_TOTALS: Final = bytes([TOTALS])


class FleetUnreachable(Exception):
    """The bus could not be read at start-up, or a member heard there shares its use the
    other way (owners, or straight): the proxy does not serve without it."""


def member_id(bootstrap_port: int, worker: int) -> str:
    """Unique per process; readable in logs: host, port, worker, pid."""
    return f"{socket.gethostname()}:{bootstrap_port}/w{worker}/{os.getpid()}"


class FleetBus:
    def __init__(
        self,
        member: FleetMember,
        context: ProxyContext,
        name: str,
        cluster: ClusterSettings,
        servers: Sequence[str],
        stats: FleetStats,
        owners: bool = False,
    ) -> None:
        self.member = member
        #: what the members tell each other besides use: connection counts, logins
        self._counts = FleetCounts(member, context.login_guard.backoffs)
        self.name = name
        self._context = context
        self._clock: Clock = context.clock
        self._stats = stats
        self._interval_s = member.sync_interval_ms / 1000
        #: a bus open this long without this member reading itself is opened again
        self._reopen_s = GONE_AFTER * self._interval_s + RETRY_S
        self._own = OwnTopic(
            FLEET_TOPIC_PREFIX + name,
            cluster,
            servers,
            "kafka-quota-proxy-fleet",
            _TOPIC_CONFIGS,
            {"acks": 1, "linger_ms": 0, "request_timeout_ms": 5_000},
        )
        self._reporting = BusReport(member, context, stats, name, self._own.topic)
        #: why the bus last failed
        self._failure = "its own publications stopped coming back"
        self._sends: set[asyncio.Task[None]] = set()
        #: the members' use through owners ([fleet] owners; docs/fleet.md#owners)
        self._owners: OwnersLink | None = None
        if owners:
            link = OwnersLink(Owning(member, 0), self._own, context, cluster, list(servers),
                              _TOPIC_CONFIGS, stats)  # fmt: skip
            self._owners = link
        #: the last member heard that shares its use the other way (owners, or straight)
        self._other_kind: str | None = None

    @property
    def topic(self) -> str:
        return self._own.topic

    async def start(self, timeout_s: float) -> None:
        """Open the topic and read it from GONE_AFTER intervals ago (the members, their
        recent use), then publish once and read that back: the bus is up."""
        try:
            await asyncio.wait_for(self._open(history=True), timeout_s)
            await asyncio.wait_for(self._read_history(), timeout_s)
            if self._owners is not None:
                await asyncio.wait_for(self._owners.join(), timeout_s)
            await asyncio.wait_for(self._until_up(), timeout_s)
        except FleetUnreachable:
            await self.close()  # a member refused leaves no trace: not even in the group
            raise
        except UNREACHABLE as exc:
            await self.close()
            raise FleetUnreachable(
                f"[fleet] name {self.name}: its topic {self.topic} cannot be read from the "
                f"cluster: {exc!r}"
            ) from exc
        self._report()

    async def run(self) -> None:
        """Publish every sync interval; follow the topic; open it again when it fails, or
        when this member's publications stop coming back (a topic deleted under it is made
        again then)."""
        loop = asyncio.get_running_loop()
        beside = [loop.create_task(self._publish_every_interval())]
        if self._owners is not None:
            beside.append(loop.create_task(self._owners.run()))
        opened = loop.time()
        try:
            while True:
                try:
                    if self._own.renewed:
                        await self._own.close()
                    if not self._own.is_open:
                        await self._open()
                        opened = loop.time()
                    await self._follow()
                    if self._lost(loop.time() - opened):
                        raise KafkaError("its own publications stopped coming back")
                except UNREACHABLE as exc:
                    self._failure = repr(exc)
                    await self._own.close()
                    await asyncio.sleep(RETRY_S)
        finally:
            for task in beside:
                task.cancel()
            await asyncio.gather(*beside, return_exceptions=True)

    def renew(self, cluster: ClusterSettings) -> None:
        """Followed with the reloaded [cluster] from the next turn on, from its end."""
        self._own.renew(cluster)
        if self._owners is not None:
            self._owners.renew(cluster)

    async def close(self) -> None:
        for task in list(self._sends):
            task.cancel()
        await asyncio.gather(*self._sends, return_exceptions=True)
        if self._owners is not None:
            await self._owners.close()
        await self._own.close()

    async def _open(self, history: bool = False) -> None:
        """Open the topic: at start-up from GONE_AFTER intervals ago; opened again after a
        failure, from its end (what was published meanwhile is stale: the members held
        their shares, and recording it now would only throttle everyone at once)."""
        if await self._own.open():
            log.info("fleet %s: topic %s created", self.name, self.topic)
        if history:
            await self._own.seek_to_time(wall_ms() - GONE_AFTER * self.member.sync_interval_ms)
        else:
            await self._own.seek_to_end()
            self.member.gaps.missed()
            if self._owners is not None:
                self._owners.rejoin()

    def _lost(self, open_s: float) -> bool:
        """Whether the topic, open for `open_s`, is to be opened again (a topic deleted
        under it is made again then): straight, this member's own publications have not
        come back for GONE_AFTER intervals; through owners, whose bus falls for other
        reasons too (a silent owner, a member of the other kind), its use has waited for
        its owner past the session timeout (owners_link.py's stuck)."""
        if open_s <= self._reopen_s:
            return False
        if self._owners is not None:
            return self._owners.stuck()
        return not self.member.membership.bus_up(self._clock.now_ms())

    async def _read_history(self) -> None:
        """The topic read to its end: a member sharing its use the other way is refused
        before this one publishes, or joins the owners' group (neither would it hear)."""
        end = await self._own.end_offset()
        while await self._own.position() < end:
            await self._follow()
            self._refuse_other_kind()

    async def _until_up(self) -> None:
        """This member's publication read back (straight), or its group assigned
        (owners)."""
        self._publish()
        while not self.member.membership.bus_up(self._clock.now_ms()):
            await self._follow()
            self._refuse_other_kind()

    def _refuse_other_kind(self) -> None:
        if self._other_kind is None:
            return
        owners = self._owners is not None
        raise FleetUnreachable(
            f"[fleet] name {self.name}: member {self._other_kind} shares its use "
            f"{'straight' if owners else 'through owners'} and this one "
            f"{'through owners' if owners else 'straight'} ([fleet] owners = "
            f"{str(owners).lower()}): neither reads the other's. Set [fleet] owners "
            "alike on every member (docs/fleet.md#owners)"
        )

    async def _publish_every_interval(self) -> None:
        while True:
            await asyncio.sleep(self._interval_s)
            self._publish()

    def _publish(self) -> None:
        now_ms = self._clock.now_ms()
        started = time.thread_time()
        engine, owners = self._context.quotas.engine, self._owners
        if owners is not None:
            owners.assign(now_ms)
        made = self.member.publish(engine, now_ms, wall_ms())
        self._counts.publish(made, engine, now_ms)
        publication = made if owners is None else owners.route(made, now_ms)
        self._stats.cpu_seconds += time.thread_time() - started
        if publication is None:
            self._report()
            return
        if self._own.is_open:
            task = asyncio.get_running_loop().create_task(self._send(publication))
            self._sends.add(task)
            task.add_done_callback(self._sends.discard)
        else:
            self.member.lost(publication, now_ms)
            self._stats.publications_lost += 1
        self._report()

    async def _send(self, publication: Publication) -> None:
        try:
            for part in split(publication, USES_PER_RECORD):
                started = time.thread_time()
                record = encode(part)
                self._stats.cpu_seconds += time.thread_time() - started
                await self._own.send(record)
                self._stats.bytes_published += len(record)
        except UNREACHABLE as exc:
            self.member.lost(publication, self._clock.now_ms())
            self._stats.publications_lost += 1
            self._failure = repr(exc)

    async def _follow(self) -> None:
        records = await self._own.read(int(self.member.sync_interval_ms))
        engine = self._context.quotas.engine
        started = time.thread_time()
        owners = self._owners
        for record in records:
            value = record.value or b""
            self._stats.bytes_read += len(value)
            try:
                if value[:1] == _TOTALS:
                    self._read_totals(value)
                    continue
                publication = decode(value)
            except ValueError as exc:
                log.warning(
                    "fleet %s: the record at offset %d skipped: %s", self.name, record.offset, exc
                )
                self.member.gaps.missed()
                continue
            now_ms = self._clock.now_ms()
            writer = publication.member
            if writer != self.member.member and through_owners(publication) != bool(owners):
                self._heard_other_kind(writer)
                continue
            reader = self.member if owners is None else owners.owning
            skipped = reader.receive(publication, engine, now_ms)
            self._counts.receive(publication, skipped, engine, now_ms)
        self._stats.cpu_seconds += time.thread_time() - started
        if records:
            self._report()

    def _read_totals(self, value: bytes) -> None:
        """An owner's totals: the others' use, or a member of owners heard by a straight
        one."""
        if self._owners is not None:
            self._owners.read_totals(value, self._clock.now_ms())
        else:
            self._heard_other_kind(decode_totals(value).owner)

    def _heard_other_kind(self, member: str) -> None:
        self._other_kind = member
        if self.member.membership.heard_other_kind(member, self._clock.now_ms()):
            log.error(
                "fleet %s: member %s shares its use the other way (through owners, or "
                "straight: [fleet] owners differs, or a release before owners): neither "
                "reads the other's, and each holds its share of every budget while the other "
                "is heard (docs/fleet.md#owners)",
                self.name,
                member,
            )

    def _report(self) -> None:
        self._reporting.report(self._clock.now_ms(), self._why_down)

    def _why_down(self, now_ms: int) -> str:
        return self._failure if self._owners is None else self._owners.failure(now_ms)
