"""A bad client or a lost upstream costs one connection, never the proxy."""

from __future__ import annotations

import asyncio
import struct
import time
from pathlib import Path

import pytest
from aiokafka import AIOKafkaProducer

from localkafka.cluster import KafkaCluster
from localkafka.ports import LOOPBACK, free_port
from localkafka.proxy_process import RunningProxy, start_proxy
from localkafka.scrape import scrape, total
from tests.integration.support import clients


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


async def test_an_idle_connection_is_closed_and_a_busy_one_is_not(
    kafka3: KafkaCluster, tmp_path: Path
) -> None:
    """connections.max.idle.ms: a client that sends nothing is closed once that long has
    passed without traffic, never sooner; a client that keeps talking is never closed."""
    idle_ms = 1000
    extra = f"connections_max_idle_ms = {idle_ms}\n"
    proxy = await asyncio.to_thread(start_proxy, tmp_path, kafka3.brokers[0].address, 3, extra)
    api_versions = struct.pack(">hhih", 18, 0, 1, 1) + b"c"
    request = struct.pack(">i", len(api_versions)) + api_versions
    try:
        host, port = proxy.bootstrap.rsplit(":", 1)
        opened = time.monotonic()  # before the proxy's idle clock for it can start
        idle_reader, idle_writer = await asyncio.open_connection(host, int(port))
        busy_reader, busy_writer = await send_raw(proxy.bootstrap, request)

        async def closed_after() -> float | None:
            """Seconds from opening to the proxy's close, or None if it did not close."""
            return time.monotonic() - opened if await closed_by_proxy(idle_reader) else None

        closed = asyncio.create_task(closed_after())
        answered = 0
        while time.monotonic() - opened < 3 * idle_ms / 1000:  # three idle times, talking
            size = struct.unpack(">i", await asyncio.wait_for(busy_reader.readexactly(4), 10))
            await asyncio.wait_for(busy_reader.readexactly(size[0]), 10)
            answered += 1
            await asyncio.sleep(idle_ms / 4000)
            busy_writer.write(request)
        idle_for = await closed
        # not before its idle time; soon after it (the sweep runs every idle_ms / 2)
        assert idle_for is not None and idle_ms / 1000 <= idle_for < idle_ms / 1000 + 5
        assert answered >= 3 and not busy_reader.at_eof()
        samples = await asyncio.to_thread(scrape, proxy.metrics_url)
        assert total(samples, "kafka_quota_proxy_connections_idle_closed_total") == 1
        idle_writer.close()
        busy_writer.close()
    finally:
        proxy.stop()
