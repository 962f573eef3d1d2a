"""The owners' topic of a fleet (issue 51; proxy/enforcement/fleet_owners.py): PARTITIONS
partitions that the members write their contributions to, each read by its owner alone.

Which member owns which partition is Kafka's group assignment: every member joins one group
on the topic with an assignor of its own, whose metadata is the member's name in the fleet
and what it owns, and whose leader gives each member its partitions (fleet_owners.owners)
and everyone the group's members in order (a member's place, its bits in the totals). A
member killed is out of the group after the broker's session timeout; the next generation
gives its partitions to the others.

The group's generation is read from aiokafka's coordinator, which keeps it private
(`_coordinator.generation`): aiokafka is pinned, and tests/integration/test_fleet_owners.py
fails if that changes.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final, NamedTuple

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, ConsumerRebalanceListener
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.cluster import ClusterMetadata
from aiokafka.coordinator.assignors.abstract import AbstractPartitionAssignor
from aiokafka.coordinator.protocol import (
    ConsumerProtocolMemberAssignment,
    ConsumerProtocolMemberMetadata,
)
from aiokafka.errors import KafkaError
from aiokafka.structs import ConsumerRecord, TopicPartition

from config.cluster import ClusterSettings
from protocol.fleet_records import decode_member, encode_member
from proxy.control.own_topic import create_topic
from proxy.enforcement.fleet_owners import PARTITIONS, owners
from proxy.runtime.clock import wall_ms

#: the broker's least session timeout by default (group.min.session.timeout.ms): a member
#: killed leaves the group, and its partitions get an owner, this long after
SESSION_TIMEOUT_MS: Final = 6_000
HEARTBEAT_MS: Final = 500
#: the name of the assignor in the group protocol: every member of the group has it
ASSIGNOR: Final = "kafka-quota-proxy-owners"


class Group(NamedTuple):
    """The group as this member was last assigned it."""

    #: the members' names in the fleet, in order: a member's place is its index
    order: list[str]
    #: the partitions this member owns
    owned: list[int]
    generation: int


class _Assignment:
    """What the assignor of one member knows: its name, what it owns, and the order its
    leader sent last."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.owned: list[int] = []
        self.order: list[str] = []


def _assignor(topic: str, state: _Assignment) -> type[AbstractPartitionAssignor]:
    """An assignor class of this member's own: aiokafka calls an assignor's methods on its
    class, and the metadata must carry this member's name."""

    class Owners(AbstractPartitionAssignor):  # type: ignore[misc]
        name = ASSIGNOR
        version = 0

        @classmethod
        def metadata(cls, topics: Iterable[str]) -> ConsumerProtocolMemberMetadata:
            return ConsumerProtocolMemberMetadata(
                0, sorted(topics), encode_member(state.name, state.owned)
            )

        @classmethod
        def assign(
            cls, cluster: ClusterMetadata, members: Mapping[str, ConsumerProtocolMemberMetadata]
        ) -> dict[str, ConsumerProtocolMemberAssignment]:
            names = {
                member_id: decode_member(metadata.user_data)
                for member_id, metadata in members.items()
            }
            partitions = len(cluster.partitions_for_topic(topic) or ()) or PARTITIONS
            owned = owners(dict(names.values()), partitions)
            order = "\n".join(sorted(owned)).encode()
            return {
                member_id: ConsumerProtocolMemberAssignment(0, [(topic, owned[name])], order)
                for member_id, (name, _) in names.items()
            }

        @classmethod
        def on_assignment(cls, assignment: ConsumerProtocolMemberAssignment) -> None:
            state.order = assignment.user_data.decode().split("\n")
            state.owned = sorted(tp.partition for tp in assignment.partitions())

    return Owners


class OwnersTopic(ConsumerRebalanceListener):  # type: ignore[misc]
    def __init__(
        self,
        topic: str,
        name: str,
        cluster: ClusterSettings,
        servers: Sequence[str],
        configs: Mapping[str, str],
        read_back_ms: int,
    ) -> None:
        self.topic = topic
        self._cluster = cluster
        self._servers = list(servers)
        self._configs = dict(configs)
        #: how far back a partition newly owned is read: contributions sent to it in this
        #: generation before this member was told it owns it
        self._read_back_ms = read_back_ms
        self._state = _Assignment(name)
        #: the group as last assigned; None before it is joined
        self.group: Group | None = None
        #: an assignment not yet read back: the group it makes, and its partitions
        self._assigned: tuple[Group, list[TopicPartition]] | None = None
        self._producer: AIOKafkaProducer | None = None
        self._consumer: AIOKafkaConsumer | None = None

    @property
    def is_open(self) -> bool:
        return self._consumer is not None

    def renew(self, cluster: ClusterSettings) -> None:
        self._cluster = cluster

    async def open(self) -> None:
        """Make the topic if it is missing, and join the group (its assignment comes as
        the consumer is read)."""
        options = self._cluster.aiokafka_options()
        common: dict[str, Any] = {
            "bootstrap_servers": self._servers,
            "client_id": "kafka-quota-proxy-fleet",
            **options,
        }
        admin = AIOKafkaAdminClient(**common)
        try:
            await admin.start()
            await create_topic(admin, self.topic, PARTITIONS, self._configs)
        finally:
            await admin.close()
        producer = self._producer = AIOKafkaProducer(
            **common, acks=1, linger_ms=0, request_timeout_ms=5_000
        )
        await producer.start()
        partitions = len(await producer.partitions_for(self.topic))
        if partitions != PARTITIONS:
            raise KafkaError(
                f"the topic {self.topic} has {partitions} partitions, not {PARTITIONS}: delete "
                "it with the fleet stopped (it holds nothing that outlives a few intervals), "
                "and the first member makes it again"
            )
        consumer = self._consumer = AIOKafkaConsumer(
            **common,
            group_id=self.topic,
            enable_auto_commit=False,
            auto_offset_reset="latest",
            partition_assignment_strategy=(_assignor(self.topic, self._state),),
            session_timeout_ms=SESSION_TIMEOUT_MS,
            heartbeat_interval_ms=HEARTBEAT_MS,
        )
        await consumer.start()
        consumer.subscribe([self.topic], listener=self)

    async def close(self) -> None:
        consumer, producer = self._consumer, self._producer
        self._consumer = self._producer = None
        self.group = self._assigned = None
        if consumer is not None:
            await consumer.stop()
        if producer is not None:
            await producer.stop()

    async def read(self, timeout_ms: int) -> list[ConsumerRecord[bytes, bytes]]:
        """The contributions to the partitions this member owns that arrive within
        `timeout_ms` (the group's heartbeats and rebalances go on meanwhile)."""
        consumer = self._opened(self._consumer)
        if self._assigned is not None:
            await self._read_back(consumer, *self._assigned)
        batches = await consumer.getmany(timeout_ms=timeout_ms)
        return [record for records in batches.values() for record in records]

    async def reach(self, partition: int) -> None:
        """Ask the cluster for the end of one of the topic's partitions: it answers a member
        that is not cut off from it."""
        await self._opened(self._consumer).end_offsets([TopicPartition(self.topic, partition)])

    async def send(self, partition: int, key: bytes, value: bytes) -> None:
        await self._opened(self._producer).send_and_wait(
            self.topic, value, key=key, partition=partition
        )

    async def _read_back(
        self, consumer: AIOKafkaConsumer, group: Group, assigned: list[TopicPartition]
    ) -> None:
        """Each partition newly owned read from _read_back_ms ago (a contribution of the
        generation may be there already); then the group holds. An assignment that comes
        meanwhile is read back at the next read, and a partition it took away is left."""
        since = wall_ms() - self._read_back_ms
        found = await consumer.offsets_for_times({tp: since for tp in assigned})
        ends = await consumer.end_offsets([tp for tp in assigned if found.get(tp) is None])
        if self._assigned is None or self._assigned[0] is not group:
            return
        for tp in assigned:
            offset = found.get(tp)
            consumer.seek(tp, ends[tp] if offset is None else offset.offset)
        self.group = group
        self._assigned = None

    # ConsumerRebalanceListener: aiokafka waits for these within its rebalance, in which a
    # consumer's offsets cannot be asked for

    async def on_partitions_revoked(self, revoked: list[TopicPartition]) -> None:
        """The previous group holds until the next is assigned: a contribution sent to an
        owner that has left is sent again to the next one."""

    async def on_partitions_assigned(self, assigned: list[TopicPartition]) -> None:
        """The assignor's state, the partitions and the generation, taken together."""
        state = self._state
        generation = self._opened(self._consumer)._coordinator.generation
        group = Group(list(state.order), list(state.owned), generation)
        self._assigned = (group, list(assigned))

    def _opened(self, client: Any) -> Any:
        if client is None:
            raise KafkaError(f"the topic {self.topic} is not open")
        return client
