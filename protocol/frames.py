"""Splitting a byte stream into size-prefixed Kafka frames."""

from __future__ import annotations

from struct import Struct

from protocol.errors import FrameTooLarge, ProtocolError

_INT32 = Struct(">i")

#: the largest size a frame's int32 prefix can state; the limit for trusted peers
MAX_FRAME_BYTES = 2**31 - 1


class FrameSplitter:
    """Accumulates stream bytes; `feed` returns every complete wire frame, prefix included.

    The size is checked as soon as the prefix arrives, before any body is buffered, so an
    oversized or negative size costs four bytes of memory, not the claimed size.
    """

    __slots__ = ("_buffer", "max_frame_bytes")

    def __init__(self, max_frame_bytes: int = MAX_FRAME_BYTES) -> None:
        self._buffer = bytearray()
        self.max_frame_bytes = max_frame_bytes

    @property
    def buffered(self) -> int:
        return len(self._buffer)

    @property
    def incomplete_frame_bytes(self) -> int:
        """The whole size (prefix included) of the frame being buffered, once its prefix is
        in; 0 when no frame is started or its prefix is still partial."""
        buffer = self._buffer
        if len(buffer) < 4:
            return 0
        return int(_INT32.unpack_from(buffer, 0)[0]) + 4

    def feed(self, data: bytes) -> list[bytes]:
        buffer = self._buffer
        if buffer:
            buffer += data
            view: bytes | bytearray = buffer
        else:
            view = data
        frames: list[bytes] = []
        pos = 0
        end = len(view)
        with memoryview(view) as window:  # one copy per frame, released before the buffer shrinks
            while end - pos >= 4:
                size = _INT32.unpack_from(view, pos)[0]
                if size < 0:
                    raise ProtocolError(f"negative frame size {size}")
                if size > self.max_frame_bytes:
                    raise FrameTooLarge(
                        f"frame of {size} bytes exceeds the maximum of {self.max_frame_bytes}"
                    )
                stop = pos + 4 + size
                if stop > end:
                    break
                if pos == 0 and stop == end and view is data:
                    frames.append(data)  # the common case: one read, one whole frame
                else:
                    frames.append(window[pos:stop].tobytes())
                pos = stop
        if view is buffer:
            del buffer[:pos]
        elif pos < end:
            buffer += data[pos:]
        return frames
