"""Topic quotas: a topic's producer_byte_rate or consumer_byte_rate, shared by every
principal and client that writes or reads it (the entity KIP-1010 asks Kafka for).

A topic's sensors are Kafka's client byte-rate sensors, keyed by the topic instead of a
(user, client-id): the same Rate over the same quota windows, the same throttle arithmetic,
so a topic is held as a principal is. A topic with an entry of its own gets that limit;
every other topic gets the `<default>` entry's, each as a budget of its own (not one shared
by all of them); a topic with neither is not limited and records nothing.
"""

from __future__ import annotations

from collections.abc import Mapping

from quotas.entities import DEFAULT, MetricTags, QuotaEntity, QuotaType
from quotas.managers import UNLIMITED, ClientQuotaManager, ClientSensors
from quotas.stats import MetricConfig


def client_entities(limits: Mapping[QuotaEntity, float]) -> dict[QuotaEntity, float]:
    return {entity: limit for entity, limit in limits.items() if entity.topic is None}


def topic_limits(limits: Mapping[QuotaEntity, float]) -> dict[str, float]:
    """By topic name, or DEFAULT."""
    return {entity.topic: limit for entity, limit in limits.items() if entity.topic is not None}


def topic_limit(topics: Mapping[str, float], topic: str) -> float | None:
    """A topic's quota among topic_limits: its own, else the default topic's."""
    limit = topics.get(topic)
    return topics.get(DEFAULT) if limit is None else limit


class TopicQuotaManager(ClientQuotaManager):
    """One quota type's topic sensors; their metric tags are (topic, "")."""

    def __init__(
        self, quota_type: QuotaType, config: MetricConfig, limits: Mapping[QuotaEntity, float]
    ) -> None:
        super().__init__(quota_type, config, {})
        self._topics = topic_limits(limits)
        self.enabled = bool(self._topics)

    def sensors_of_topic(self, topic: str, now_ms: int) -> ClientSensors | None:
        """The topic's sensors; None when no quota limits it."""
        tags = (topic, "")
        sensors = self._sensors.get(tags)
        if sensors is None:
            if topic_limit(self._topics, topic) is None:
                return None
            sensors = self._sensors[tags] = self._new_sensors(tags, now_ms)
        return sensors

    def _limit(self, tags: MetricTags) -> float:
        limit = topic_limit(self._topics, tags[0])
        return UNLIMITED if limit is None else limit

    def update_limits(self, limits: Mapping[QuotaEntity, float]) -> None:
        """New limits on live sensors, keeping their history; a topic no longer limited
        keeps its sensors, unlimited, until they expire."""
        self._topics = topic_limits(limits)
        self.enabled = bool(self._topics)
        for tags, sensors in self._sensors.items():
            sensors.limit = self._limit(tags)
