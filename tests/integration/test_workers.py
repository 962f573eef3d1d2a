"""One instance of two workers ([proxy] workers = 2) holds a principal as one process does, and
SIGTERM drains both (issue 27).

The workers share every listener port; the kernel spreads the connections of three
librdkafka processes, which share one client-id, over both. Held apart, each worker would
admit the quota; as the fleet of their host, the principal stays under the bound of
tests/integration/test_fleet.py, its neighbour is never throttled, and every acknowledged
record is stored once. Then the instance is restarted with SIGTERM during an idempotent
produce: every worker drains and the parent exits 0, and no send fails.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from aiokafka import AIOKafkaProducer

from localkafka import KafkaCluster
from localkafka.fleet import confluent_fleet, fleet_rate, fleet_timelines
from localkafka.load import (
    Timeline,
    aiokafka_flood,
    assert_no_loss_or_duplicates,
    read_all,
    seq_of,
)
from localkafka.proxy_process import SHORT_QUOTA_WINDOWS, RunningProxy, restart_proxy, start_proxy
from tests.integration.scrape import scrape, total, value

pytestmark = pytest.mark.integration

QUOTA = 1_000_000
FLEET, NEIGHBOUR = "fleet", "neighbour"
PROCESSES, PARTITIONS = 3, 6
FIRST_WINDOW_S, MEASURED_S = 2.0, 30.0
BOUND = 1.10
CONFIG = (
    "workers = 2\n"
    + SHORT_QUOTA_WINDOWS
    + f'[clients."{FLEET}"]\nproducer_byte_rate = {QUOTA}\n'
    + f'[clients."{NEIGHBOUR}"]\nproducer_byte_rate = {2 * QUOTA}\n'
)


@pytest.fixture(scope="module")
def workers(
    kafka3: KafkaCluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RunningProxy]:
    proxy = start_proxy(tmp_path_factory.mktemp("workers"), kafka3.bootstrap_servers, 3, CONFIG)
    yield proxy
    proxy.stop()


async def test_two_workers_hold_a_principal_as_one(
    kafka3: KafkaCluster, workers: RunningProxy
) -> None:
    assert len(workers.metrics_urls) == 2
    kafka3.create_topic("workers-held", partitions=PARTITIONS)
    kafka3.create_topic("workers-neighbour", partitions=1)
    seconds = FIRST_WINDOW_S + MEASURED_S
    neighbour = Timeline()
    throttled: dict[str, list[float]] = {FLEET: [], NEIGHBOUR: []}

    async def watch() -> None:
        """Kafka's throttle-time, an average over the quota windows (NaN for a client never
        throttled), read twice a second from each worker: no throttle is missed."""
        while True:
            for worker, url in enumerate(workers.metrics_urls):
                samples = await asyncio.to_thread(scrape, url)
                for client, seen in throttled.items():
                    throttle = value(
                        samples,
                        "kafka_server_produce_throttle_time",
                        user="",
                        client_id=client,
                        worker=str(worker),
                    )
                    if throttle is not None and not math.isnan(throttle):
                        seen.append(throttle)
            await asyncio.sleep(0.5)

    watcher = asyncio.create_task(watch())
    try:
        with confluent_fleet(
            workers.bootstrap, FLEET, "workers-held", seconds, PROCESSES
        ) as processes:
            await aiokafka_flood(
                workers.bootstrap, NEIGHBOUR, "workers-neighbour", seconds, neighbour, QUOTA / 2
            )
            timelines = await asyncio.to_thread(fleet_timelines, processes, seconds + 90)
    finally:
        watcher.cancel()
    accepted = [
        total(await asyncio.to_thread(scrape, url), "kafka_quota_proxy_connections_accepted_total")
        for url in workers.metrics_urls
    ]
    rate = fleet_rate(timelines, FIRST_WINDOW_S, FIRST_WINDOW_S + MEASURED_S)
    print(
        f"2 workers: {rate:,.0f} B/s over {MEASURED_S:.0f} s ({rate / QUOTA:.3f} x);"
        f" connections accepted per worker: {accepted}"
    )
    assert all(accepted), "a worker served no connection"
    assert 0 < rate < BOUND * QUOTA
    assert max(throttled[FLEET], default=0) > 0, "the fleet was never throttled"
    assert not any(throttled[NEIGHBOUR]), f"the neighbour was throttled: {throttled}"
    stored = [seq_of(value) for value in read_all(kafka3.bootstrap_servers, "workers-held")]
    assert_no_loss_or_duplicates([seq for t in timelines for seq in t.seqs], stored)


async def test_sigterm_drains_every_worker(kafka3: KafkaCluster, tmp_path: Path) -> None:
    proxy = await asyncio.to_thread(start_proxy, tmp_path, kafka3.bootstrap_servers, 3, CONFIG)
    kafka3.create_topic("workers-restart", partitions=3)
    producer = AIOKafkaProducer(
        bootstrap_servers=proxy.bootstrap, acks="all", enable_idempotence=True, linger_ms=2
    )
    await producer.start()
    acked: list[float] = []
    failed: list[BaseException] = []
    stop = asyncio.Event()

    async def produce() -> None:
        pending: set[asyncio.Future[object]] = set()
        sent = 0
        while not stop.is_set() and sent < 200_000:
            future = await producer.send("workers-restart", str(sent).encode())
            future.add_done_callback(
                lambda f: (
                    failed.append(f.exception())
                    if f.exception()
                    else acked.append(time.monotonic())
                )
            )
            pending.add(future)
            sent += 1
            if len(pending) >= 50:
                _, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
        await asyncio.wait_for(asyncio.gather(*pending, return_exceptions=True), 120)

    async def acks_after(since: float, count: int) -> None:
        deadline = time.monotonic() + 60
        while sum(1 for at in acked if at > since) < count:
            assert time.monotonic() < deadline and not task.done(), f"no acks since {since}"
            await asyncio.sleep(0.1)

    task = asyncio.create_task(produce())
    try:
        await acks_after(0.0, 500)
        drained = proxy
        proxy = await asyncio.to_thread(restart_proxy, proxy)
        await acks_after(time.monotonic(), 500)
    finally:
        stop.set()
        await task
        await producer.stop()
        proxy.stop()
    assert drained.process.returncode == 0 and proxy.process.returncode == 0
    log = proxy.log()  # the log of both runs
    assert log.count("shutting down") == 4, "every worker of both runs drains"
    assert "drain timed out" not in log
    assert not failed, f"{len(failed)} sends failed, the first: {failed[0]!r}"
