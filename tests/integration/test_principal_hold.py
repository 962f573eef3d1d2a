"""A principal is held as a whole across processes and brokers (issue 13).

Three librdkafka processes share one client-id and flood a topic of six partitions spread over
three brokers: nine connections, three per broker, each of which a broker would throttle on its
own. Through the proxy the fleet together stays near its producer_byte_rate. What any machine
can show is asserted: the fleet was throttled, made progress and stayed under 1.10 x the quota
over 30 s; a second principal producing beside it at the same time was never throttled; every
acknowledged record is stored once. The bound leaves room for what Kafka's arithmetic allows
over 30 s: one window's burst (2 x 1 s windows) and one request over the quota, at most the
1000 records a process keeps in flight, 1 MB: 1 + 2 / 30 = 1.067 x at 1 MB/s.
bench/quota_fidelity.py sets this beside the brokers' own quota, which admits more.
"""

from __future__ import annotations

import asyncio
import math
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
from tests.integration.scrape import scrape, value

pytestmark = pytest.mark.integration

QUOTA = 1_000_000
FLEET, NEIGHBOUR = "fleet", "neighbour"
PROCESSES, PARTITIONS = 3, 6
FIRST_WINDOW_S, MEASURED_S = 2.0, 30.0
BOUND = 1.10
NEIGHBOUR_RATE = QUOTA
CONFIG = SHORT_QUOTA_WINDOWS + f'[clients."{FLEET}"]\nproducer_byte_rate = {QUOTA}\n'


@pytest.fixture(scope="module")
def hold_proxy(
    kafka3: KafkaCluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RunningProxy]:
    proxy = start_proxy(tmp_path_factory.mktemp("hold"), kafka3.bootstrap_servers, 3, CONFIG)
    yield proxy
    proxy.stop()


async def test_a_fleet_sharing_a_client_id_is_held_as_one_across_brokers(
    kafka3: KafkaCluster, hold_proxy: RunningProxy
) -> None:
    kafka3.create_topic(FLEET, partitions=PARTITIONS)
    kafka3.create_topic(NEIGHBOUR, partitions=1)
    bootstrap, seconds = hold_proxy.bootstrap, FIRST_WINDOW_S + MEASURED_S
    neighbour = Timeline()
    throttles: dict[str, list[float]] = {FLEET: [], NEIGHBOUR: []}

    async def watch_throttles() -> None:
        """Kafka's throttle-time metric averages over the quota windows (2 s here) and is NaN
        for a client never throttled; read twice a second, it misses no throttle."""
        while True:
            samples = await asyncio.to_thread(scrape, hold_proxy.metrics_url)
            for client, seen in throttles.items():
                throttle = value(
                    samples, "kafka_server_produce_throttle_time", user="", client_id=client
                )
                if throttle is not None and not math.isnan(throttle):
                    seen.append(throttle)
            await asyncio.sleep(0.5)

    watcher = asyncio.create_task(watch_throttles())
    try:
        with confluent_fleet(bootstrap, FLEET, FLEET, seconds, PROCESSES) as fleet:
            await aiokafka_flood(
                bootstrap, NEIGHBOUR, NEIGHBOUR, seconds, neighbour, NEIGHBOUR_RATE
            )
            timelines = await asyncio.to_thread(fleet_timelines, fleet, seconds + 90)
    finally:
        watcher.cancel()

    rate = fleet_rate(timelines, FIRST_WINDOW_S, FIRST_WINDOW_S + MEASURED_S)
    print(
        f"fleet of {PROCESSES}: {rate:,.0f} B/s over {MEASURED_S:.0f} s ({rate / QUOTA:.3f} x);"
        f" neighbour: {neighbour.rate(0, seconds):,.0f} B/s"
    )
    assert 0 < rate < BOUND * QUOTA
    assert max(throttles[FLEET], default=0) > 0, "the fleet was never throttled"
    assert not any(throttles[NEIGHBOUR]), f"the neighbour was throttled: {throttles[NEIGHBOUR]}"
    assert neighbour.rate(0, seconds) > 0

    stored = [seq_of(value) for value in read_all(kafka3.bootstrap_servers, FLEET)]
    assert_no_loss_or_duplicates([seq for t in timelines for seq in t.seqs], stored)
    stored = [seq_of(value) for value in read_all(kafka3.bootstrap_servers, NEIGHBOUR)]
    assert_no_loss_or_duplicates(neighbour.seqs, stored)
