"""Repeated log lines, rate-limited: a misbehaving fleet must not turn into a log flood.

Lines are alike when they come from the same line of code (the client address in them
differs every time); keyed by place alone, the filter's memory is bounded by the code, not by
what clients make it log. Each kind gets a burst of lines per period; further
ones are counted, and the next line of that kind let through says how many were left out.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

#: lines of one kind let through per period
BURST = 5
PERIOD_S = 10.0


class RepeatedLineFilter(logging.Filter):
    def __init__(
        self,
        burst: int = BURST,
        period_s: float = PERIOD_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__()
        self._burst = burst
        self._period_s = period_s
        self._clock = clock
        #: place -> [period start, lines let through in it, lines left out since the last one]
        self._kinds: dict[tuple[str, int], list[float]] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        kind = (record.pathname, record.lineno)
        now = self._clock()
        state = self._kinds.get(kind)
        if state is None or now - state[0] >= self._period_s:
            left_out = int(state[2]) if state is not None else 0
            self._kinds[kind] = [now, 1, 0]
            if left_out:
                self._say_left_out(record, left_out)
            return True
        if state[1] < self._burst:
            state[1] += 1
            return True
        state[2] += 1
        return False

    @staticmethod
    def _say_left_out(record: logging.LogRecord, count: int) -> None:
        record.msg = f"{record.msg} ({count} more like it were not logged)"


#: client libraries whose INFO lines are their own connection chatter, not the proxy's news
_CLIENT_LIBRARIES = ("kafka", "aiokafka")


def configure_logging(level: str) -> None:
    """The proxy's console: its own lines at `level`, repeated ones rate-limited, and the
    Kafka client libraries it uses for its own topics at WARNING (at INFO they log every
    connection they open, twenty lines before the proxy's first)."""
    logging.basicConfig(
        level=level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    for handler in logging.getLogger().handlers:
        handler.addFilter(RepeatedLineFilter())
    for name in _CLIENT_LIBRARIES:
        logging.getLogger(name).setLevel(logging.WARNING)
