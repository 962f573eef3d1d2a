"""Kafka's sampled statistics (Rate, Avg) and TokenBucket, with the broker's exact arithmetic.

This is Apache Kafka's SampledStat as of 3.8 (PR #15889): a ring of samples+1 samples, each
started by the first event after the previous one completed, purged when its last event falls
out of samples x window. Float sums run in slot order, as Java's do, so results are
bit-identical. Times are milliseconds from an injected clock; nothing here reads one.
See docs/kafka-quota-semantics.md sections 1 and 5.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from quotas.javamath import java_div, java_double_div


@dataclass(frozen=True, slots=True)
class MetricConfig:
    """Kafka's MetricConfig for one stat: how many samples of which length it keeps."""

    samples: int
    window_ms: int


#: Kafka's Metrics defaults (metrics.num.samples, metrics.sample.window.ms), used by the
#: stats that carry no quota: throttle-time, mutation-rate.
DEFAULT_METRIC_CONFIG = MetricConfig(samples=2, window_ms=30_000)

_NO_START = 2**63


class Sample:
    __slots__ = ("count", "last_event_ms", "start_ms", "value")

    def __init__(self, now_ms: int) -> None:
        self.reset(now_ms)

    def reset(self, now_ms: int) -> None:
        self.value = 0.0
        self.count = 0
        self.start_ms = now_ms
        self.last_event_ms = now_ms


class SampledStat:
    """WindowedSum (value) and WindowedCount (count) over a ring of samples+1 samples."""

    __slots__ = ("_current", "samples")

    def __init__(self) -> None:
        self.samples: list[Sample] = []
        self._current = 0

    def record(self, config: MetricConfig, value: float, now_ms: int) -> None:
        samples = self.samples
        if not samples:
            samples.append(Sample(now_ms))
        sample = samples[self._current]
        if now_ms - sample.start_ms >= config.window_ms:
            self._current = (self._current + 1) % (config.samples + 1)
            if self._current >= len(samples):
                sample = Sample(now_ms)
                samples.append(sample)
            else:
                sample = samples[self._current]
                sample.reset(now_ms)
        sample.value += value
        sample.count += 1
        sample.last_event_ms = now_ms

    def purge_and_sum(self, config: MetricConfig, now_ms: int) -> tuple[float, int, int]:
        """Purge obsolete samples; return (sum of values, sum of counts, oldest start)."""
        samples = self.samples
        if not samples:
            samples.append(Sample(now_ms))
        expire_age = config.samples * config.window_ms
        total = 0.0
        count = 0
        oldest_start = _NO_START
        for sample in samples:
            if now_ms - sample.last_event_ms >= expire_age:
                sample.reset(now_ms)
            total += sample.value
            count += sample.count
            if sample.start_ms < oldest_start:
                oldest_start = sample.start_ms
        return total, count, oldest_start


class Rate:
    """Kafka's Rate(SECONDS) over a WindowedSum: value per second over the elapsed window."""

    __slots__ = ("stat",)

    def __init__(self) -> None:
        self.stat = SampledStat()

    def record(self, config: MetricConfig, value: float, now_ms: int) -> None:
        self.stat.record(config, value, now_ms)

    def measure_with_window(self, config: MetricConfig, now_ms: int) -> tuple[float, int]:
        """(rate per second, window in ms); the window is also what throttle times scale by.

        While fewer than samples-1 whole windows have elapsed since the oldest sample began,
        the window is padded to that minimum, so a client's first burst is spread over ten
        seconds with Kafka's defaults rather than judged on its first millisecond.
        """
        total, _, oldest_start = self.stat.purge_and_sum(config, now_ms)
        elapsed = now_ms - oldest_start
        full_windows = java_div(elapsed, config.window_ms)
        min_full_windows = config.samples - 1
        if full_windows < min_full_windows:
            elapsed += (min_full_windows - full_windows) * config.window_ms
        return java_double_div(total, elapsed / 1000.0), elapsed

    def measure(self, config: MetricConfig, now_ms: int) -> float:
        return self.measure_with_window(config, now_ms)[0]


class Avg:
    """Kafka's Avg: mean of recorded values over the retained samples; NaN when empty."""

    __slots__ = ("stat",)

    def __init__(self) -> None:
        self.stat = SampledStat()

    def record(self, config: MetricConfig, value: float, now_ms: int) -> None:
        self.stat.record(config, value, now_ms)

    def measure(self, config: MetricConfig, now_ms: int) -> float:
        total, count, _ = self.stat.purge_and_sum(config, now_ms)
        return total / count if count else math.nan


class TokenBucket:
    """Kafka's TokenBucket (KIP-599): refills continuously at `quota` per unit, up to a burst
    of quota x samples x window; records may drive it negative, which is what throttles.

    Kafka's bucket starts at tokens=0, lastUpdate=0 and its first refill at an epoch
    timestamp fills it; starting full at creation is the same thing without assuming an
    epoch clock.
    """

    __slots__ = ("last_update_ms", "tokens")

    def __init__(self, burst: float, now_ms: int) -> None:
        self.tokens = burst
        self.last_update_ms = now_ms

    def refill(self, quota: float, burst: float, unit_ms: float, now_ms: int) -> float:
        self.tokens = min(burst, self.tokens + quota * ((now_ms - self.last_update_ms) / unit_ms))
        self.last_update_ms = now_ms
        return self.tokens

    def record(self, quota: float, burst: float, unit_ms: float, value: float, now_ms: int) -> None:
        self.refill(quota, burst, unit_ms, now_ms)
        self.tokens = min(burst, self.tokens - value)


def burst(config: MetricConfig, quota: float, unit_ms: float) -> float:
    """Kafka's evaluation order: samples * convert(window) * quota."""
    return config.samples * (config.window_ms / unit_ms) * quota
