"""Reading the few primitive encodings the hand-parsed paths need."""

from __future__ import annotations

from protocol.errors import ProtocolError


def read_uvarint(data: bytes, pos: int) -> tuple[int, int]:
    """Unsigned varint (Kafka's compact lengths and tag numbers) -> (value, next position)."""
    value = 0
    shift = 0
    while True:
        if pos >= len(data):
            raise ProtocolError("truncated varint")
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7
        if shift > 28:
            raise ProtocolError("varint longer than 5 bytes")


def skip_tagged_fields(data: bytes, pos: int) -> int:
    count, pos = read_uvarint(data, pos)
    for _ in range(count):
        _, pos = read_uvarint(data, pos)
        size, pos = read_uvarint(data, pos)
        pos += size
    if pos > len(data):
        raise ProtocolError("tagged fields run past the frame")
    return pos
