"""Kafka's sampled statistics (Rate, Avg) and TokenBucket, with the broker's exact arithmetic.

This is Apache Kafka's SampledStat as of 3.8 (PR #15889): a ring of samples+1 samples, each
started by the first event after the previous one completed, purged when its last event falls
out of samples x window. Sums are Java's to the bit (see SampledStat). Times are milliseconds
from an injected clock; nothing here reads one.
See docs/kafka-quota-semantics.md sections 1 and 5.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import reduce
from operator import add

#: Java's `for (Sample s : samples) total += s.value`: a plain left-to-right add, which
#: sum() is in C until Python 3.12 and compensated (so different in the last bits) after
slot_order_sum: Callable[[Iterable[float]], float]
if sys.version_info < (3, 12):
    slot_order_sum = sum
else:

    def slot_order_sum(values: Iterable[float]) -> float:
        return reduce(add, values, 0.0)


@dataclass(frozen=True, slots=True)
class MetricConfig:
    """Kafka's MetricConfig for one stat: how many samples of which length it keeps."""

    samples: int
    window_ms: int


#: Kafka's Metrics defaults (metrics.num.samples, metrics.sample.window.ms), used by the
#: stats that carry no quota: throttle-time, mutation-rate.
DEFAULT_METRIC_CONFIG = MetricConfig(samples=2, window_ms=30_000)


class SampledStat:
    """A WindowedSum over a ring of samples+1 samples (Avg adds the WindowedCount).

    The samples are kept as parallel lists rather than objects so that a window sum, when
    one is needed, runs a left-to-right add in C: it must be added in slot order, exactly as
    Java does, to stay bit-identical (see slot_order_sum).

    A running total is kept beside the samples and stands in for that sum while every value
    recorded is a whole number: byte counts, mutations and producer ids are, and their sums
    are exact in a double in any order (below 2^53, some petabytes per quota window), so the
    total is the very number Java's slot-order loop would give. Request time is fractional
    and is summed in slot order.

    Measuring needs the oldest sample's start and, to purge, its oldest last event. A slot's
    times only change when it is recorded into, started or reset, at most once per window
    for a start, so both are kept rather than scanned for on every request: the oldest start
    exactly (found again only after the slot holding it is reset), the oldest event as a
    lower bound (lowered by every write, so it stays one even if a clock steps back).
    """

    __slots__ = (
        "_current",
        "_expired",
        "_integral",
        "_oldest_event_ms",
        "_oldest_start_ms",
        "_total",
        "last_events_ms",
        "starts_ms",
        "values",
    )

    def __init__(self) -> None:
        self.starts_ms: list[int] = []
        self.last_events_ms: list[int] = []
        self.values: list[float] = []
        self._current = 0
        #: min(starts_ms), or None until it is needed again
        self._oldest_start_ms: int | None = None
        #: at most min(last_events_ms)
        self._oldest_event_ms = -(2**62)
        #: the sum of values, exact while _integral
        self._total = 0.0
        #: what samples held when they were reset: with _total, all ever recorded
        self._expired = 0.0
        #: every value ever recorded was a whole number
        self._integral = True

    def _append(self, now_ms: int) -> None:
        self.starts_ms.append(now_ms)
        self.last_events_ms.append(now_ms)
        self.values.append(0.0)
        oldest = self._oldest_start_ms
        if oldest is not None and now_ms < oldest:
            self._oldest_start_ms = now_ms
        if now_ms < self._oldest_event_ms:
            self._oldest_event_ms = now_ms

    def _reset(self, index: int, now_ms: int) -> None:
        starts = self.starts_ms
        oldest = self._oldest_start_ms
        if oldest is not None and (starts[index] == oldest or now_ms < oldest):
            self._oldest_start_ms = None if starts[index] == oldest else now_ms
        starts[index] = now_ms
        self.last_events_ms[index] = now_ms
        self._total -= self.values[index]
        self._expired += self.values[index]
        self.values[index] = 0.0
        if now_ms < self._oldest_event_ms:
            self._oldest_event_ms = now_ms

    def record(self, config: MetricConfig, value: float, now_ms: int) -> None:
        if not self.values:
            self._append(now_ms)
        current = self._current
        if now_ms - self.starts_ms[current] >= config.window_ms:
            current = self._current = (current + 1) % (config.samples + 1)
            if current >= len(self.values):
                self._append(now_ms)
            else:
                self._reset(current, now_ms)
        self._add(current, value, now_ms)

    def _add(self, current: int, value: float, now_ms: int) -> None:
        self.values[current] += value
        self.last_events_ms[current] = now_ms
        self._total += value
        if value % 1.0 and self._integral:
            self._integral = False  # also for NaN and infinities, whose remainder is NaN
        if now_ms < self._oldest_event_ms:
            self._oldest_event_ms = now_ms

    def purge(self, config: MetricConfig, now_ms: int) -> None:
        """Reset samples with no event in the last samples x window (Kafka >= 3.8)."""
        if not self.values:
            self._append(now_ms)
        expire_age = config.samples * config.window_ms
        if now_ms - self._oldest_event_ms < expire_age:
            return  # no sample can be that old
        last_events = self.last_events_ms
        if now_ms - min(last_events) >= expire_age:
            for index, last_event in enumerate(last_events):
                if now_ms - last_event >= expire_age:
                    self._reset(index, now_ms)
        self._oldest_event_ms = min(last_events)

    def recorded(self) -> float:
        """Everything ever recorded, expired samples included: a sensor's use between two
        readings is their difference, with nothing added to the per-record path."""
        return self._total + self._expired

    def total(self) -> float:
        """The values summed in slot order, as Java's SampledStat.combine adds them."""
        if self._integral:
            return self._total
        return slot_order_sum(self.values)


class Rate(SampledStat):
    """Kafka's Rate(SECONDS) over a WindowedSum: value per second over the elapsed window."""

    __slots__ = ()

    def measure_with_window(self, config: MetricConfig, now_ms: int) -> tuple[float, int]:
        """(rate per second, window in ms); the window is also what throttle times scale by.

        While fewer than samples-1 whole windows have elapsed since the oldest sample began,
        the window is padded to that minimum, so a client's first burst is spread over ten
        seconds with Kafka's defaults rather than judged on its first millisecond.
        """
        self.purge(config, now_ms)
        window_ms = config.window_ms
        oldest = self._oldest_start_ms
        if oldest is None:
            oldest = self._oldest_start_ms = min(self.starts_ms)
        elapsed = now_ms - oldest
        # Java's long division truncates toward zero (elapsed < 0 if a clock stepped back)
        full_windows = elapsed // window_ms if elapsed >= 0 else -(-elapsed // window_ms)
        min_full_windows = config.samples - 1
        if full_windows < min_full_windows:
            elapsed += (min_full_windows - full_windows) * window_ms
        # Kafka >= 3.4 floors the window at 1 ms: with quota.window.num = 1 a request at the
        # very start of a window would otherwise measure an infinite (or NaN) rate
        elapsed = max(elapsed, 1)
        return self.total() / (elapsed / 1000.0), elapsed

    def measure(self, config: MetricConfig, now_ms: int) -> float:
        return self.measure_with_window(config, now_ms)[0]

    def record_and_measure(
        self, config: MetricConfig, value: float, now_ms: int
    ) -> tuple[float, int]:
        """Sensor.record with quota check: record, then measure (the hot path).

        The same steps as record() then measure_with_window(), with the common case (the
        current sample still open, nothing to purge, the window past its padding) taken in
        one frame: every produced and fetched byte and every request passes here.
        """
        current = self._current
        window_ms = config.window_ms
        values = self.values
        if not values or now_ms - self.starts_ms[current] >= window_ms:
            self.record(config, value, now_ms)
            return self.measure_with_window(config, now_ms)
        # _add, inline: this is the one call every charged request makes
        values[current] += value
        self.last_events_ms[current] = now_ms
        total = self._total = self._total + value
        if value % 1.0 and self._integral:
            self._integral = False
        oldest_event = self._oldest_event_ms
        if now_ms < oldest_event:
            oldest_event = self._oldest_event_ms = now_ms
        oldest = self._oldest_start_ms
        if oldest is None or now_ms - oldest_event >= config.samples * window_ms:
            return self.measure_with_window(config, now_ms)
        elapsed = now_ms - oldest
        if elapsed < 1:  # a clock stepped back, or the 1 ms floor
            return self.measure_with_window(config, now_ms)
        if elapsed < (config.samples - 1) * window_ms:  # padded, as measure_with_window
            elapsed += (config.samples - 1 - elapsed // window_ms) * window_ms
        if self._integral:
            return total / (elapsed / 1000.0), elapsed
        return slot_order_sum(values) / (elapsed / 1000.0), elapsed


class Avg(SampledStat):
    """Kafka's Avg: mean of recorded values over the retained samples; NaN when empty.

    It alone keeps the WindowedCount, so a Rate, recorded on every request, does not.
    """

    __slots__ = ("counts",)

    def __init__(self) -> None:
        super().__init__()
        self.counts: list[int] = []

    def _append(self, now_ms: int) -> None:
        super()._append(now_ms)
        self.counts.append(0)

    def _reset(self, index: int, now_ms: int) -> None:
        super()._reset(index, now_ms)
        self.counts[index] = 0

    def _add(self, current: int, value: float, now_ms: int) -> None:
        super()._add(current, value, now_ms)
        self.counts[current] += 1

    def measure(self, config: MetricConfig, now_ms: int) -> float:
        self.purge(config, now_ms)
        count = sum(self.counts)
        return self.total() / count if count else math.nan


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
