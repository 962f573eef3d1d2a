"""Reading the few primitive encodings the hand-parsed paths need."""

from __future__ import annotations

from struct import Struct

from protocol.errors import ProtocolError

_INT16 = Struct(">h")


def read_uvarint(data: bytes, pos: int) -> tuple[int, int]:
    """Unsigned varint (Kafka's compact lengths and tag numbers) -> (value, next position).

    Almost every one on the wire is a single byte (a length under 127, a tag count of 0),
    so that case returns before the loop: the Produce path reads ten per request."""
    try:
        byte = data[pos]
    except IndexError:
        raise ProtocolError("truncated varint") from None
    if byte < 0x80:
        return byte, pos + 1
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
    if pos < len(data) and data[pos] == 0:  # no tagged fields, nearly always
        return pos + 1
    count, pos = read_uvarint(data, pos)
    for _ in range(count):
        _, pos = read_uvarint(data, pos)
        size, pos = read_uvarint(data, pos)
        pos += size
    if pos > len(data):
        raise ProtocolError("tagged fields run past the frame")
    return pos


def read_length(frame: bytes, pos: int, flexible: bool, classic: Struct) -> tuple[int, int]:
    """An array count or a string or bytes length: a uvarint of length + 1 when flexible,
    else `classic` (-1 for null either way)."""
    if flexible:
        length, pos = read_uvarint(frame, pos)
        return length - 1, pos
    value: int = classic.unpack_from(frame, pos)[0]
    return value, pos + classic.size


def skip_string(frame: bytes, pos: int, flexible: bool) -> int:
    length, pos = read_length(frame, pos, flexible, _INT16)
    return pos + max(length, 0)


def read_string(frame: bytes, pos: int, flexible: bool) -> tuple[str | None, int]:
    """A (nullable) string; a length past the frame is left to the caller's end check."""
    length, pos = read_length(frame, pos, flexible, _INT16)
    if length < 0:
        return None, pos
    return bytes(frame[pos : pos + length]).decode(), pos + length
