"""Quotas from the config file hold a real producer, and a reload changes them live.

aiokafka produces through the proxy into the real 3-broker cluster while the config file
is edited: the raised limit applies to the same connection without a reconnect, and a
broken edit is refused while the last good limits stay in force.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest
from aiokafka import AIOKafkaProducer

from localkafka.cluster import KafkaCluster
from localkafka.load import Timeline
from localkafka.proxy_process import RunningProxy, start_proxy
from localkafka.scrape import scrape, total, value, wait_for_metric

CLIENT_ID = "reload-test"
TOPIC = "quota-reload"
PAYLOAD = b"x" * 10_000
LOW, HIGH = 20_000, 1_000_000
QUOTAS = f"""config_poll_interval_s = 0.2

[broker]
quota.window.num = 3
quota.window.size.seconds = 1

[users.ANONYMOUS.clients.{CLIENT_ID}]
producer_byte_rate = {LOW}
"""


@pytest.fixture
def quota_proxy(kafka3: KafkaCluster, tmp_path: Path) -> Iterator[RunningProxy]:
    kafka3.create_topic(TOPIC, partitions=1, replication=1)
    proxy = start_proxy(tmp_path, kafka3.bootstrap_servers, 3, extra=QUOTAS)
    yield proxy
    proxy.stop()


async def produce_until(producer: AIOKafkaProducer, acks: Timeline, stop: asyncio.Event) -> None:
    while not stop.is_set():
        futures = [await producer.send(TOPIC, PAYLOAD) for _ in range(4)]
        await asyncio.wait_for(asyncio.gather(*futures), 60)
        acks.add(4 * len(PAYLOAD))


async def test_reload_changes_a_live_throttle_and_a_broken_file_changes_nothing(
    quota_proxy: RunningProxy,
) -> None:
    metrics = quota_proxy.metrics_url
    labels = {"user": "ANONYMOUS", "client_id": CLIENT_ID}
    producer = AIOKafkaProducer(
        bootstrap_servers=quota_proxy.bootstrap, client_id=CLIENT_ID, acks=1, linger_ms=0
    )
    await producer.start()
    acks, stop = Timeline(), asyncio.Event()
    task = asyncio.create_task(produce_until(producer, acks, stop))
    try:
        await asyncio.sleep(6)
        low_rate = acks.rate(2, acks.elapsed())
        samples = scrape(metrics)
        assert (value(samples, "kafka_server_produce_throttle_time", **labels) or 0) > 0
        assert value(samples, "kafka_server_produce_byte_rate", **labels) is not None
        assert low_rate < 2 * LOW, f"held to {LOW} B/s, measured {low_rate:.0f}"
        connections = total(samples, "kafka_quota_proxy_connections_accepted_total")

        config = quota_proxy.config_path
        good = config.read_text()
        config.write_text(
            good.replace(f"producer_byte_rate = {LOW}", f"producer_byte_rate = {HIGH}")
        )
        await wait_for_metric(
            metrics,
            lambda s: value(s, "kafka_quota_proxy_config_reloads_total", result="success") == 1,
        )
        await asyncio.sleep(3)  # the mute earned under the old limit runs out
        raised_from = acks.elapsed()
        await asyncio.sleep(3)
        high_rate = acks.rate(raised_from, acks.elapsed())
        assert high_rate > 10 * low_rate and high_rate > 15 * LOW, (low_rate, high_rate)
        assert high_rate < 1.3 * HIGH

        config.write_text(good.replace(f"producer_byte_rate = {LOW}", 'producer_byte_rate = "1"'))
        await wait_for_metric(
            metrics,
            lambda s: value(s, "kafka_quota_proxy_config_reloads_total", result="failure") == 1,
        )
        kept_from = acks.elapsed()
        await asyncio.sleep(4)
        kept_rate = acks.rate(kept_from, acks.elapsed())
        # the refused file says 1 B/s: had it applied, almost nothing would be acked
        assert kept_rate > 10 * LOW, (high_rate, kept_rate)
        assert not task.done()
        print(
            f"produce B/s: limit {LOW} -> {low_rate:.0f}; {HIGH} -> {high_rate:.0f};"
            f" kept {kept_rate:.0f}"
        )
        final = scrape(metrics)
        assert total(final, "kafka_quota_proxy_connections_accepted_total") == connections
    finally:
        stop.set()
        await asyncio.wait_for(task, 60)
        await producer.stop()
    log = quota_proxy.log()
    assert (
        f"{config}: users/ANONYMOUS/clients/{CLIENT_ID}: key 'producer_byte_rate': "
        "expected a number, got '1'" in log
    )
    assert "the running config stays" in log
    assert "closing client" not in log
