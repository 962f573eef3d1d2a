"""The disk guard (docs/ceilings.md#the-disk-guard): a log directory whose volume runs low
ramps down the writers of every partition with a replica on it, and only them.

Each broker's log directories are read with DescribeLogDirs (KIP-827's total and usable
bytes, and the partitions each holds) every interval. Below its broker's soft limit of usable
bytes, a directory becomes a ceiling that moves: the bytes per second every writer together
may produce into its partitions, starting from how fast it was filling when it crossed the
soft limit and falling in proportion to what is left above the hard limit, down to the
minimum there. The writers are held to it as to a broker's ceiling (quotas/ceilings.py):
exempt principals are never held, and the others share it as best-effort ones (a floor is
no promise a full disk can keep). As the directory fills more slowly the closer it is to the
hard limit, it approaches it without reaching it.

A directory already under its soft limit when first read (the proxy started) is ramped from
its second reading, once how fast it fills is known; one under its hard limit is held at the
minimum at once. A broker that cannot be read keeps its last decisions: a directory guarded
stays guarded, at its last ceiling, and one that was not stays free. Past `stale_after_ms`
the guard says so (DiskGuard.stale: a warning and a metric); it never lets go on its own.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Final, NamedTuple

from quotas.ceilings import CeilingManager, Standing
from quotas.entities import DEFAULT, MetricTags, QuotaEntity, QuotaType

#: (topic, partition)
Partition = tuple[str, int]
#: a directory, "<node id>:<path>": the scope of its ceiling
Directory = str

#: what a directory's volume says when its broker does not know (DescribeLogDirs before v4)
UNKNOWN: Final = -1


class DiskLimits(NamedTuple):
    """A broker's limits, in usable bytes of a log directory's volume."""

    #: under this, the directory's writers are ramped down
    soft: float
    #: under this, they are held at the minimum
    hard: float


class Reading(NamedTuple):
    """One log directory as its broker described it."""

    path: str
    total_bytes: int
    usable_bytes: int
    partitions: frozenset[Partition]


class Guarded(NamedTuple):
    """A directory under its soft limit, and what its writers may produce into it."""

    #: bytes per second, every writer together
    limit: float
    partitions: frozenset[Partition]
    #: how fast it filled when it crossed the soft limit (the ramp's top), bytes per second
    base: float


class _Seen(NamedTuple):
    usable_bytes: int
    at_ms: int


class DiskGuard:
    def __init__(self, minimum: float = 10240.0, stale_after_ms: int = 60_000) -> None:
        #: what a writer set is held at, at the hard limit (bytes per second)
        self.minimum = minimum
        self.stale_after_ms = stale_after_ms
        #: by broker entity (a node id, or DEFAULT); a broker without is not guarded
        self.limits: dict[str, DiskLimits] = {}
        self.guarded: dict[Directory, Guarded] = {}
        #: partition -> the guarded directories holding a replica of it
        self.by_partition: dict[Partition, tuple[Directory, ...]] = {}
        self._seen: dict[Directory, _Seen] = {}
        #: each directory's last reading, for the metrics
        self.readings: dict[Directory, Reading] = {}
        #: node id -> when it was last read
        self.read_ms: dict[int, int] = {}

    def configure(self, minimum: float, stale_after_ms: int) -> None:
        """[guards.disk]'s settings, taken at start-up."""
        self.minimum, self.stale_after_ms = minimum, stale_after_ms

    def update_limits(self, limits: Mapping[str, DiskLimits]) -> None:
        """New limits (by broker entity: a node id, or DEFAULT) take effect at each broker's
        next reading; a broker no longer limited lets its directories go at once."""
        self.limits = dict(limits)
        for directory in list(self.guarded):
            if self.limit_of(int(directory.partition(":")[0])) is None:
                del self.guarded[directory]
        self._index()

    def limit_of(self, node_id: int) -> DiskLimits | None:
        """A broker's limits: its own, else the default broker's."""
        limits = self.limits.get(str(node_id))
        return self.limits.get(DEFAULT) if limits is None else limits

    def read(self, node_id: int, readings: Iterable[Reading], now_ms: int) -> None:
        """A broker's log directories, described now."""
        self.read_ms[node_id] = now_ms
        limits = self.limit_of(node_id)
        for reading in readings:
            directory = f"{node_id}:{reading.path}"
            self.readings[directory] = reading
            seen = self._seen.get(directory)
            self._seen[directory] = _Seen(reading.usable_bytes, now_ms)
            if limits is None or reading.usable_bytes == UNKNOWN:
                self.guarded.pop(directory, None)
                continue
            if reading.usable_bytes >= limits.soft:
                self.guarded.pop(directory, None)
                continue
            was = self.guarded.get(directory)
            if was is not None:
                base = was.base
            elif seen is not None and now_ms > seen.at_ms:
                filled = (seen.usable_bytes - reading.usable_bytes) * 1000 / (now_ms - seen.at_ms)
                base = max(filled, self.minimum)
            elif reading.usable_bytes > limits.hard:
                # found low at its first reading: how fast it fills is known at the next
                continue
            else:
                base = self.minimum
            room = (reading.usable_bytes - limits.hard) / (limits.soft - limits.hard)
            limit = max(self.minimum, base * min(max(room, 0.0), 1.0))
            self.guarded[directory] = Guarded(limit, reading.partitions, base)
        self._index()

    def stale(self, now_ms: int) -> list[int]:
        """The brokers not read for stale_after_ms, whose decisions are held as they were."""
        return [
            node_id
            for node_id, read_ms in self.read_ms.items()
            if now_ms - read_ms > self.stale_after_ms and self.limit_of(node_id) is not None
        ]

    def failed(self, node_id: int) -> None:
        """A broker asked and not answered: read_ms stays as it was, so it turns stale."""
        self.read_ms.setdefault(node_id, 0)

    def _index(self) -> None:
        by_partition: dict[Partition, list[Directory]] = {}
        for directory, guarded in self.guarded.items():
            for partition in guarded.partitions:
                by_partition.setdefault(partition, []).append(directory)
        self.by_partition = {p: tuple(dirs) for p, dirs in by_partition.items()}


def disk_limits(limits: Mapping[QuotaType, Mapping[QuotaEntity, float]]) -> dict[str, DiskLimits]:
    """The broker entities' disk limits, where both are set and the hard one is below the
    soft one (config/quotas.py refuses a file otherwise; an alteration that leaves one
    without the other leaves its broker unguarded)."""
    soft = limits.get(QuotaType.DISK_SOFT_LIMIT, {})
    hard = limits.get(QuotaType.DISK_HARD_LIMIT, {})
    found = {}
    for entity in {*soft, *hard}:
        if entity.broker is None:
            continue
        default = QuotaEntity(broker=DEFAULT)
        soft_value, hard_value = (
            soft.get(entity, soft.get(default)),
            hard.get(entity, hard.get(default)),
        )
        if soft_value is not None and hard_value is not None and hard_value < soft_value:
            found[entity.broker] = DiskLimits(soft_value, hard_value)
    return found


class DiskCeilings(CeilingManager):
    """The disk guard's actuator: a ceiling per guarded directory, over the bytes produced
    into its partitions, its limit the guard's; floors do not hold under it."""

    def __init__(
        self, guard: DiskGuard, limits: Mapping[QuotaType, Mapping[QuotaEntity, float]]
    ) -> None:
        self.guard = guard
        super().__init__(
            QuotaType.DISK_GUARD, limits, QuotaType.PRODUCE_FLOOR, QuotaType.PRODUCE, guard.minimum
        )

    def update_classes(self, limits: Mapping[QuotaType, Mapping[QuotaEntity, float]]) -> None:
        super().update_classes(limits)
        self.guard.update_limits(disk_limits(limits))
        self.refresh()

    def ceiling_of(self, scope: str) -> float | None:
        guarded = self.guard.guarded.get(scope)
        return None if guarded is None else guarded.limit

    def _standing_of(self, tags: MetricTags) -> Standing:
        return super()._standing_of(tags)._replace(floor=0.0)

    def configure(self, minimum: float, stale_after_ms: int) -> None:
        """[guards.disk]'s settings: the minimum a directory's writers are held at."""
        self.guard.configure(minimum, stale_after_ms)
        self.minimum = minimum

    def refresh(self) -> None:
        """The guard read a broker: each directory's ceiling moves to its new limit, and a
        directory let go drops its scope."""
        self.enabled = bool(self.guard.guarded)
        for scope, ceiling in self.scopes():
            limit = self.ceiling_of(scope)
            if limit is None:
                self.drop(scope)
            else:
                ceiling.limit = limit
