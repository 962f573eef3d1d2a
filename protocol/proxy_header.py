"""The PROXY protocol header a load balancer puts before a client's bytes (HAProxy's spec,
versions 1 and 2): who the client really is, when the proxy sees only the balancer.

Pure: the shell peeks at a connection's first bytes and asks here whether they start a
header, and whether the header is whole; it then consumes exactly `length` bytes, so what
follows (a TLS handshake, Kafka frames) reaches the connection untouched.

A Kafka request or a TLS ClientHello can never start like a header (a Kafka size prefix of
"PROX" or CR LF CR LF is over 200 MB), so a listener that takes a header optionally can tell
one apart from a client that sends none.
"""

from __future__ import annotations

import ipaddress
from typing import Final, NamedTuple

from protocol.errors import ProtocolError

V1_PREFIX: Final = b"PROXY "
V2_SIGNATURE: Final = b"\r\n\r\n\x00\r\nQUIT\n"
#: the longest v1 line, CR LF included (the spec's 107 bytes)
V1_MAX: Final = 107
_V2_FIXED: Final = 16
#: the longest v2 header: its fixed part and a 16-bit length
MAX_HEADER: Final = _V2_FIXED + 0xFFFF

_V2_LOCAL, _V2_PROXY = 0x0, 0x1
_AF_UNSPEC, _AF_INET, _AF_INET6, _AF_UNIX = 0x0, 0x1, 0x2, 0x3
_STREAM = 0x1
#: the address block's size by v2 family (UNSPEC carries none)
_ADDRESS_BYTES: Final = {_AF_UNSPEC: 0, _AF_INET: 12, _AF_INET6: 36, _AF_UNIX: 216}


class ProxyHeaderError(ProtocolError):
    """Not a valid PROXY protocol header: the connection closes."""


class ProxyHeader(NamedTuple):
    version: int
    #: bytes the header takes on the wire
    length: int
    #: the client's (address, port); None when the connection's own endpoints stand (v2's
    #: LOCAL command, the balancer's own health check; v1's UNKNOWN; a v2 family without
    #: IP addresses)
    source: tuple[str, int] | None


def starts_header(data: bytes) -> bool | None:
    """Whether `data` starts a PROXY protocol header; None while too short to tell."""
    for signature in (V1_PREFIX, V2_SIGNATURE):
        n = min(len(data), len(signature))
        if data[:n] == signature[:n]:
            return True if n == len(signature) else None
    return False


def parse_header(data: bytes) -> ProxyHeader | None:
    """The header `data` starts with (see starts_header); None while it is not whole."""
    if data.startswith(V2_SIGNATURE):
        return _parse_v2(data)
    return _parse_v1(data)


def _parse_v1(data: bytes) -> ProxyHeader | None:
    end = data.find(b"\r\n", 0, V1_MAX)
    if end < 0:
        if len(data) >= V1_MAX:
            raise ProxyHeaderError(f"a v1 header longer than {V1_MAX} bytes")
        return None
    line = data[:end]
    try:
        words = line.decode("ascii").split(" ")
    except UnicodeDecodeError:
        raise ProxyHeaderError("a v1 header that is not ASCII") from None
    if len(words) >= 2 and words[1] == "UNKNOWN":
        return ProxyHeader(1, end + 2, None)
    if len(words) != 6 or words[1] not in ("TCP4", "TCP6"):
        raise ProxyHeaderError(f"a malformed v1 header: {line[:V1_MAX]!r}")
    _, family, source, destination, source_port, destination_port = words
    version = 4 if family == "TCP4" else 6
    for address in (source, destination):
        try:
            parsed = ipaddress.ip_address(address)
        except ValueError:
            raise ProxyHeaderError(f"a v1 header with an invalid address: {address!r}") from None
        if parsed.version != version:
            raise ProxyHeaderError(f"a v1 {family} header with the address {address!r}")
    _v1_port(destination_port)
    return ProxyHeader(1, end + 2, (source, _v1_port(source_port)))


def _v1_port(text: str) -> int:
    if not text.isdigit() or (len(text) > 1 and text[0] == "0") or int(text) > 0xFFFF:
        raise ProxyHeaderError(f"a v1 header with an invalid port: {text!r}")
    return int(text)


def _parse_v2(data: bytes) -> ProxyHeader | None:
    if len(data) < _V2_FIXED:
        return None
    version, command = data[12] >> 4, data[12] & 0xF
    family, transport = data[13] >> 4, data[13] & 0xF
    length = _V2_FIXED + int.from_bytes(data[14:16], "big")
    if version != 2:
        raise ProxyHeaderError(f"a v2 signature with version {version}")
    if command not in (_V2_LOCAL, _V2_PROXY):
        raise ProxyHeaderError(f"a v2 header with the command {command:#x}")
    if len(data) < length:
        return None
    if command == _V2_LOCAL:  # the balancer's own connection: what it carries is ignored
        return ProxyHeader(2, length, None)
    if family not in _ADDRESS_BYTES:
        raise ProxyHeaderError(f"a v2 header with the address family {family:#x}")
    if length - _V2_FIXED < _ADDRESS_BYTES[family]:
        raise ProxyHeaderError(
            f"a v2 header of {length - _V2_FIXED} bytes, too short for its addresses"
        )
    if family in (_AF_INET, _AF_INET6) and transport != _STREAM:
        raise ProxyHeaderError(f"a v2 header for a transport other than TCP ({transport:#x})")
    addresses = data[_V2_FIXED:]
    if family == _AF_INET:
        source = str(ipaddress.IPv4Address(addresses[:4]))
        port = int.from_bytes(addresses[8:10], "big")
    elif family == _AF_INET6:
        source = str(ipaddress.IPv6Address(addresses[:16]))
        port = int.from_bytes(addresses[32:34], "big")
    else:  # UNSPEC or UNIX: no client address to take
        return ProxyHeader(2, length, None)
    return ProxyHeader(2, length, (source, port))
