"""How many partitions each topic has, as the cluster last said, and how many a topic gets by
default: the base for counting partition mutations (KIP-599) without asking the broker on
every request."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterable, Mapping
from typing import Final

from protocol.metadata import TopicPartitions

log = logging.getLogger(__name__)

#: how long a cluster that did not describe num.partitions is left alone before it is asked
#: again (it may lack the permission: asking on every request would only add round trips)
DEFAULT_PARTITIONS_RETRY_MS: Final = 60_000


class TopicCache:
    """Fed by every Metadata response the proxy passes on or asks for itself; shared by all
    connections, since topics are the cluster's, not a client's."""

    def __init__(self) -> None:
        self._by_name: dict[str, TopicPartitions] = {}
        self._by_id: dict[uuid.UUID, TopicPartitions] = {}
        #: the brokers' node ids, to ask them for num.partitions
        self.broker_ids: list[int] = []
        #: num.partitions: what CreateTopics with num_partitions -1 creates; None = not known
        self.default_partitions: int | None = None
        self._default_unanswered_ms: int | None = None

    def needs_default_partitions(self, now_ms: int) -> bool:
        """Whether num.partitions is worth asking for now."""
        if self.default_partitions is not None:
            return False
        last = self._default_unanswered_ms
        return last is None or now_ms - last >= DEFAULT_PARTITIONS_RETRY_MS

    def learn_default_partitions(self, count: int | None, now_ms: int) -> None:
        """The cluster's answer about num.partitions; None when it did not give one."""
        if count is not None:
            self.default_partitions = count
            return
        if self._default_unanswered_ms is None:
            log.warning(
                "the cluster did not describe num.partitions (DescribeConfigs on the brokers "
                "needs DESCRIBE_CONFIGS on the cluster): a topic created with -1 partitions "
                "counts as 1 partition mutation; asked again every %d s",
                DEFAULT_PARTITIONS_RETRY_MS // 1000,
            )
        self._default_unanswered_ms = now_ms

    def learn(self, topics: Iterable[TopicPartitions]) -> None:
        for topic in topics:
            old = self._by_name.get(topic.name)
            if old is not None and old.topic_id is not None:
                if topic.topic_id is None:  # an older Metadata version names no id
                    topic = topic._replace(topic_id=old.topic_id)
                elif topic.topic_id != old.topic_id:  # deleted and created again
                    self._by_id.pop(old.topic_id, None)
            self._by_name[topic.name] = topic
            if topic.topic_id is not None:
                self._by_id[topic.topic_id] = topic

    def forget(self, names: Iterable[str]) -> None:
        """Topics the cluster says do not exist (deleted, or never created)."""
        for name in names:
            topic = self._by_name.pop(name, None)
            if topic is not None and topic.topic_id is not None:
                self._by_id.pop(topic.topic_id, None)

    def forget_ids(self, topic_ids: Iterable[uuid.UUID]) -> None:
        """Topic ids the cluster says do not exist."""
        for topic_id in topic_ids:
            topic = self._by_id.pop(topic_id, None)
            if topic is not None and self._by_name.get(topic.name) is topic:
                del self._by_name[topic.name]

    def named(self, sizes: Mapping[str | uuid.UUID, int]) -> dict[str, int]:
        """Sizes by topic name: v13+ Produce and Fetch name topics by id, which this cache
        maps back (a client reads and writes only topics it has the metadata of, which
        came through the proxy). An id not known yet is left out."""
        named: dict[str, int] = {}
        for topic, size in sizes.items():
            if isinstance(topic, uuid.UUID):
                known = self._by_id.get(topic)
                if known is None:
                    continue
                topic = known.name
            named[topic] = named.get(topic, 0) + size
        return named

    def by_name(self, name: str) -> TopicPartitions | None:
        return self._by_name.get(name)

    def by_id(self, topic_id: uuid.UUID) -> TopicPartitions | None:
        return self._by_id.get(topic_id)
