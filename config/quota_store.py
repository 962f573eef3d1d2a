"""[quota_store]: the topic quotas altered through the proxy live in."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from config.values import typed_values
from quotas.validation import legal_topic


@dataclass(frozen=True)
class QuotaStoreSettings:
    """[quota_store]: the compacted topic on the cluster that quotas altered through the
    proxy (kafka-configs, the Admin API) live in, shared by every instance; "" keeps none,
    and such alterations are refused."""

    topic: str = ""


def parse_quota_store(section: dict[str, Any], problems: list[str]) -> QuotaStoreSettings:
    values = typed_values("quota_store", section, {"topic": (str,)}, problems)
    topic = values.get("topic", "")
    if topic and not legal_topic(topic):
        problems.append(
            f"[quota_store] key 'topic': {topic!r} is not a legal Kafka topic name "
            "(up to 249 of a-z A-Z 0-9 . _ -)"
        )
        topic = ""
    return QuotaStoreSettings(topic)
