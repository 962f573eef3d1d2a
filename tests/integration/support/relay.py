"""A cluster slow to answer: a TCP relay that holds every connection until its hold ends,
then passes bytes both ways (what a proxy starting beside a cluster still starting meets)."""

from __future__ import annotations

import asyncio
import threading
import time


class DelayedRelay:
    def __init__(self, target: str, hold_s: float) -> None:
        self._target = target.rsplit(":", 1)
        self.released_at = time.monotonic() + hold_s
        self._loop = asyncio.new_event_loop()
        started = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(started,), daemon=True)
        self._thread.start()
        started.wait(10)

    def _run(self, started: threading.Event) -> None:
        asyncio.set_event_loop(self._loop)
        self._server = self._loop.run_until_complete(
            asyncio.start_server(self._relay, "127.0.0.1", 0)
        )
        self.address = f"127.0.0.1:{self._server.sockets[0].getsockname()[1]}"
        started.set()
        self._loop.run_forever()

    async def _relay(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await asyncio.sleep(max(0.0, self.released_at - time.monotonic()))
        host, port = self._target
        try:
            upstream_reader, upstream_writer = await asyncio.open_connection(host, int(port))
        except OSError:
            writer.close()
            return
        await asyncio.gather(
            _pipe(reader, upstream_writer), _pipe(upstream_reader, writer), return_exceptions=True
        )

    def stop(self) -> None:
        self._loop.call_soon_threadsafe(self._server.close)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    finally:
        writer.close()
