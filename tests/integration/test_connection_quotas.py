"""Kafka's connection quotas against real clients: a reconnect storm from one address is held
to its connection_creation_rate while another address connects freely, and an address at
its max.connections.per.ip is refused at once."""

from __future__ import annotations

import asyncio
import struct
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from localkafka.cluster import KafkaCluster
from localkafka.proxy_process import SHORT_QUOTA_WINDOWS, RunningProxy, start_proxy
from localkafka.scrape import scrape, total
from tests.integration.support.listeners import API_VERSIONS_V0, served

STORM_ADDRESS = "127.0.0.2"
CAPPED_ADDRESS = "127.0.0.3"
RATE = 10  # connections per second for the storming address
STORM_S = 4.0


@pytest.fixture(scope="module")
def limited_proxy(
    kafka3: KafkaCluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RunningProxy]:
    extra = (
        f'max_connections_per_ip_overrides = {{ "{CAPPED_ADDRESS}" = 2 }}\n'
        f'\n[ips."{STORM_ADDRESS}"]\nconnection_creation_rate = {RATE}\n\n' + SHORT_QUOTA_WINDOWS
    )
    proxy = start_proxy(tmp_path_factory.mktemp("limits"), kafka3.brokers[0].address, 3, extra)
    yield proxy
    proxy.stop()


async def test_a_reconnect_storm_is_held_to_its_rate_and_others_connect_freely(
    limited_proxy: RunningProxy,
) -> None:
    bootstrap = limited_proxy.bootstrap
    outcomes: list[bool] = []
    started = time.monotonic()

    async def storm() -> None:
        while time.monotonic() - started < STORM_S and len(outcomes) < 5000:
            outcomes.append(await served(bootstrap, STORM_ADDRESS))

    storms = [asyncio.create_task(storm()) for _ in range(20)]
    others = [await served(bootstrap, "127.0.0.1") for _ in range(30)]
    await asyncio.gather(*storms)
    elapsed = time.monotonic() - started
    storm_served = sum(outcomes)
    print(
        f"storm: {len(outcomes)} attempts, {storm_served} served in {elapsed:.1f}s;"
        f" another address: {sum(others)}/30 served"
    )
    assert all(others), "another address was throttled"
    # Kafka's Rate over 2 x 1 s windows: at most RATE/s, plus one window of burst
    assert storm_served <= RATE * (elapsed + 2), (storm_served, elapsed)
    assert len(outcomes) > 2 * storm_served  # the storm did go over its rate
    samples = scrape(limited_proxy.metrics_url)
    throttled = total(
        samples, "kafka_quota_proxy_connections_throttled_total", listener="bootstrap"
    )
    assert throttled == len(outcomes) - storm_served


async def test_an_address_at_its_maximum_is_refused_at_once(limited_proxy: RunningProxy) -> None:
    kept: list[asyncio.StreamWriter] = []
    assert await served(limited_proxy.bootstrap, CAPPED_ADDRESS, kept)
    assert await served(limited_proxy.bootstrap, CAPPED_ADDRESS, kept)
    assert not await served(limited_proxy.bootstrap, CAPPED_ADDRESS)
    assert await served(limited_proxy.bootstrap, "127.0.0.1")
    for writer in kept:
        writer.close()
    samples = scrape(limited_proxy.metrics_url)
    assert total(samples, "kafka_quota_proxy_connections_refused_total") == 1
    assert "already has max.connections.per.ip (2)" in limited_proxy.log()


async def test_at_max_connections_a_new_client_waits_for_a_slot(
    kafka3: KafkaCluster, tmp_path: Path
) -> None:
    """Kafka's max.connections: the acceptor stops while every slot is taken, so the next
    client waits in the kernel's backlog, unanswered and not closed, until one closes."""
    proxy = await asyncio.to_thread(
        start_proxy, tmp_path, kafka3.brokers[0].address, 3, "max_connections = 2\n"
    )
    try:
        kept: list[asyncio.StreamWriter] = []
        assert await served(proxy.bootstrap, "127.0.0.1", kept)
        assert await served(proxy.bootstrap, "127.0.0.1", kept)
        host, port = proxy.bootstrap.rsplit(":", 1)
        reader, writer = await asyncio.open_connection(host, int(port))
        writer.write(struct.pack(">i", len(API_VERSIONS_V0)) + API_VERSIONS_V0)
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(reader.read(4), 1.0)
        assert not reader.at_eof()
        kept.pop().close()
        assert len(await asyncio.wait_for(reader.readexactly(4), 10)) == 4  # a slot is free
        for held in (*kept, writer):
            held.close()
    finally:
        proxy.stop()
