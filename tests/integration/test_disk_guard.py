"""The disk guard against real brokers (issue 53; docs/ceilings.md#the-disk-guard).

Three brokers: broker 1's log directory is a 200 MB tmpfs of its own (its metadata log
elsewhere), the others' the machine's disk. A librdkafka producer of two processes offers
8 MB/s to a topic broker 1 holds, each process through another of two members of one fleet,
while an aiokafka producer writes 1 MB/s into a topic broker 2 holds. Each member reads the
log directories every half second: past the soft limit the first producer is ramped down,
ever more slowly towards the hard limit; the volume never fills and broker 1 stays online,
while the second producer keeps its rate. With the guard in shadow mode, the same producer
takes the volume far past the hard limit: the test stops it there rather than fill it.
"""

from __future__ import annotations

import asyncio
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from config.cluster import ClusterSettings
from localkafka.cluster import Broker, KafkaCluster
from localkafka.fleet import confluent_fleet, fleet_rate, fleet_timelines
from localkafka.load import Timeline, aiokafka_flood
from localkafka.proxy_process import start_proxy
from localkafka.scrape import scrape, total, wait_for_metric
from protocol.log_dirs import DESCRIBE_LOG_DIRS, VOLUME_VERSION, describe_body, read_log_dirs
from proxy.control.cluster import ClusterClient

MB = 1_000_000
SMALL, OTHER = 1, 2
SOFT, HARD = 140 * MB, 110 * MB
#: what the writer of the small volume offers: the ramp is read every half second, and a
#: writer many times faster would cross the whole ramp between two readings
FILL_RATE = 8 * MB
MINIMUM = 20_000
COLD_RATE = 1_000_000
SECONDS = 14.0


def guard_config(shadow: bool) -> str:
    return f"""
[guards.disk]
interval_s = 0.5
stale_after_s = 10
minimum_rate = {MINIMUM}
shadow = {str(shadow).lower()}
[brokers."{SMALL}"]
kafka-quota-proxy.disk_soft_limit_bytes = {SOFT}
kafka-quota-proxy.disk_hard_limit_bytes = {HARD}
"""


@pytest.fixture(scope="module")
def cluster() -> Iterator[KafkaCluster]:
    with tempfile.TemporaryDirectory(prefix="disk-guard-") as workdir:
        kafka = KafkaCluster(
            brokers_count=3,
            workdir=Path(workdir),
            small_disks={SMALL: 200},
            overrides={"log.segment.bytes": str(16 * MB)},
        )
        kafka.start()
        try:
            yield kafka
        finally:
            kafka.stop()


def broker(kafka: KafkaCluster, node_id: int) -> Broker:
    return next(b for b in kafka.brokers if b.node_id == node_id)


async def usable(address: str) -> int:
    """The small volume's usable bytes, as its broker describes them."""
    host, _, port = address.rpartition(":")
    async with ClusterClient(ClusterSettings(), [(host, int(port))], 10.0) as client:
        frame = await client.ask(DESCRIBE_LOG_DIRS, VOLUME_VERSION, describe_body())
    error, dirs = read_log_dirs(frame)
    assert error == 0 and all(d.error_code == 0 for d in dirs), dirs
    return min(d.usable_bytes for d in dirs)


async def watch(address: str, metrics: str, until: float) -> list[tuple[int, float | None]]:
    """(usable bytes, the guard's ceiling in force) every half second until `until`."""
    seen = []
    while time.monotonic() < until:
        ceiling = total(await asyncio.to_thread(scrape, metrics), "kafka_quota_proxy_ceiling",
                        ceiling="disk_guard", broker=str(SMALL))  # fmt: skip
        seen.append((await usable(address), ceiling or None))
        await asyncio.sleep(0.5)
    return seen


async def test_writers_of_a_filling_disk_are_ramped_down_and_others_untouched(
    cluster: KafkaCluster, tmp_path: Path
) -> None:
    small = broker(cluster, SMALL)
    cluster.create_topic("disk-hot", 2, replicas=[[SMALL]] * 2)
    cluster.create_topic("disk-cold", 2, replicas=[[OTHER]] * 2)
    config = guard_config(False) + '[fleet]\nname = "disk-guard"\n'
    members = [
        start_proxy(tmp_path, cluster.bootstrap_servers, 3, config, f"guarded-{index}")
        for index in range(2)
    ]
    try:
        cold = Timeline()
        # the filler's two processes write through one member each: the members hold the
        # directory's ceiling together
        with confluent_fleet(
            [member.bootstrap for member in members],
            "filler",
            "disk-hot",
            SECONDS,
            2,
            offered_rate=FILL_RATE / 2,
        ) as fleet:
            _, seen = await asyncio.gather(
                aiokafka_flood(
                    members[1].bootstrap, "neighbour", "disk-cold", SECONDS, cold, COLD_RATE
                ),
                watch(small.address, members[0].metrics_url, time.monotonic() + SECONDS),
            )
            filler = await asyncio.to_thread(fleet_timelines, fleet, SECONDS + 90)
        metrics = [await asyncio.to_thread(scrape, member.metrics_url) for member in members]
        left = await usable(small.address)
    finally:
        for member in members:
            member.stop()
    ceilings = [ceiling for _, ceiling in seen if ceiling is not None]
    print(
        f"usable from {seen[0][0]:,} to {min(u for u, _ in seen):,} bytes (soft {SOFT:,}, hard "
        f"{HARD:,}); the guard's ceilings {', '.join(f'{c:,.0f}' for c in ceilings)} B/s; "
        f"filler {fleet_rate(filler, 0, SECONDS):,.0f} B/s through two members, neighbour "
        f"{cold.rate(0, SECONDS):,.0f} B/s"
    )
    # the hard limit is approached, not crossed by more than a reading's worth of writes
    assert min(u for u, _ in seen) > HARD - FILL_RATE and left > HARD - FILL_RATE
    assert len(set(ceilings)) >= 5 and ceilings == sorted(ceilings, reverse=True)  # graded
    assert ceilings[0] > FILL_RATE / 2  # from the pace it had: no cliff
    throttles = "kafka_quota_proxy_ceiling_throttles_total"
    assert all(total(each, throttles, client_id="filler") > 0 for each in metrics)
    assert all(total(each, throttles, client_id="neighbour") == 0 for each in metrics)
    assert cold.rate(0, SECONDS) >= 0.9 * COLD_RATE
    await usable(small.address)  # broker 1 still answers: its log directory never failed


async def test_in_shadow_mode_the_same_writer_fills_the_disk(
    cluster: KafkaCluster, tmp_path: Path
) -> None:
    """Shown, then stopped: from where the guarded run left the volume, under its soft
    limit, the writer (as fast as it goes: nothing slows it) takes it past the hard limit by
    a third of it, and is killed there before the volume is full. It starts once the guard
    has read the volume: unguarded, it wrote 30 MB in the half second before the first
    reading, and crossed a third past the hard limit before a Produce was judged."""
    small = broker(cluster, SMALL)
    cluster.create_topic("disk-shadow", 2, replicas=[[SMALL]] * 2)
    proxy = start_proxy(tmp_path, cluster.bootstrap_servers, 3, guard_config(True), "shadow")
    try:
        await wait_for_metric(proxy.metrics_url, lambda samples: total(
            samples, "kafka_quota_proxy_disk_usable_bytes", broker=str(SMALL)) > 0)  # fmt: skip
        with confluent_fleet(proxy.bootstrap, "filler", "disk-shadow", SECONDS, 1):
            deadline = time.monotonic() + SECONDS
            lowest = await usable(small.address)
            while lowest > HARD * 2 / 3 and time.monotonic() < deadline:
                await asyncio.sleep(0.2)
                lowest = min(lowest, await usable(small.address))
        metrics = await asyncio.to_thread(scrape, proxy.metrics_url)
    finally:
        proxy.stop()
    print(f"shadow: usable down to {lowest:,} bytes (hard limit {HARD:,})")
    assert lowest <= HARD * 2 / 3
    shadowed = "kafka_quota_proxy_ceiling_shadow_throttles_total"
    assert total(metrics, shadowed, client_id="filler") > 0
    assert total(metrics, "kafka_quota_proxy_ceiling_throttles_total", client_id="filler") == 0
