"""The disk guard on a virtual clock: a 200 MB volume filled by writers held to what the
guard allows, read every second, as DescribeLogDirs describes it."""

from __future__ import annotations

from itertools import pairwise

from quotas.disk_guard import DiskGuard, DiskLimits, Reading

MB = 1_000_000
HOT = ("hot", 0)
COLD = ("cold", 0)
LIMITS = {"1": DiskLimits(soft=100 * MB, hard=50 * MB)}


def reading(usable: float, partitions: frozenset[tuple[str, int]] = frozenset({HOT})) -> Reading:
    return Reading("/data", 200 * MB, int(usable), partitions)


def test_writers_are_ramped_down_from_their_pace_then_held_at_the_minimum() -> None:
    """At 5 MB/s a 200 MB volume would fill in 40 s; ramped from 100 MB down to 50 MB and
    held at the minimum past it, it is not near full after two minutes."""
    guard = DiskGuard(minimum=10_000, stale_after_ms=30_000)
    guard.update_limits(LIMITS)
    usable, demand = 150.0 * MB, 5.0 * MB
    limits = []
    for second in range(120):
        guard.read(1, [reading(usable)], second * 1000)
        guarded = guard.guarded.get("1:/data")
        rate = demand if guarded is None else min(demand, guarded.limit)
        limits.append(None if guarded is None else guarded.limit)
        usable -= rate
    assert usable > 50 * MB - 120 * guard.minimum
    assert limits[-1] == guard.minimum
    ramp = [limit for limit in limits if limit is not None]
    # graded: it starts at the pace it had (no cliff) and only falls
    assert ramp[0] >= 0.9 * demand * 0.99  # 95 MB left at its first guarded reading
    assert all(later <= earlier for earlier, later in pairwise(ramp))
    assert guard.by_partition == {HOT: ("1:/data",)}


def test_a_directory_found_low_waits_for_its_pace_unless_under_the_hard_limit() -> None:
    guard = DiskGuard(minimum=10_000, stale_after_ms=30_000)
    guard.update_limits(LIMITS)
    guard.read(1, [reading(80 * MB), Reading("/other", 200 * MB, 40 * MB, frozenset({COLD}))], 0)
    assert "1:/data" not in guard.guarded
    assert guard.guarded["1:/other"].limit == 10_000
    guard.read(1, [reading(78 * MB)], 1000)
    assert guard.guarded["1:/data"].limit == 2 * MB * 0.56


def test_a_broker_that_cannot_be_read_keeps_its_decisions_and_is_said_stale() -> None:
    guard = DiskGuard(minimum=10_000, stale_after_ms=30_000)
    guard.update_limits(LIMITS)
    guard.read(1, [reading(120 * MB)], 0)
    guard.read(1, [reading(90 * MB)], 1000)
    held = guard.guarded["1:/data"]
    assert guard.stale(20_000) == []
    assert guard.stale(31_001) == [1]
    assert guard.guarded["1:/data"] == held  # never let go on its own
    guard.read(1, [reading(120 * MB)], 32_000)  # read again, and above its soft limit
    assert guard.guarded == {} and guard.by_partition == {} and guard.stale(32_000) == []


def test_a_broker_without_limits_is_not_guarded_and_limits_removed_let_go() -> None:
    guard = DiskGuard(minimum=10_000, stale_after_ms=30_000)
    guard.read(2, [reading(1 * MB)], 0)
    assert guard.guarded == {}
    guard.update_limits(LIMITS)
    guard.read(1, [reading(10 * MB)], 0)
    assert guard.by_partition == {HOT: ("1:/data",)}
    guard.update_limits({})
    assert guard.guarded == {} and guard.by_partition == {}
