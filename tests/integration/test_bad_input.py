"""A bad client or a lost upstream costs one connection, never the proxy."""

from __future__ import annotations

import asyncio
import struct
from pathlib import Path

import pytest
from aiokafka import AIOKafkaProducer

from localkafka import LOOPBACK, free_port
from localkafka.proxy_process import RunningProxy, start_proxy
from tests.integration import clients

pytestmark = pytest.mark.integration


async def closed_by_proxy(reader: asyncio.StreamReader) -> bool:
    """True when the proxy closes the connection (EOF) within a few seconds."""
    try:
        return await asyncio.wait_for(reader.read(65536), 10) == b""
    except ConnectionResetError:
        return True


async def send_raw(
    bootstrap: str, payload: bytes
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """The writer is returned to be kept: a StreamWriter collected closes its connection,
    and the EOF the test then reads would be its own, not the proxy's."""
    host, port = bootstrap.rsplit(":", 1)
    reader, writer = await asyncio.open_connection(host, int(port))
    writer.write(payload)
    await writer.drain()
    return reader, writer


def malformed_frame() -> bytes:
    body = struct.pack(">hhih", 3, 1, 1, 500) + b"short"  # client_id runs past the frame
    return struct.pack(">i", len(body)) + body


def oversized_frame() -> bytes:
    return struct.pack(">i", 200 * 1024 * 1024) + b"\x00" * 64  # default max is 100 MiB


async def test_bad_frames_close_only_their_own_connection(proxy3: RunningProxy) -> None:
    topic = "bad-input"
    await asyncio.to_thread(clients.create_topic, proxy3.bootstrap, topic)
    producer = AIOKafkaProducer(bootstrap_servers=proxy3.bootstrap, acks="all")
    await producer.start()
    sent = 0
    stop = asyncio.Event()

    async def produce_steadily() -> None:
        nonlocal sent
        while not stop.is_set() and sent < 20000:
            await (await producer.send(topic, f"steady-{sent}".encode()))
            sent += 1

    steady = asyncio.create_task(produce_steadily())
    try:
        for payload in (malformed_frame(), oversized_frame()):
            reader, writer = await send_raw(proxy3.bootstrap, payload)
            assert await closed_by_proxy(reader)
            writer.close()
        # a broker listener, too, and a client that vanishes mid-frame
        host, port = proxy3.broker_address(2).rsplit(":", 1)
        _, writer = await asyncio.open_connection(host, int(port))
        writer.write(struct.pack(">i", 1000) + b"\x00\x03\x00\x0c")
        await writer.drain()
        writer.transport.abort()
        reader, writer = await send_raw(proxy3.broker_address(2), malformed_frame())
        assert await closed_by_proxy(reader)
        writer.close()
        before = sent
        while sent < before + 200:  # the well-behaved producer is still served
            await asyncio.sleep(0.05)
            assert not steady.done(), steady.exception()
    finally:
        stop.set()
        await steady
        await producer.stop()
    assert proxy3.process.poll() is None
    log = proxy3.log()
    assert "frame of 209715200 bytes exceeds the maximum of 104857600" in log
    assert "client_id runs past the frame" in log
    assert f"closing client {LOOPBACK}:" in log  # the peer is named


async def test_unreachable_upstream_closes_the_connection_then_the_listener(tmp_path: Path) -> None:
    dead = f"{LOOPBACK}:{free_port()}"
    proxy = await asyncio.to_thread(start_proxy, tmp_path, dead, 1)
    try:
        api_versions = struct.pack(">hhih", 18, 0, 1, 1) + b"c"
        reader, writer = await send_raw(
            proxy.bootstrap, struct.pack(">i", len(api_versions)) + api_versions
        )
        assert await closed_by_proxy(reader)
        writer.close()
        # then the listener refuses, as the unreachable broker itself does
        host, port = proxy.bootstrap.rsplit(":", 1)
        with pytest.raises(ConnectionRefusedError):
            await asyncio.open_connection(host, int(port))
        assert proxy.process.poll() is None
        for _ in range(50):  # the log is another process's file: allow it to land
            if "no upstream broker reachable" in proxy.log():
                break
            await asyncio.sleep(0.1)
        assert "no upstream broker reachable" in proxy.log()
    finally:
        proxy.stop()
