"""Usage samples to recommended quotas and back, end to end, as an operator runs it.

Two principals produce through the proxy into the real cluster at steady rates while it
writes usage samples; `kafka-quota-proxy report` turns the samples into a quota file; that
file replaces the proxy's config and is hot-reloaded; then the heavier principal floods and is
throttled by its recommended quota while the lighter one, at its usual rate, is not.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from aiokafka import AIOKafkaProducer

from config.loader import load_config
from localkafka.cluster import KafkaCluster
from localkafka.load import Timeline
from localkafka.proxy_process import RunningProxy, start_proxy
from localkafka.scrape import scrape, value, wait_for_metric
from quotas.entities import QuotaEntity, QuotaType

TOPIC = "usage-report"
RECORD = b"x" * 10_000
HEAVY, LIGHT = "heavy", "light"
#: records per second of each principal while it behaves
PACE = {HEAVY: 20, LIGHT: 2}
#: one-second sampling windows, published every second, so the test need not wait long
USAGE = """config_poll_interval_s = 0.2

[usage]
interval_s = 1
rotate_interval_s = 1
directory = "samples"
"""


@pytest.fixture
def sampled_proxy(kafka3: KafkaCluster, tmp_path: Path) -> Iterator[RunningProxy]:
    kafka3.create_topic(TOPIC, partitions=3, replication=1)
    proxy = start_proxy(tmp_path, kafka3.bootstrap_servers, 3, extra=USAGE)
    yield proxy
    proxy.stop()


async def produce(
    bootstrap: str, client_id: str, per_second: float | None, seconds: float, acks: Timeline
) -> None:
    """`per_second` records a second, or as fast as acks come back (None), for `seconds`."""
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap, client_id=client_id, acks=1, linger_ms=0
    )
    await producer.start()
    try:
        start = time.monotonic()
        sent = 0
        while time.monotonic() < start + seconds:
            if per_second is None:
                batch = [await producer.send(TOPIC, RECORD) for _ in range(8)]
                await asyncio.wait_for(asyncio.gather(*batch), 60)
                acks.add(8 * len(RECORD))
                continue
            await asyncio.wait_for(await producer.send(TOPIC, RECORD), 60)
            acks.add(len(RECORD))
            sent += 1
            await asyncio.sleep(max(0.0, start + sent / per_second - time.monotonic()))
    finally:
        await producer.stop()


def samples_of(directory: Path) -> list[dict[str, object]]:
    return [
        json.loads(line)
        for path in sorted(directory.glob("usage-*.jsonl"))
        for line in path.read_text().splitlines()
    ]


async def wait_for_samples(directory: Path, client_ids: set[str], after_ms: int) -> None:
    """Until published files hold a window of each client-id that began after `after_ms`."""
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        seen = {
            s["client_id"]
            for s in samples_of(directory)
            if isinstance(s["window_start_ms"], int) and s["window_start_ms"] >= after_ms
        }
        if client_ids <= seen:
            return
        await asyncio.sleep(0.25)
    raise AssertionError(f"no samples of {client_ids} after {after_ms} in {directory}")


def report(proxy: RunningProxy, out: Path) -> subprocess.CompletedProcess[str]:
    command = [
        *(sys.executable, "-m", "proxy", "report"),
        *("--samples", str(proxy.config_path.parent / "samples")),
        *("--config", str(proxy.config_path), "--out", str(out), "--master", "local[2]"),
        *("--conf", "spark.ui.showConsoleProgress=false"),
        *("--conf", "spark.ui.enabled=false"),  # no web UI to start: a few seconds
        *("--conf", "spark.sql.shuffle.partitions=2"),
    ]
    return subprocess.run(command, capture_output=True, text=True, timeout=300)


async def test_recommended_quotas_from_samples_throttle_the_heavier_principal_on_the_next_run(
    sampled_proxy: RunningProxy, tmp_path: Path
) -> None:
    proxy, samples = sampled_proxy, tmp_path / "samples"
    bootstrap = proxy.bootstrap
    behaving = {client_id: Timeline() for client_id in PACE}
    await asyncio.gather(*(produce(bootstrap, c, rate, 8, behaving[c]) for c, rate in PACE.items()))
    heavy_rate = behaving[HEAVY].rate(1, 8)  # after the producer's start
    await wait_for_samples(samples, set(PACE), int(time.time() * 1000) - 2000)

    done = report(proxy, tmp_path / "report")
    assert done.returncode == 0, done.stderr[-3000:]
    recommended = tmp_path / "report" / "quotas.toml"
    limits = load_config(recommended).quotas.limits[QuotaType.PRODUCE]
    heavy_quota = limits[QuotaEntity("ANONYMOUS", HEAVY)]
    light_quota = limits[QuotaEntity("ANONYMOUS", LIGHT)]
    # a high percentile of its one-second windows, times 1.5: above what it did on average
    assert heavy_quota > 1.4 * heavy_rate, (heavy_quota, heavy_rate)
    assert light_quota < heavy_quota

    reloads = "kafka_quota_proxy_config_reloads_total"
    before = value(scrape(proxy.metrics_url), reloads, result="success") or 0
    os.replace(recommended, proxy.config_path)  # [proxy] and [usage] came along with it
    await wait_for_metric(
        proxy.metrics_url, lambda m: (value(m, reloads, result="success") or 0) > before
    )
    started_ms = int(time.time() * 1000)
    flood, steady = Timeline(), Timeline()
    await asyncio.gather(
        produce(bootstrap, HEAVY, None, 8, flood),
        produce(bootstrap, LIGHT, PACE[LIGHT], 8, steady),
    )
    flood_rate = flood.rate(2, 8)
    await wait_for_samples(samples, {HEAVY, LIGHT}, started_ms)
    after = [s for s in samples_of(samples) if int(str(s["window_start_ms"])) >= started_ms]
    throttled = {
        client_id: sum(
            int(str(s["throttled_requests"])) for s in after if s["client_id"] == client_id
        )
        for client_id in (HEAVY, LIGHT)
    }
    print(
        f"behaving: heavy {heavy_rate:.0f} B/s -> quota {heavy_quota:.0f}, light quota "
        f"{light_quota:.0f}; flood {flood_rate:.0f} B/s, throttled "
        f"requests {throttled}"
    )
    assert throttled[HEAVY] > 0, "the flood was never throttled"
    assert throttled[LIGHT] == 0, "the principal that kept its pace was throttled"
    # held near its quota: Kafka's 11 one-second windows let a flood's first burst through
    assert flood_rate < 3 * heavy_quota
