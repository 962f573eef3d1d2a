"""The host name a TLS client asks for (SNI), read from its ClientHello before any TLS is
done: the one port of [proxy] routing = "sni" picks the upstream from it, and a name served
nowhere is answered with the alert a TLS server sends for it, before a handshake starts.

Pure: the shell peeks at the connection's first bytes, asks here, and leaves them in place
for the TLS handshake that follows. A ClientHello may span several TLS records (a large key
share); their fragments are joined.
"""

from __future__ import annotations

import struct
from typing import Final

from protocol.errors import ProtocolError

_HANDSHAKE: Final = 22
_CLIENT_HELLO: Final = 1
_SERVER_NAME: Final = 0
_HOST_NAME: Final = 0
#: records this long at most (TLS's 2^14 plus what a cipher may add)
_MAX_RECORD: Final = 2**14 + 2048
#: a ClientHello longer than this is not one a client sends
MAX_HELLO: Final = 64 * 1024

#: a fatal unrecognized_name alert (RFC 6066), as a TLS 1.2 record: every TLS version reads it
UNRECOGNIZED_NAME_ALERT: Final = bytes([21, 3, 3, 0, 2, 2, 112])


class NotClientHello(ProtocolError):
    """The bytes do not start a TLS ClientHello: the connection closes."""


def server_name(data: bytes) -> str | None:
    """The SNI host name of the ClientHello `data` starts with ("" when it names none);
    None while the ClientHello is not whole."""
    hello = _handshake_message(data)
    if hello is None:
        return None
    try:
        return _server_name(hello)
    except (IndexError, struct.error, UnicodeDecodeError):
        raise NotClientHello("a malformed ClientHello") from None


def _handshake_message(data: bytes) -> bytes | None:
    """The ClientHello message, joined from its records; None while some are missing."""
    fragments = b""
    offset = 0
    while True:
        if len(data) < offset + 5:
            return None
        kind, major, length = (
            data[offset],
            data[offset + 1],
            int.from_bytes(data[offset + 3 : offset + 5], "big"),
        )
        if kind != _HANDSHAKE or major != 3 or length == 0 or length > _MAX_RECORD:
            raise NotClientHello("not a TLS handshake record")
        if len(data) < offset + 5 + length:
            return None
        fragments += data[offset + 5 : offset + 5 + length]
        offset += 5 + length
        if len(fragments) >= 4:
            if fragments[0] != _CLIENT_HELLO:
                raise NotClientHello("a TLS handshake that does not start with a ClientHello")
            size = 4 + int.from_bytes(fragments[1:4], "big")
            if size > MAX_HELLO:
                raise NotClientHello(f"a ClientHello of {size} bytes")
            if len(fragments) >= size:
                return fragments[4:size]


def _server_name(hello: bytes) -> str:
    at = 2 + 32  # legacy_version, random
    at += 1 + hello[at]  # legacy_session_id
    at += 2 + int.from_bytes(hello[at : at + 2], "big")  # cipher_suites
    at += 1 + hello[at]  # legacy_compression_methods
    if at == len(hello):
        return ""  # no extensions at all
    end = at + 2 + int.from_bytes(hello[at : at + 2], "big")
    at += 2
    while at + 4 <= end:
        kind, length = struct.unpack_from(">HH", hello, at)
        at += 4
        if kind == _SERVER_NAME:
            names_end = at + 2 + int.from_bytes(hello[at : at + 2], "big")
            at += 2
            while at + 3 <= names_end:
                name_type, name_length = hello[at], int.from_bytes(hello[at + 1 : at + 3], "big")
                at += 3
                if name_type == _HOST_NAME:
                    if at + name_length > names_end:
                        raise IndexError
                    return hello[at : at + name_length].decode("ascii").lower()
                at += name_length
            return ""
        at += length
    return ""
