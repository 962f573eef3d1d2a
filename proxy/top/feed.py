"""What `kafka-quota-proxy top` reads from the cluster, as any Kafka client with read access:
the usage samples topic ([usage] kafka_topic), the fleet's bus and the quota store topic. It
only reads: nothing is made, committed or written, and a topic it cannot read is named in
`problems` with what the view shows instead.
"""

from __future__ import annotations

import logging
import struct
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Final

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.coordinator.protocol import ConsumerProtocolMemberMetadata
from aiokafka.structs import ConsumerRecord

from config.cluster import ClusterSettings
from config.fleet import FLEET_TOPIC_PREFIX, OWNERS_SUFFIX
from protocol.fleet_records import TOTALS, Publication, Totals, decode, decode_member, decode_totals
from proxy.control.own_topic import UNREACHABLE
from proxy.top.view import LiveView
from quotas.admin import Changes
from quotas.entities import QuotaEntity
from quotas.settings import QuotaSettings
from quotas.store import ALTERED, QuotaStore
from quotas.usage_samples import UsageSample
from quotas.validation import record_change

log = logging.getLogger(__name__)


@dataclass
class Update:
    samples: list[UsageSample] = field(default_factory=list)
    publications: list[Publication] = field(default_factory=list)
    totals: list[Totals] = field(default_factory=list)
    #: the members of a fleet of owners' group, when it was described (None: not now)
    members: list[str] | None = None
    #: records of any topic that could not be read (malformed), skipped
    skipped: int = 0
    #: quota records were read: the store changed
    quotas: bool = False


#: how often the owners' group is described: more often than a member is gone (GONE_MS)
DESCRIBE_EVERY_MS: Final = 2_000
#: how a running count of malformed records reads in the problems
_SKIPPED: Final = " records skipped: not what their topic's writer writes"


class LiveFeed:
    def __init__(
        self,
        cluster: ClusterSettings,
        servers: Sequence[str],
        usage_topic: str,
        quota_topic: str,
        fleet: str,
        store: QuotaStore,
        read_back_s: float = 20.0,
        settings: QuotaSettings | None = None,
        config_file: str = "",
    ) -> None:
        self._cluster = cluster
        #: the cluster's bootstrap servers
        self.servers = list(servers)
        self.usage_topic = usage_topic
        self.quota_topic = quota_topic
        self.fleet_topic = f"{FLEET_TOPIC_PREFIX}{fleet}" if fleet else ""
        #: the quotas in force: altered ones are applied to it as they are read
        self.store = store
        #: the quota windows, and the file the store's file layer came from: what a
        #: principal's detail explains with
        self.settings = QuotaSettings() if settings is None else settings
        self.config_file = config_file
        #: when the owners' group was last described (the reader's clock, ms)
        self._described_ms: int | None = None
        #: how far back the samples are read at the start: the span the rates average over
        #: and one sampling interval
        self.read_back_s = read_back_s
        #: what cannot be read, each said with what the view shows instead
        self.problems: list[str] = []
        self._consumer: AIOKafkaConsumer | None = None
        #: the ends of the samples' and quotas' partitions when the feed started
        self._ends: dict[TopicPartition, int] = {}
        #: a read failed: caught_up() waits for nothing more
        self.failed = False
        #: records skipped as malformed, of any topic
        self.skipped = 0

    async def start(self, since_ms: int) -> None:
        """Samples from `since_ms` (the broker's clock) on, the bus from its end, the quota
        store from its start. Raises what UNREACHABLE names when the cluster cannot be
        reached at all."""
        consumer = self._consumer = AIOKafkaConsumer(
            bootstrap_servers=self.servers,
            client_id="kafka-quota-proxy-top",
            enable_auto_commit=False,
            **self._cluster.aiokafka_options(),
        )
        await consumer.start()
        partitions_of = await self._partitions()
        topics = set(partitions_of)
        if not self.fleet_topic:
            fleets = sorted(t for t in topics if t.startswith(FLEET_TOPIC_PREFIX))
            if len(fleets) == 1:
                self.fleet_topic = fleets[0]
            elif fleets:
                self.problems.append(
                    f"several fleets ({', '.join(fleets)}): name one with --fleet; "
                    "members are not shown"
                )
            else:
                self.problems.append("no fleet's bus: members are known only from the samples")
        wanted = (
            (
                self.usage_topic,
                "usage samples: no principal is shown (name it with --usage-topic, as the"
                " proxies' [usage] kafka_topic)",
            ),
            (self.quota_topic, "altered quotas: only a --config file's quotas are shown"),
            (self.fleet_topic, "the fleet's bus: members are known only from the samples"),
        )
        assigned: dict[str, list[TopicPartition]] = {}
        for topic, instead in wanted:
            if not topic:  # none named ([quota_store] without a topic; no fleet found)
                continue
            partitions = partitions_of.get(topic)
            if not partitions:
                self.problems.append(f"no topic {topic} readable for {instead}")
                continue
            assigned[topic] = [TopicPartition(topic, p) for p in sorted(partitions)]
        consumer.assign([tp for tps in assigned.values() for tp in tps])
        kept = [
            tp for topic in (self.usage_topic, self.quota_topic) for tp in assigned.get(topic, ())
        ]
        self._ends = dict(await consumer.end_offsets(kept)) if kept else {}
        for topic, partitions in assigned.items():
            if topic == self.usage_topic:
                found = await consumer.offsets_for_times(dict.fromkeys(partitions, since_ms))
                for partition, offset in found.items():
                    if offset is None:
                        await consumer.seek_to_end(partition)
                    else:
                        consumer.seek(partition, offset.offset)
            elif topic == self.quota_topic:
                await consumer.seek_to_beginning(*partitions)
            else:
                await consumer.seek_to_end(*partitions)

    async def _partitions(self) -> dict[str, list[int]]:
        """Every topic this client may describe, with its partitions (the consumer's own
        metadata holds only the topics it already reads)."""
        admin = AIOKafkaAdminClient(
            bootstrap_servers=self.servers,
            client_id="kafka-quota-proxy-top",
            **self._cluster.aiokafka_options(),
        )
        await admin.start()
        try:
            described = await admin.describe_topics()
        finally:
            await admin.close()
        found: dict[str, list[int]] = {}
        for topic in described:  # aiokafka's Metadata response, as an object
            if topic["error_code"] == 0:
                found[topic["topic"]] = [p["partition"] for p in topic["partitions"]]
        return found

    async def _owners_group(self) -> list[str]:
        """The members of the fleet's owners' group, which an idle member of owners is known
        by (it publishes nothing): none for a straight fleet, or when the group cannot be
        described."""
        admin = AIOKafkaAdminClient(
            bootstrap_servers=self.servers,
            client_id="kafka-quota-proxy-top",
            **self._cluster.aiokafka_options(),
        )
        try:
            await admin.start()
            described = await admin.describe_consumer_groups([self.fleet_topic + OWNERS_SUFFIX])
        except UNREACHABLE:
            return []
        finally:
            await admin.close()
        names = []
        for response in described:
            for group in response.groups:
                for member in group[5]:  # ..., metadata, assignment (in every version)
                    try:
                        metadata = ConsumerProtocolMemberMetadata.decode(member[-2])
                        names.append(decode_member(metadata.user_data)[0])
                    except (ValueError, TypeError, IndexError, struct.error):
                        continue
        return names

    async def caught_up(self) -> bool:
        """Whether every sample and quota that was there at the start has been read."""
        consumer = self._consumer
        if consumer is None or self.failed:
            return True
        for partition, end in self._ends.items():
            if await consumer.position(partition) < end:
                return False
        return True

    async def poll(self, timeout_ms: int) -> Update:
        update = Update()
        consumer = self._consumer
        if consumer is None:
            return update
        try:
            batches = await consumer.getmany(timeout_ms=timeout_ms)
        except UNREACHABLE as exc:
            # refused (not authorized to read) or unreachable: said once, and nothing more
            # is waited for
            problem = f"the cluster cannot be read now: {exc!r}"
            if problem not in self.problems:
                log.warning("%s", problem)
                self.problems.append(problem)
            self.failed = True
            return update
        changes: dict[QuotaEntity, Changes] = {}
        set_at: dict[tuple[QuotaEntity, str], int] = {}
        for partition, records in batches.items():
            for record in records:
                try:
                    self._route(partition.topic, record, update, changes, set_at)
                except Exception:  # any record a writer got wrong is skipped, never fatal
                    update.skipped += 1
        if changes:
            self.store.alter_many(ALTERED, changes, set_at)
            update.quotas = True
        if self.fleet_topic and (
            self._described_ms is None or now_ms() - self._described_ms >= DESCRIBE_EVERY_MS
        ):
            self._described_ms = now_ms()
            update.members = await self._owners_group()
        if update.skipped:
            self._skipped(update.skipped)
        return update

    def _skipped(self, count: int) -> None:
        """Records no writer could have meant, said in the problems as a running count."""
        self.skipped += count
        self.problems[:] = [p for p in self.problems if not p.endswith(_SKIPPED)]
        self.problems.append(f"{self.skipped}{_SKIPPED}")

    def _route(
        self,
        topic: str,
        record: ConsumerRecord[bytes, bytes],
        update: Update,
        changes: dict[QuotaEntity, Changes],
        set_at: dict[tuple[QuotaEntity, str], int],
    ) -> None:
        value = record.value
        if topic == self.usage_topic:
            if value is None:
                raise ValueError("an empty sample")
            update.samples.append(UsageSample.from_json(value))
        elif topic == self.fleet_topic:
            if value is None:
                raise ValueError("an empty publication")
            if value[:1] == bytes([TOTALS]):
                update.totals.append(decode_totals(value))
            else:
                update.publications.append(decode(value))
        elif topic == self.quota_topic:
            entity, quota_key, number = record_change(record.key, value)
            changes.setdefault(entity, {})[quota_key] = number
            set_at[(entity, quota_key)] = record.timestamp

    async def close(self) -> None:
        if self._consumer is not None:
            await self._consumer.stop()
            self._consumer = None


def now_ms() -> int:
    """The reader's clock for the bus's publications (members' clocks do not compare)."""
    return int(time.monotonic() * 1000)


def view_of(feed: LiveFeed) -> LiveView:
    """A view of what the feed reads, with the quotas it starts from (a --config file's)."""
    view = LiveView()
    view.set_quotas(feed.store.limits())
    return view


def feed_view(view: LiveView, feed: LiveFeed, update: Update) -> None:
    """An update of the feed into the view: samples, members, and the quotas once quota
    records changed them (a backlog's thousands of records are applied to the view once)."""
    if update.quotas:
        view.set_quotas(feed.store.limits())
    view.add(update.samples)
    received = now_ms()
    for publication in update.publications:
        view.add_publication(publication, received)
    for totals in update.totals:
        view.add_totals(totals, received)
    if update.members is not None:
        view.add_members(update.members, received)
    view.expire(int(time.time() * 1000), received)  # samples carry the wall clock
