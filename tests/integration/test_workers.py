"""One instance of two workers ([proxy] workers = 2) holds a principal as one process does
(issue 27); that SIGTERM drains both is in test_rolling_restart.py.

The workers share every listener port; the kernel spreads the connections of three
librdkafka processes, which share one client-id, over both (tests/integration/support/held.py). Held
apart, each worker would admit the quota; as the fleet of their host, the principal stays
under the bound one process is held to, its neighbour is never throttled, and every
acknowledged record is stored once.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from localkafka.cluster import KafkaCluster
from localkafka.proxy_process import SHORT_QUOTA_WINDOWS, RunningProxy, start_proxy
from localkafka.scrape import scrape, total
from tests.integration.support.held import (
    BOUND,
    FLEET,
    MEASURED_S,
    NEIGHBOUR,
    QUOTA,
    Watch,
    assert_stored_once,
    run_held,
)

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
    watch = Watch(workers.metrics_urls, workers=True)
    run = await run_held(
        kafka3, workers.bootstrap, "workers-held", "workers-neighbour", QUOTA / 2, watch
    )
    accepted = [
        total(await asyncio.to_thread(scrape, url), "kafka_quota_proxy_connections_accepted_total")
        for url in workers.metrics_urls
    ]
    print(
        f"2 workers: {run.rate:,.0f} B/s over {MEASURED_S:.0f} s ({run.rate / QUOTA:.3f} x);"
        f" connections accepted per worker: {accepted}"
    )
    assert all(accepted), "a worker served no connection"
    assert 0 < run.rate < BOUND * QUOTA
    watch.assert_held()
    assert_stored_once(kafka3, "workers-held", run.timelines)
