"""Many quota sensors replayed in lockstep: one numpy step gives every sensor its next record.

A day of 1,000 principals is 100 million records per quota type once each 10 s window is
spread over 1 s quota windows: through the per-record managers (quotas/managers.py) that was
nineteen minutes of Python on 2 cores, and the one-sensor loops of quotas/replay.py still
pay the interpreter per record. Sensors never interact and each record's arithmetic is a
short fixed sequence, so step k applies the k-th record of every sensor at once,
elementwise: the same IEEE operations, in the same order, as Kafka's SampledStat, Rate and
TokenBucket in quotas/stats.py. The verdicts are the managers' own, record for record
(tests/unit/pipeline/test_whatif.py holds the per-record what-if as the oracle).

Records come as the windows they spread over, grouped by sensor, in each sensor's order.
Sensors are taken longest first, so the sensors still replaying at step k are always a
prefix of the arrays.
"""

from __future__ import annotations

from typing import Final

import numpy as np
import numpy.typing as npt

from quotas.managers import ClientQuotaManager, TokenBucketQuotaManager

Ints = npt.NDArray[np.int64]
Floats = npt.NDArray[np.float64]
Flags = npt.NDArray[np.bool_]

#: a slot not allocated yet: later than any record, so never the oldest start or event
_NEVER: Final = np.int64(2**62)


class Records:
    """Each sensor's records, given as the windows they spread over: window i of the flat
    arrays is slices[i] records of shares[i] each, the k-th at starts_ms[i] + k x
    widths_ms[i] // slices[i]. Windows are grouped by sensor (sensor 0's first, in order) and
    `windows` says how many each sensor has. Records are derived step by step, never laid
    out: a day is 86 million of them per quota type, and writing them cost more than
    replaying them."""

    def __init__(
        self, starts_ms: Ints, widths_ms: Ints, slices: Ints, shares: Floats, windows: Ints
    ) -> None:
        self.starts_ms, self.widths_ms, self.slices = starts_ms, widths_ms, slices
        self.shares, self.windows = shares, windows
        first = np.zeros(len(windows), dtype=np.int64)
        np.cumsum(windows[:-1], out=first[1:])
        records_before = np.zeros(len(slices) + 1, dtype=np.int64)
        np.cumsum(slices, out=records_before[1:])
        counts = records_before[first + windows] - records_before[first]
        #: the sensors longest first (stable): those still replaying at a step are a prefix
        self.order = np.argsort(-counts, kind="stable")
        self.counts = counts[self.order]
        ascending = self.counts[::-1]
        #: per step, how many sensors have a record at it
        self.active = len(ascending) - np.searchsorted(
            ascending, np.arange(self.steps()), side="right"
        )
        #: per sensor, in `order`: the window of its next record, and which of its slices
        self._window = first[self.order]
        self._part = np.zeros(len(windows), dtype=np.int64)

    def steps(self) -> int:
        return int(self.counts[0]) if len(self.counts) else 0

    def first_times_ms(self) -> tuple[Flags, Ints]:
        """The sensors that have records, and the time of their first (before any step)."""
        some = self.counts > 0
        return some, self.starts_ms[self._window[some]]

    def take(self, step: int) -> tuple[Ints, Ints, Floats]:
        """The step's record of every sensor still replaying: its window, time and value."""
        m = int(self.active[step])
        window = self._window[:m].copy()
        part = self._part[:m]
        slices = self.slices[window]
        now = self.starts_ms[window] + part * self.widths_ms[window] // slices
        value = self.shares[window]
        following = part + 1
        done = following == slices
        self._window[:m] += done
        self._part[:m] = np.where(done, 0, following)
        return window, now, value


def lockstep_key(manager: ClientQuotaManager) -> tuple[int, int, bool]:
    """What rate_throttled takes from its manager: managers alike in it replay as one."""
    capped = manager.max_throttle_ms is not None and manager.max_throttle_ms <= 0
    return manager.config.window_ms, manager.config.samples, capped


def rate_throttled(manager: ClientQuotaManager, limits: Floats, records: Records) -> Ints:
    """Per window: for how many of its records ClientQuotaManager.record_and_get_throttle_time_ms
    (record, then measure, on a sensor created fresh with the limit) returns a throttle above
    0 ms."""
    window, samples, capped = lockstep_key(manager)
    slots, expire_age, min_full = samples + 1, samples * window, samples - 1
    sensors = len(records.counts)
    limits = limits[records.order]
    # per slot, then per sensor: each slot's column is contiguous across sensors
    starts = np.full((slots, sensors), _NEVER, dtype=np.int64)
    last = np.full((slots, sensors), _NEVER, dtype=np.int64)
    sums = np.zeros((slots, sensors), dtype=np.float64)
    current = np.zeros(sensors, dtype=np.int64)
    total = np.zeros(sensors, dtype=np.float64)
    integral = np.ones(sensors, dtype=np.bool_)
    throttled = np.zeros(len(records.slices), dtype=np.int64)
    columns = np.arange(sensors, dtype=np.int64)
    # every sensor's first record is at step 0, where its first sample starts
    some, first = records.first_times_ms()
    starts[0, some] = last[0, some] = first
    for step in range(records.steps()):
        recorded, now, value = records.take(step)
        m = len(recorded)
        col = columns[:m]
        cur = current[:m]
        # SampledStat.record: a new sample once the current one is a window old
        advance = now - starts[cur, col] >= window
        if advance.any():
            at = col[advance]
            following = (cur[advance] + 1) % slots
            total[at] -= sums[following, at]
            starts[following, at] = now[advance]
            last[following, at] = now[advance]
            sums[following, at] = 0.0
            cur = current[:m] = np.where(advance, (cur + 1) % slots, cur)
        sums[cur, col] += value
        last[cur, col] = now
        total[:m] += value
        integral[:m] &= (value % 1.0) == 0.0
        # Rate.measure_with_window: purge samples with no event for samples x window
        expired = now - last[:, :m] >= expire_age  # never an unallocated slot
        if expired.any():  # with a record a window apart, one sample expires per record
            if integral[:m].any():  # the total stands in for the sum only while integral
                total[:m] -= np.where(expired, sums[:, :m], 0.0).sum(axis=0)
            np.copyto(starts[:, :m], now, where=expired)
            np.copyto(last[:, :m], now, where=expired)
            np.copyto(sums[:, :m], 0.0, where=expired)
        elapsed = now - starts[:, :m].min(axis=0)
        full = np.where(elapsed >= 0, elapsed // window, -(-elapsed // window))
        elapsed = np.maximum(
            np.where(full < min_full, elapsed + (min_full - full) * window, elapsed), 1
        )
        if integral[:m].all():
            summed = total[:m]
        else:
            # Java adds the samples left to right in slot order; a reduction along the
            # outer axis adds row after row, the same order (the oracle test holds it)
            summed = np.where(integral[:m], total[:m], sums[:, :m].sum(axis=0))
        observed = summed / (elapsed / 1000.0)
        limit = limits[:m]
        over = (observed > limit) & ((observed - limit) / limit * elapsed >= 0.5)
        if not capped:
            throttled[recorded] += over
    return throttled


def bucket_refused(manager: TokenBucketQuotaManager, limits: Floats, records: Records) -> Ints:
    """Per window: how many of its records TokenBucketQuotaManager.record_strict refuses (check,
    then record) on a bucket created full with the limit."""
    sensors = len(records.counts)
    limits = limits[records.order]
    unit = manager.unit_ms
    bursts = np.array([manager.burst(float(limit)) for limit in limits], dtype=np.float64)
    tokens = bursts.copy()
    # the first refill is then from the first record itself: the bucket is full then
    updated = np.zeros(sensors, dtype=np.int64)
    some, first = records.first_times_ms()
    updated[some] = first
    refused = np.zeros(len(records.slices), dtype=np.int64)
    for step in range(records.steps()):
        recorded, now, value = records.take(step)
        m = len(recorded)
        burst, limit = bursts[:m], limits[:m]
        # Python's min(burst, x): x only when it is below burst (a NaN stays out)
        refilled = tokens[:m] + limit * ((now - updated[:m]) / unit)
        held = np.where(refilled < burst, refilled, burst)
        updated[:m] = now
        no = held < 0
        refused[recorded] += no
        again = held + limit * (0 / unit)  # the record's own refill, at the same instant
        again = np.where(again < burst, again, burst)
        spent = again - value
        tokens[:m] = np.where(no, held, np.where(spent < burst, spent, burst))
    return refused
