"""The event loop the proxy runs on, and the Clock that reads and times on it."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from proxy.runtime.clock import Clock, Timer


def install_event_loop(use_uvloop: bool) -> str:
    """uvloop when configured and installed; the name of the loop that runs, for the log."""
    if use_uvloop:
        try:
            import uvloop
        except ImportError:
            return "asyncio (uvloop not installed)"
        asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
        return "uvloop"
    return "asyncio"


class LoopClock(Clock):
    """Monotonic, so a wall-clock step never unthrottles or blocks anyone; timers on the
    running event loop (asyncio's or uvloop's)."""

    def now_ns(self) -> int:
        return time.monotonic_ns()

    def call_later(self, delay_ns: int, callback: Callable[[], object]) -> Timer:
        return asyncio.get_running_loop().call_later(delay_ns / 1e9, callback)
