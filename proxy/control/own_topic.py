"""A one-partition topic of the proxy's own on the cluster it fronts: made when missing,
written and followed with the proxy's own client ([cluster]).

The quota store (proxy/control/quota_topic.py) and a fleet's bus (proxy/control/fleet_bus.py)
each keep one; what they keep in it, and how they recover when it is lost, is theirs. Every
failure is a KafkaError, an OSError, a TimeoutError or a SecretError (the [cluster] password
could not be read), which callers treat alike: the topic cannot be reached now.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final, TypeVar

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import KafkaError, TopicAlreadyExistsError, for_code
from aiokafka.structs import ConsumerRecord

from config.cluster import ClusterSettings
from config.secrets import SecretError

#: what callers catch: the topic cannot be reached now
UNREACHABLE: Final = (KafkaError, OSError, TimeoutError, SecretError)
#: replicas of the topic when the cluster has the brokers for them
_REPLICAS: Final = 3
#: how long a topic that failed is left before it is opened again
RETRY_S: Final = 1.0

_Client = TypeVar("_Client")


class OwnTopic:
    def __init__(
        self,
        topic: str,
        cluster: ClusterSettings,
        servers: Sequence[str],
        client_id: str,
        configs: Mapping[str, str],
        producer: Mapping[str, Any],
    ) -> None:
        self.topic = topic
        self.partition = TopicPartition(topic, 0)
        self._cluster = cluster
        self._servers = list(servers)
        self._client_id = client_id
        #: the topic's configs when it is made (cleanup.policy, retention.ms, ...)
        self._configs = dict(configs)
        #: the producer's settings (acks, batch size, ...)
        self._producer_options = dict(producer)
        self._admin: AIOKafkaAdminClient | None = None
        self._producer: AIOKafkaProducer | None = None
        self._consumer: AIOKafkaConsumer | None = None
        #: the settings changed since the clients were made (see renew)
        self._renewed = False

    @property
    def is_open(self) -> bool:
        return self._consumer is not None

    @property
    def renewed(self) -> bool:
        return self._renewed

    def renew(self, cluster: ClusterSettings) -> None:
        """A reload renewed the [cluster] files or credentials: aiokafka keeps the context
        and password it was made with for every connection it opens, so the owner closes
        the clients at its next turn and opens them again with these (a connection that
        keeps the old certificate fails once that expires, until a restart)."""
        self._cluster = cluster
        self._renewed = True

    async def open(self) -> bool:
        """Connect, making the topic if it is missing; True when this call made it (its
        owner may have something to put back). The consumer is assigned the partition,
        positioned by the caller (seek_to_beginning, seek_to_time)."""
        self._renewed = False
        options = self._cluster.aiokafka_options()
        common = {"bootstrap_servers": self._servers, "client_id": self._client_id, **options}
        admin = self._admin = AIOKafkaAdminClient(**common)
        await admin.start()
        created = await create_topic(admin, self.topic, 1, self._configs)
        producer = self._producer = AIOKafkaProducer(**common, **self._producer_options)
        await producer.start()
        consumer = self._consumer = AIOKafkaConsumer(**common, enable_auto_commit=False)
        await consumer.start()
        consumer.assign([self.partition])
        return created

    async def close(self) -> None:
        consumer, producer, admin = self._consumer, self._producer, self._admin
        self._consumer = self._producer = self._admin = None
        if consumer is not None:
            await consumer.stop()
        if producer is not None:
            await producer.stop()
        if admin is not None:
            await admin.close()

    async def exists(self) -> bool:
        return self.topic in await self._opened(self._admin).list_topics()

    # reading -------------------------------------------------------------------------------

    async def seek_to_beginning(self) -> None:
        await self._opened(self._consumer).seek_to_beginning(self.partition)

    async def seek_to_end(self) -> None:
        await self._opened(self._consumer).seek_to_end(self.partition)

    async def seek_to_time(self, time_ms: int) -> None:
        """The first record written at or after `time_ms` (the broker's clock), or the end."""
        consumer = self._opened(self._consumer)
        found = (await consumer.offsets_for_times({self.partition: time_ms}))[self.partition]
        if found is None:
            await consumer.seek_to_end(self.partition)
        else:
            consumer.seek(self.partition, found.offset)

    async def end_offset(self) -> int:
        consumer = self._opened(self._consumer)
        return int((await consumer.end_offsets([self.partition]))[self.partition])

    async def position(self) -> int:
        return int(await self._opened(self._consumer).position(self.partition))

    async def read(self, timeout_ms: int) -> list[ConsumerRecord[bytes, bytes]]:
        """The records that arrive within `timeout_ms` (none is not an error)."""
        consumer = self._opened(self._consumer)
        batches = await consumer.getmany(self.partition, timeout_ms=timeout_ms)
        return list(batches.get(self.partition, ()))

    # writing -------------------------------------------------------------------------------

    async def append(self, records: Sequence[tuple[bytes | None, bytes | None]]) -> int:
        """The records as one batch (all written or none); the offset of the last."""
        producer = self._opened(self._producer)
        batch = producer.create_batch()
        for key, value in records:
            if batch.append(key=key, value=value, timestamp=None) is None:
                raise KafkaError(f"{len(records)} records do not fit one batch")
        delivered = await producer.send_batch(batch, self.topic, partition=0)
        return int((await delivered).offset) + len(records) - 1

    async def send(self, value: bytes) -> None:
        """One record, acknowledged as the producer's acks say."""
        await self._opened(self._producer).send_and_wait(self.topic, value, partition=0)

    def _opened(self, client: _Client | None) -> _Client:
        if client is None:
            raise KafkaError(f"the topic {self.topic} is not open")
        return client


async def create_topic(
    admin: AIOKafkaAdminClient, topic: str, partitions: int, configs: Mapping[str, str]
) -> bool:
    """The topic made, of this many partitions, if it is missing; True when this call made
    it (another instance may have made it first)."""
    if topic in await admin.list_topics():
        return False
    brokers = len((await admin.describe_cluster())["brokers"])
    new = NewTopic(
        topic,
        num_partitions=partitions,
        replication_factor=max(1, min(_REPLICAS, brokers)),
        topic_configs=dict(configs),
    )
    response = await admin.create_topics([new])
    for _name, code, *message in response.topic_errors:
        if code == TopicAlreadyExistsError.errno:  # another instance made it first
            return False
        if code:
            error = for_code(code)
            raise error(f"creating the topic {topic}: {message[0] if message else ''}")
    return True
