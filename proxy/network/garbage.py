"""How a proxy process collects garbage: rarely, and never over what it loaded at start-up.

CPython collects its youngest generation after 700 new container objects. A proxy makes
them by the thousand and drops them at once: a request's parts, and a fleet record's uses
(1,389 tuples per member per interval at 10,000 principals). Collected every 700, those
still alive are promoted, and every full collection then walks them again beside every
sensor of every principal. Collected after YOUNG_AFTER, nearly all are dead by then.
What was loaded at start-up (modules, the codec's tables, the config: about 90,000
objects) never dies, so it is frozen out of every collection; frozen before the workers
are forked, their pages stay shared too. Cyclic garbage waits longer to be freed, at most
YOUNG_AFTER objects of it. docs/performance.md has the figures.
"""

from __future__ import annotations

import gc
from typing import Final

#: new container objects after which the youngest generation is collected
YOUNG_AFTER: Final = 50_000


def collect_rarely() -> None:
    """Freeze what exists now, and collect the young generation every YOUNG_AFTER
    allocations (the older generations' thresholds are CPython's)."""
    gc.collect()
    gc.freeze()
    _, middle, old = gc.get_threshold()
    gc.set_threshold(YOUNG_AFTER, middle, old)
