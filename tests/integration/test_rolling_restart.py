"""A proxy restarted with SIGTERM during a steady produce: it drains (requests already sent
upstream are answered before it closes), the client reconnects on its own to the proxy
started again on the same ports, and no acknowledged record is lost or duplicated. With two
workers ([proxy] workers = 2, issue 27) the parent forwards SIGTERM and every worker drains."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest
from aiokafka import AIOKafkaProducer

from localkafka.cluster import KafkaCluster
from localkafka.load import read_all
from localkafka.proxy_process import GENEROUS_GUARDS, restart_proxy, start_proxy
from tests.integration.support import clients

MAX_RECORDS = 200_000
IN_FLIGHT = 50


@pytest.mark.parametrize("workers", [1, 2])
async def test_sigterm_drains_and_the_client_reconnects_without_loss(
    kafka3: KafkaCluster, tmp_path: Path, workers: int
) -> None:
    proxy = await asyncio.to_thread(
        start_proxy,
        tmp_path,
        kafka3.brokers[0].address,
        3,
        f"workers = {workers}\n{GENEROUS_GUARDS}",
    )
    topic = f"rolling-restart-{workers}"
    await asyncio.to_thread(clients.create_topic, proxy.bootstrap, topic, 3, 3)
    producer = AIOKafkaProducer(
        bootstrap_servers=proxy.bootstrap, acks="all", enable_idempotence=True, linger_ms=2
    )
    await producer.start()
    acked: list[tuple[float, bytes]] = []
    #: sends the producer gave up on: a drained restart costs an idempotent producer none
    failed: list[BaseException] = []
    stop = asyncio.Event()

    def record_ack(future: asyncio.Future[object], value: bytes) -> None:
        if future.cancelled():
            failed.append(asyncio.CancelledError())
        elif (error := future.exception()) is not None:
            failed.append(error)
        else:
            acked.append((time.monotonic(), value))

    async def acks_after(since: float, count: int) -> None:
        deadline = time.monotonic() + 60
        while sum(1 for at, _ in acked if at > since) < count:
            assert time.monotonic() < deadline and not task.done(), f"no acks since {since}"
            await asyncio.sleep(0.1)

    async def produce() -> None:
        pending: set[asyncio.Future[object]] = set()
        sent = 0
        while not stop.is_set() and sent < MAX_RECORDS:
            value = str(sent).encode()
            future = await producer.send(topic, value)
            future.add_done_callback(lambda f, v=value: record_ack(f, v))
            pending.add(future)
            sent += 1
            if len(pending) >= IN_FLIGHT:
                _, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
        # a failed send is in `failed` (record_ack), reported after everything has stopped
        await asyncio.wait_for(asyncio.gather(*pending, return_exceptions=True), 120)

    task = asyncio.create_task(produce())
    try:
        await acks_after(0.0, 500)  # a steady produce
        drained = proxy
        proxy = await asyncio.to_thread(restart_proxy, proxy)
        await acks_after(time.monotonic(), 500)  # reconnected on its own
    finally:
        stop.set()
        await task
        await producer.stop()
        proxy.stop()
    assert drained.process.returncode == 0 and proxy.process.returncode == 0
    log = proxy.log()  # the log of both runs
    assert "drain timed out" not in log
    assert log.count("shutting down") == 2 * workers, "every worker of both runs drains"
    assert not failed, f"{len(failed)} sends failed, the first: {failed[0]!r}"
    stored = read_all(kafka3.bootstrap_servers, topic)
    values = {value for _, value in acked}
    print(f"acked {len(values)}, stored {len(stored)} across a proxy restart")
    assert len(stored) == len(set(stored)), "duplicates stored"
    assert values <= set(stored), "acknowledged records lost"
