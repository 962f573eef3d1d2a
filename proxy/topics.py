"""How many partitions each topic has, as the cluster last said, and how many a topic gets by
default: the base for counting partition mutations (KIP-599) without asking the broker on
every request."""

from __future__ import annotations

import uuid
from collections.abc import Iterable

from protocol.metadata import TopicPartitions


class TopicCache:
    """Fed by every Metadata response the proxy passes on or asks for itself; shared by all
    connections, since topics are the cluster's, not a client's."""

    def __init__(self) -> None:
        self._by_name: dict[str, TopicPartitions] = {}
        self._by_id: dict[uuid.UUID, TopicPartitions] = {}
        #: the brokers' node ids, to ask them for num.partitions
        self.broker_ids: list[int] = []
        #: num.partitions: what CreateTopics with num_partitions -1 creates; None = not asked
        self.default_partitions: int | None = None

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
        for topic_id in topic_ids:
            topic = self._by_id.pop(topic_id, None)
            if topic is not None and self._by_name.get(topic.name) is topic:
                del self._by_name[topic.name]

    def by_name(self, name: str) -> TopicPartitions | None:
        return self._by_name.get(name)

    def by_id(self, topic_id: uuid.UUID) -> TopicPartitions | None:
        return self._by_id.get(topic_id)
