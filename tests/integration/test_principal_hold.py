"""A principal is held as a whole across processes and brokers (issue 13).

Three librdkafka processes share one client-id and flood a topic of six partitions spread over
three brokers: nine connections, three per broker, each of which a broker would throttle on its
own. Through the proxy the fleet together stays near its producer_byte_rate. What any machine
can show is asserted: the fleet was throttled, made progress and stayed under 1.10 x the quota
over 20 s; a second principal producing beside it at the same time was never throttled; every
acknowledged record is stored once. The bound is reasoned in tests/integration/support/held.py.
bench/quota_fidelity.py sets this beside the brokers' own quota, which admits more.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from localkafka.cluster import KafkaCluster
from localkafka.proxy_process import SHORT_QUOTA_WINDOWS, RunningProxy, start_proxy
from tests.integration.support.held import (
    BOUND,
    FIRST_WINDOW_S,
    FLEET,
    MEASURED_S,
    NEIGHBOUR,
    PROCESSES,
    QUOTA,
    Watch,
    assert_stored_once,
    run_held,
)

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
    watch = Watch([hold_proxy.metrics_url])
    run = await run_held(kafka3, hold_proxy.bootstrap, FLEET, NEIGHBOUR, NEIGHBOUR_RATE, watch)
    seconds = FIRST_WINDOW_S + MEASURED_S
    print(
        f"fleet of {PROCESSES}: {run.rate:,.0f} B/s over {MEASURED_S:.0f} s"
        f" ({run.rate / QUOTA:.3f} x); neighbour: {run.neighbour.rate(0, seconds):,.0f} B/s"
    )
    assert 0 < run.rate < BOUND * QUOTA
    watch.assert_held()
    assert run.neighbour.rate(0, seconds) > 0
    assert_stored_once(kafka3, FLEET, run.timelines)
    assert_stored_once(kafka3, NEIGHBOUR, [run.neighbour])
