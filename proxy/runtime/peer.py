"""One side of a proxied connection as the sans-IO runtime uses it.

The core writes to both sides and closes them; the read gate pauses and resumes the client.
An asyncio transport is one, and the unit tests' recording transports are another.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol


class Peer(Protocol):
    """An asyncio transport's subset."""

    def write(self, data: bytes) -> None: ...

    def writelines(self, data: Iterable[bytes]) -> None: ...

    def pause_reading(self) -> None: ...

    def resume_reading(self) -> None: ...

    def close(self) -> None: ...
