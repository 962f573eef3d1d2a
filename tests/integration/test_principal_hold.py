"""A principal is held as a whole across processes and brokers (issue 13).

Three librdkafka processes share one client-id and flood a topic of six partitions spread over
three brokers: nine connections, three per broker, each of which a broker would throttle on its
own. Through the proxy the fleet together stays near its producer_byte_rate. What any machine
can show is asserted: the fleet was throttled, made progress and stayed under 1.10 x the quota
over 30 s; a second principal producing beside it at the same time was never throttled; every
acknowledged record is stored once. The bound is reasoned in tests/integration/held.py.
bench/quota_fidelity.py sets this beside the brokers' own quota, which admits more.
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

pytestmark = pytest.mark.integration

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
    watch = Watch([hold_proxy.metrics_url])

    watcher = asyncio.create_task(watch.run())
    try:
        with confluent_fleet(
            bootstrap, FLEET, FLEET, seconds, PROCESSES, in_flight=IN_FLIGHT
        ) as fleet:
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
    watch.assert_held()
    assert neighbour.rate(0, seconds) > 0

    stored = [seq_of(value) for value in read_all(kafka3.bootstrap_servers, FLEET)]
    assert_no_loss_or_duplicates([seq for t in timelines for seq in t.seqs], stored)
    stored = [seq_of(value) for value in read_all(kafka3.bootstrap_servers, NEIGHBOUR)]
    assert_no_loss_or_duplicates(neighbour.seqs, stored)
