"""A bare TCP relay on the proxy's event loop: the floor any Python proxy pays for its hop.

bench.latency runs it beside the proxy so that what the proxy adds can be told apart from
what one more process between client and broker costs on the same machine (two more
wake-ups per round trip, which on a small machine wait for a core the broker is using).

Run: python -m bench.relay LISTEN_PORT BROKER_HOST BROKER_PORT
"""

from __future__ import annotations

import asyncio
import sys
from typing import cast

import uvloop

from localkafka.ports import LOOPBACK


class _Pipe(asyncio.Protocol):
    """One direction's reader: everything it reads is written to the other side as it is."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.peer: _Pipe | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass

    def data_received(self, data: bytes) -> None:
        assert self.peer is not None and self.peer.transport is not None
        self.peer.transport.write(data)

    def connection_lost(self, exc: Exception | None) -> None:
        if self.peer is not None and self.peer.transport is not None:
            self.peer.transport.close()


class _ClientSide(_Pipe):
    def __init__(self, broker: tuple[str, int]) -> None:
        super().__init__()
        self._broker = broker

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        assert self.transport is not None
        self.transport.pause_reading()  # until the broker side is connected
        asyncio.get_running_loop().create_task(self._connect())

    async def _connect(self) -> None:
        upstream = _Pipe()
        upstream.peer = self
        await asyncio.get_running_loop().create_connection(lambda: upstream, *self._broker)
        self.peer = upstream
        assert self.transport is not None
        self.transport.resume_reading()


async def relay(listen_port: int, broker: tuple[str, int]) -> None:
    loop = asyncio.get_running_loop()
    await loop.create_server(lambda: _ClientSide(broker), LOOPBACK, listen_port)
    print("relay ready", flush=True)
    await asyncio.Event().wait()


def main(argv: list[str]) -> None:
    listen_port, host, port = int(argv[0]), argv[1], int(argv[2])
    uvloop.install()
    asyncio.run(relay(listen_port, (host, port)))


if __name__ == "__main__":
    main(sys.argv[1:])
