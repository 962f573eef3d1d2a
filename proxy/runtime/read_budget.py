"""queued.max.request.bytes for one connection: what its frames waiting for bytes hold of the
shared memory pool (proxy/runtime/memory_pool.py), and how much the next read of the client
may take.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

from protocol.frames import FrameSplitter
from proxy.runtime.clock import Clock
from proxy.runtime.memory_pool import MemoryPool

#: the most one read of a client takes (asyncio's and uvloop's own read size)
READ_BYTES: Final = 256 * 1024
#: the most one read takes at a frame boundary while the memory pool is short (read_limit)
PRESSURE_READ_BYTES: Final = 64 * 1024


class ReadBudget:
    def __init__(
        self,
        pool: MemoryPool,
        requests: FrameSplitter,
        clock: Clock,
        wait: Callable[[], None],
        granted: Callable[[], None],
    ) -> None:
        self._pool = pool
        self._requests = requests
        self._clock = clock
        #: the connection stops reading until memory is granted, then resumes
        self._wait = wait
        self._granted_callback = granted
        #: what the pool granted the frame being read (0: nothing granted, or no frame)
        self.granted = 0
        self._waiting = False
        self._closed = False

    def read_limit(self) -> int:
        """How many bytes the next read of the client may take.

        While the pool could not grant a frame of the largest size, a read takes at most
        PRESSURE_READ_BYTES at a frame boundary, then no more than the frame it has memory
        for: a connection waiting for memory holds at most that much, not a whole socket
        read of a frame it has no memory for, while requests that fit in one such read still
        arrive whole and need no memory (Kafka's NetworkReceive reads only the size prefix,
        so when its pool is empty every client waits).
        """
        requests = self._requests
        if self._pool.available >= requests.max_frame_bytes:
            return READ_BYTES
        size = requests.incomplete_frame_bytes
        if not size:
            return PRESSURE_READ_BYTES
        return min(size - requests.buffered, READ_BYTES)

    def account(self, completed: bool) -> None:
        """After a read: return the grant of a frame that completed; ask one for a frame left
        waiting for bytes, and stop reading if the pool has none (Kafka's KafkaChannel.read
        mutes)."""
        pool = self._pool
        if completed and self.granted:  # frames complete in order: the granted one did
            granted, self.granted = self.granted, 0
            pool.release(granted)
        if not self.granted:
            size = self._requests.incomplete_frame_bytes
            if size and not pool.try_allocate(size):
                if not self._waiting:
                    self._waiting = True
                    self._wait()
                    pool.wait(self, self._retry)
            elif size:
                self.granted = size

    def _retry(self) -> None:
        if self._closed:
            return
        pool = self._pool
        size = self._requests.incomplete_frame_bytes
        if size and not pool.try_allocate(size):
            pool.wait(self, self._retry)
            return
        self.granted = size
        # resumed from the event loop, not inside the connection whose release woke it
        self._clock.call_later(0, self._end_wait)

    def _end_wait(self) -> None:
        self._waiting = False
        self._granted_callback()

    def close(self) -> None:
        self._closed = True
        self._pool.cancel(self)
        granted, self.granted = self.granted, 0
        if granted:
            self._pool.release(granted)
