"""The proxy's one clock: the time quotas are charged at and the timers that end throttles.

A connection reads the time and sets timers only through a Clock, so the same connection code
runs on the event loop in production (proxy/network/loop.py) and on a virtual clock in the
fidelity tests, where a 30-second quota run takes milliseconds and gives the same result on
any machine.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Protocol


class Timer(Protocol):
    def cancel(self) -> None: ...


class Clock(ABC):
    @abstractmethod
    def now_ns(self) -> int:
        """Monotonic nanoseconds: request time is measured and quotas are charged on it."""

    @abstractmethod
    def call_later(self, delay_ns: int, callback: Callable[[], object]) -> Timer:
        """Run `callback` once `delay_ns` have passed on this clock."""

    def now_ms(self) -> int:
        """The quota clock of quotas/, which counts in Kafka's milliseconds."""
        return self.now_ns() // 1_000_000


def wall_ms() -> int:
    """Wall-clock milliseconds, for what leaves the process (sample and fleet timestamps)
    and is compared across machines; never for charging or timing a quota."""
    return time.time_ns() // 1_000_000
