"""A series of records replayed through one quota sensor in one call.

The per-record managers (quotas/managers.py) are what enforcement calls for every request;
replaying a long series (a day of usage windows in the what-if, a fleet member's backlog)
through them costs a method call, an attribute walk and a purge check per record. These
functions keep one sensor's state in local variables instead, and give exactly what the
managers give, record for record, bit for bit: tests/unit/quotas/test_quota_replay.py holds the
managers as their oracle on random series.

Times are milliseconds on one clock and must not go back, as a series of windows does not.
"""

from __future__ import annotations

from collections.abc import Sequence

from quotas.javamath import java_round, saturate_int
from quotas.managers import (
    ADMITTED,
    Admission,
    ClientQuotaManager,
    TokenBucketQuotaManager,
    throttle_time_ms,
)
from quotas.stats import slot_order_sum


def replay_rate(
    manager: ClientQuotaManager,
    limit: float,
    times_ms: Sequence[int],
    values: Sequence[float],
) -> list[int]:
    """The throttle after each record (record, then check) of a fresh sensor with this
    limit: ClientQuotaManager.record_and_get_throttle_time_ms, once per record."""
    config = manager.config
    window, slots = config.window_ms, config.samples + 1
    expire_age, min_full = config.samples * window, config.samples - 1
    max_throttle = manager.max_throttle_ms
    starts: list[int] = []
    last: list[int] = []
    sums: list[float] = []
    current, total, integral = 0, 0.0, True
    #: min(starts), and a lower bound of min(last): found again only when a slot changes
    oldest_start = oldest_event = times_ms[0] if times_ms else 0
    throttles = []
    for now, value in zip(times_ms, values, strict=True):
        if not sums:
            starts.append(now)
            last.append(now)
            sums.append(0.0)
        if now - starts[current] >= window:
            current = (current + 1) % slots
            if current >= len(sums):
                starts.append(now)
                last.append(now)
                sums.append(0.0)
            else:
                total -= sums[current]
                starts[current] = last[current] = now
                sums[current] = 0.0
            oldest_start = min(starts)
        sums[current] += value
        last[current] = now
        total += value
        if value % 1.0 and integral:
            integral = False
        if now - oldest_event >= expire_age:  # Kafka's purge of samples with no recent event
            for index, event in enumerate(last):
                if now - event >= expire_age:
                    total -= sums[index]
                    starts[index] = last[index] = now
                    sums[index] = 0.0
            oldest_event, oldest_start = min(last), min(starts)
        elapsed = now - oldest_start
        full = elapsed // window
        if full < min_full:
            elapsed += (min_full - full) * window
        elapsed = max(elapsed, 1)
        observed = (total if integral else slot_order_sum(sums)) / (elapsed / 1000.0)
        throttles.append(
            throttle_time_ms(observed, limit, elapsed, max_throttle) if observed > limit else 0
        )
    return throttles


def replay_bucket(
    manager: TokenBucketQuotaManager,
    limit: float,
    times_ms: Sequence[int],
    values: Sequence[float],
    strict: bool = True,
) -> list[Admission]:
    """Each record's admission in a fresh bucket with this limit: record_strict (check,
    then record: refused while the bucket is below zero) or record_permissive (record, then
    check: admitted, throttled while below zero), once per record."""
    burst, unit = manager.burst(limit), manager.unit_ms
    tokens, updated = burst, times_ms[0] if times_ms else 0
    admissions = []
    for now, value in zip(times_ms, values, strict=True):
        tokens = min(burst, tokens + limit * ((now - updated) / unit))
        updated = now
        if strict and tokens < 0:
            admissions.append(Admission(False, saturate_int(java_round(-tokens / limit * unit))))
            continue
        tokens = min(burst, tokens - value)
        if tokens < 0 and not strict:
            admissions.append(Admission(True, saturate_int(java_round(-tokens / limit * unit))))
        else:
            admissions.append(ADMITTED)
    return admissions
