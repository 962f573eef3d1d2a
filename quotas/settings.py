"""Broker-level quota settings, under the names Kafka brokers use for them."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from quotas.entities import QuotaEntity, QuotaType
from quotas.stats import MetricConfig

#: Kafka's defaults: 11 one-second samples, and one-hour samples for producer ids (KIP-936)
_DEFAULT_WINDOWS = MetricConfig(samples=11, window_ms=1000)
_DEFAULT_PRODUCER_ID_WINDOWS = MetricConfig(samples=11, window_ms=3_600_000)


@dataclass(frozen=True)
class ProducerIdCacheSettings:
    """KIP-936's producer.id.quota.cache.* settings for the layered Bloom filter."""

    cleanup_interval_ms: int = 10
    layer_count: int = 4
    false_positive_rate: float = 0.001


@dataclass(frozen=True)
class GuardSettings:
    """[guards.requests]: the token buckets of the request-rate guards and of the connection
    creation rate (docs/guards.md)."""

    #: a bucket holds this many seconds of its rate: the burst a principal may send at once
    burst_s: int = 10
    #: the longest throttle a guard answers with, and so the longest it mutes a connection:
    #: what keeps a group member's heartbeats within its session timeout
    max_throttle_ms: int = 1000
    #: (guard name, seconds): the guards whose bucket is not burst_s (QuotaType.guard_name)
    bursts: tuple[tuple[str, int], ...] = ()

    def windows(self, guard: QuotaType) -> MetricConfig:
        """A guard's bucket as KIP-599 sizes it: samples x window x rate."""
        return MetricConfig(
            samples=dict(self.bursts).get(guard.guard_name, self.burst_s), window_ms=1000
        )


@dataclass(frozen=True)
class QuotaSettings:
    #: quota.window.num x quota.window.size.seconds: Produce, Fetch, Request
    client: MetricConfig = _DEFAULT_WINDOWS
    #: controller.quota.window.num x controller.quota.window.size.seconds
    controller: MetricConfig = _DEFAULT_WINDOWS
    #: producer.id.quota.window.num x producer.id.quota.window.size.seconds (KIP-936)
    producer_ids: MetricConfig = _DEFAULT_PRODUCER_ID_WINDOWS
    producer_id_cache: ProducerIdCacheSettings = ProducerIdCacheSettings()
    guards: GuardSettings = GuardSettings()


#: quota type -> entity -> limit, as the config file declares them
QuotaLimits = Mapping[QuotaType, Mapping[QuotaEntity, float]]


@dataclass(frozen=True)
class QuotaConfig:
    settings: QuotaSettings = QuotaSettings()
    limits: QuotaLimits = field(default_factory=dict)
