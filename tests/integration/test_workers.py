"""One instance of two workers ([proxy] workers = 2) holds a principal as one process does
(issue 27); that SIGTERM drains both is in test_rolling_restart.py.

The workers share every listener port; the kernel spreads the connections of three
librdkafka processes, which share one client-id, over both (tests/integration/held.py). Held
apart, each worker would admit the quota; as the fleet of their host, the principal stays
under the bound one process is held to, its neighbour is never throttled, and every
acknowledged record is stored once.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from localkafka import KafkaCluster
from localkafka.fleet import confluent_fleet, fleet_rate, fleet_timelines
from localkafka.load import (
    Timeline,
    aiokafka_flood,
    assert_no_loss_or_duplicates,
    read_all,
    seq_of,
)
from localkafka.proxy_process import SHORT_QUOTA_WINDOWS, RunningProxy, start_proxy
from tests.integration.held import (
    BOUND,
    FIRST_WINDOW_S,
    FLEET,
    IN_FLIGHT,
    MEASURED_S,
    NEIGHBOUR,
    PARTITIONS,
    PROCESSES,
    QUOTA,
    Watch,
)
from tests.integration.scrape import scrape, total

pytestmark = pytest.mark.integration

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
    watch = Watch(workers.metrics_urls, workers=True)
    watcher = asyncio.create_task(watch.run())
    try:
        with confluent_fleet(
            workers.bootstrap, FLEET, "workers-held", seconds, PROCESSES, in_flight=IN_FLIGHT
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
    watch.assert_held()
    stored = [seq_of(value) for value in read_all(kafka3.bootstrap_servers, "workers-held")]
    assert_no_loss_or_duplicates([seq for t in timelines for seq in t.seqs], stored)
