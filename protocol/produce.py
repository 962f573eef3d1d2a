"""What the proxy reads from Produce requests without decoding records."""

from __future__ import annotations

from struct import Struct

from protocol.apis import PRODUCE
from protocol.errors import ProtocolError
from protocol.headers import RequestHeader, request_body_offset
from protocol.primitives import read_uvarint

_INT16 = Struct(">h")


def produce_acks(frame: bytes, header: RequestHeader) -> int:
    """acks of a Produce request; acks=0 requests get no response from the broker.

    From v3 the body starts with the nullable transactional_id (compact from v9), then acks.
    """
    assert header.api_key == PRODUCE
    pos = request_body_offset(frame, header)
    if header.api_version >= 9:
        length, pos = read_uvarint(frame, pos)
        pos += max(length - 1, 0)
    elif header.api_version >= 3:
        if pos + 2 > len(frame):
            raise ProtocolError("Produce request truncated before transactional_id")
        (length,) = _INT16.unpack_from(frame, pos)
        pos += 2 + max(length, 0)
    if pos + 2 > len(frame):
        raise ProtocolError("Produce request truncated before acks")
    acks: int = _INT16.unpack_from(frame, pos)[0]
    return acks
