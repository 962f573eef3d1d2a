"""queued.max.request.bytes: one budget for the request bytes every connection is reading.

Kafka's SimpleMemoryPool (KIP-72), as brokers create it (strict = false): a frame whose size
prefix has arrived is granted its whole size whenever any memory is left, so the pool may go
negative by at most one frame and a frame larger than the pool still gets through. A
connection refused a grant stops reading until memory returns, and the proxy's memory for
requests stays under capacity + one frame whatever clients declare or trickle.

One difference from Kafka, on purpose: Kafka mutes every connection while the pool is out of
memory. Here a frame is charged only if it must wait for more bytes; a frame that arrives
whole in one read is handed on at once and never charged, so clients whose requests arrive
whole keep working while slow senders hold the pool. Connections refused a grant are
retried in the order they asked, as memory returns.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable


class MemoryPool:
    __slots__ = ("_waiting", "available", "capacity")

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.available = capacity
        #: who waits for memory -> how to retry, oldest first
        self._waiting: OrderedDict[object, Callable[[], object]] = OrderedDict()

    @property
    def waiting(self) -> int:
        return len(self._waiting)

    def try_allocate(self, size: int) -> bool:
        """SimpleMemoryPool.tryAllocate with strict = false: granted while any is left."""
        if self.available <= 0:
            return False
        self.available -= size
        return True

    def release(self, size: int) -> None:
        self.available += size
        while self.available > 0 and self._waiting:
            _, retry = self._waiting.popitem(last=False)
            retry()  # allocates again, or waits again at the back

    def wait(self, owner: object, retry: Callable[[], object]) -> None:
        self._waiting[owner] = retry

    def cancel(self, owner: object) -> None:
        self._waiting.pop(owner, None)
