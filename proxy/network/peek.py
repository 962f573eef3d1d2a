"""Reading what a connection starts with before it is served, without taking it: a load
balancer's PROXY protocol header (protocol/proxy_header.py), consumed once read, and a TLS
ClientHello's SNI name (protocol/client_hello.py), left for the handshake that follows.

The bytes are peeked at, so whatever follows reaches the connection (and its TLS handshake)
untouched. A sender puts these first bytes in one segment as a rule; ones split over
segments are looked at again, first after _MORE_S and then less and less often, up to every
_MORE_MAX_S, until they are whole or connect_timeout_s has passed.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable
from typing import TypeVar

from protocol.client_hello import MAX_HELLO, server_name
from protocol.errors import ProtocolError
from protocol.proxy_header import (
    MAX_HEADER,
    ProxyHeader,
    ProxyHeaderError,
    parse_header,
    starts_header,
)

#: the first and the longest wait for the rest of a split header or ClientHello: a sender
#: that stalls midway is looked at less and less often until connect_timeout_s
_MORE_S = 0.005
_MORE_MAX_S = 0.1
_Parsed = TypeVar("_Parsed")
#: what the parse of a connection without a header (where none is required) gives
_NO_HEADER = ProxyHeader(0, 0, None)


async def read_proxy_header(
    sock: socket.socket, required: bool, timeout_s: float
) -> ProxyHeader | None:
    """The header the connection starts with, consumed; None if it starts with none and
    one is not required. Raises ProtocolError for a malformed or missing header, or one
    not whole within `timeout_s`."""

    def parse(data: bytes) -> ProxyHeader | None:
        starts = starts_header(data)
        if starts is False:
            if required:
                raise ProxyHeaderError("no PROXY protocol header, and one is required")
            return _NO_HEADER
        return parse_header(data) if starts else None

    header = await _peek(sock, parse, MAX_HEADER, timeout_s, "PROXY protocol header")
    if header is _NO_HEADER:
        return None
    length = header.length
    try:
        while length > 0:  # already in the socket's buffer: it was peeked at
            taken = len(sock.recv(length))
            if not taken:
                raise OSError("closed")
            length -= taken
    except OSError as exc:
        raise ProtocolError(f"the connection failed in its PROXY protocol header: {exc}") from exc
    return header


async def read_server_name(sock: socket.socket, timeout_s: float) -> str:
    """The SNI name of the ClientHello the connection starts with ("" for none), left
    unread. Raises ProtocolError for what is not a ClientHello, or one not whole in time."""
    return await _peek(sock, server_name, MAX_HELLO, timeout_s, "TLS ClientHello")


async def _peek(
    sock: socket.socket,
    parse: Callable[[bytes], _Parsed | None],
    limit: int,
    timeout_s: float,
    what: str,
) -> _Parsed:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    more_s = _MORE_S
    while True:
        try:
            data = sock.recv(limit, socket.MSG_PEEK)
        except BlockingIOError:
            await _readable(loop, sock, deadline - loop.time(), what)
            continue
        except OSError as exc:  # reset by the peer (a balancer's TCP check does that)
            raise ProtocolError(f"the connection failed before its {what}: {exc}") from exc
        if not data:
            raise ProtocolError(f"the connection closed before its {what}")
        parsed = parse(data)
        if parsed is not None:
            return parsed
        if loop.time() >= deadline:
            raise ProtocolError(f"no whole {what} within {timeout_s:g}s")
        await asyncio.sleep(more_s)
        more_s = min(2 * more_s, _MORE_MAX_S)


async def _readable(
    loop: asyncio.AbstractEventLoop, sock: socket.socket, timeout_s: float, what: str
) -> None:
    if timeout_s <= 0:
        raise ProtocolError(f"no {what} in time")
    ready: asyncio.Future[None] = loop.create_future()

    def wake() -> None:
        if not ready.done():
            ready.set_result(None)

    loop.add_reader(sock.fileno(), wake)
    try:
        await asyncio.wait_for(ready, timeout_s)
    except TimeoutError:
        raise ProtocolError(f"no {what} within {timeout_s:g}s") from None
    finally:
        loop.remove_reader(sock.fileno())
