"""producer_byte_rate and consumer_byte_rate hold real clients through the proxy.

Each client sends or reads as fast as it can under its own client-id, all at once. What a
real broker and real clients can show on any machine is asserted: every client was throttled,
made progress, and never got more than the quota plus the burst Kafka's windows allow over the
20 s after the first quota window; nothing was lost or duplicated; a principal without a quota
was never throttled. How close to the quota a client gets depends on how fast this machine
lets it offer load: the exact rates are proven on a virtual clock (tests/unit/
test_quota_fidelity.py), and bench/quota_fidelity.py sets the proxy beside a broker's own quota.

The quota windows are 2 x 1 s here. With Kafka's default 11 x 1 s, Kafka itself lets a
greedy client burst ten windows' worth of bytes every eleven seconds.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Iterator
from pathlib import Path

import pytest

from localkafka.cluster import KafkaCluster
from localkafka.load import (
    RECORD_BYTES,
    Timeline,
    aiokafka_drain,
    aiokafka_flood,
    assert_no_loss_or_duplicates,
    java_drain,
    java_drain_rate,
    java_fill,
    java_flood,
    java_flood_reports,
    kafka_python_drain,
    kafka_python_flood,
    read_all,
    reaped,
    seq_of,
)
from localkafka.proxy_process import SHORT_QUOTA_WINDOWS, RunningProxy, start_proxy
from localkafka.scrape import scrape, value, wait_for_metric

QUOTA = 1_000_000
FIRST_WINDOW_S, MEASURED_S = 2.0, 15.0
BYSTANDER_RATE = 10 * QUOTA
PRODUCERS = ("quota-aiokafka", "quota-kafka-python", "quota-java", "flood-java")
CONSUMERS = ("drain-aiokafka", "drain-kafka-python", "drain-java")
CONFIG = SHORT_QUOTA_WINDOWS + "".join(
    f'\n[clients."{client}"]\n{key} = {QUOTA}\n'
    for key, clients in (("producer_byte_rate", PRODUCERS), ("consumer_byte_rate", CONSUMERS))
    for client in clients
)


@pytest.fixture(scope="module")
def byte_rate_proxy(
    kafka3: KafkaCluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RunningProxy]:
    proxy = start_proxy(tmp_path_factory.mktemp("byte-rate"), kafka3.bootstrap_servers, 3, CONFIG)
    yield proxy
    proxy.stop()


#: over MEASURED_S, the most a client may get: the quota, plus the first windows' burst (one
#: window with 2 x 1 s), plus one request that crosses the quota (a Fetch: one window's worth)
PRODUCE_BOUND = 1 + (1.0 + 0.1) / MEASURED_S
FETCH_BOUND = 1 + (1.0 + 1.0 + 0.1) / MEASURED_S


def assert_held(name: str, rate: float, bound: float) -> None:
    print(f"{name}: {rate:,.0f} B/s over {MEASURED_S:.0f} s ({rate / QUOTA:.3f} x quota)")
    assert 0 < rate <= bound * QUOTA, f"{name}: {rate:,.0f} B/s against {QUOTA:,}"


def assert_throttled(metrics_url: str, group: str, clients: tuple[str, ...]) -> None:
    samples = scrape(metrics_url)
    for client in clients:
        throttle = value(samples, f"kafka_server_{group}_throttle_time", user="", client_id=client)
        assert throttle is not None and throttle > 0, (client, throttle)


async def test_producers_are_held_to_their_byte_rate(
    kafka3: KafkaCluster, byte_rate_proxy: RunningProxy
) -> None:
    for client in PRODUCERS[:3]:
        kafka3.create_topic(client, partitions=1)
    bootstrap = byte_rate_proxy.bootstrap
    seconds = FIRST_WINDOW_S + MEASURED_S
    java_records = int(QUOTA / RECORD_BYTES * (seconds + 5))
    timelines = {client: Timeline() for client in PRODUCERS[:2]}
    with reaped(java_flood(bootstrap, PRODUCERS[2], PRODUCERS[2], java_records)) as java:
        aio_sent, kp_sent = await asyncio.gather(
            aiokafka_flood(bootstrap, PRODUCERS[0], PRODUCERS[0], seconds, timelines[PRODUCERS[0]]),
            asyncio.to_thread(
                kafka_python_flood,
                bootstrap,
                PRODUCERS[1],
                PRODUCERS[1],
                seconds,
                timelines[PRODUCERS[1]],
            ),
        )
        reports = await asyncio.to_thread(java_flood_reports, java, 120)

    assert_throttled(byte_rate_proxy.metrics_url, "produce", PRODUCERS[:3])
    for client, timeline in timelines.items():
        span = timeline.rate(FIRST_WINDOW_S, FIRST_WINDOW_S + MEASURED_S)
        assert_held(client, span, PRODUCE_BOUND)
    # ProducerPerformance reports every 5 s: those after the first one make MEASURED_S
    after_first = reports[1 : 1 + int(MEASURED_S // 5)]
    assert len(after_first) == MEASURED_S // 5, reports
    records = sum(sent for sent, _ in after_first)
    java_rate = records * RECORD_BYTES / sum(s for _, s in after_first)
    assert_held("ProducerPerformance", java_rate, PRODUCE_BOUND)

    for (client, timeline), sent in zip(timelines.items(), (aio_sent, kp_sent), strict=True):
        stored = [seq_of(value) for value in read_all(kafka3.bootstrap_servers, client)]
        assert_no_loss_or_duplicates(timeline.seqs, stored)
        assert len(stored) == sent
    assert len(read_all(kafka3.bootstrap_servers, PRODUCERS[2])) == java_records


async def test_consumers_are_held_to_their_byte_rate(
    kafka3: KafkaCluster, byte_rate_proxy: RunningProxy, tmp_path: Path
) -> None:
    source = "drain-source"
    kafka3.create_topic(source, partitions=1)
    seconds = FIRST_WINDOW_S + MEASURED_S
    records = int(QUOTA / RECORD_BYTES * (seconds + 10))
    java_fill(kafka3, source, records)
    bootstrap = byte_rate_proxy.bootstrap
    timelines = {client: Timeline() for client in CONSUMERS[:2]}
    java = java_drain(bootstrap, CONSUMERS[2], source, records, tmp_path / "c.properties")
    with reaped(java):
        await asyncio.gather(
            aiokafka_drain(bootstrap, CONSUMERS[0], source, seconds, timelines[CONSUMERS[0]]),
            asyncio.to_thread(
                kafka_python_drain,
                bootstrap,
                CONSUMERS[1],
                source,
                seconds,
                timelines[CONSUMERS[1]],
            ),
        )
        java_rate = await asyncio.to_thread(java_drain_rate, java, 120, MEASURED_S)
    assert_throttled(byte_rate_proxy.metrics_url, "fetch", CONSUMERS)
    assert_held("ConsumerPerformance", java_rate * RECORD_BYTES, FETCH_BOUND)
    for client, timeline in timelines.items():
        span = timeline.rate(FIRST_WINDOW_S, FIRST_WINDOW_S + MEASURED_S)
        assert_held(client, span, FETCH_BOUND)
        # every offset once, in order: the empty throttled fetches skipped or repeated nothing
        assert timeline.seqs == list(range(len(timeline.seqs)))


async def test_a_second_principal_keeps_its_throughput_next_to_a_throttled_one(
    kafka3: KafkaCluster, byte_rate_proxy: RunningProxy
) -> None:
    """A bystander without a quota offers 10 MB/s, alone and next to a flooder held to 1 MB/s
    (a separate JVM, so that only the proxy and the brokers are shared). The bystander is never
    throttled, and its records all arrive; how much of its offer a machine carries next to a
    flooding JVM is the machine's, so the ratio is printed, not asserted.
    """
    bystander, flooder = "bystander", PRODUCERS[3]
    for topic in (bystander, flooder):
        kafka3.create_topic(topic, partitions=1)
    bootstrap, metrics = byte_rate_proxy.bootstrap, byte_rate_proxy.metrics_url

    async def bystander_rate() -> float:
        timeline = Timeline()
        await aiokafka_flood(bootstrap, bystander, bystander, 6.0, timeline, BYSTANDER_RATE)
        return timeline.rate(1.0, 6.0)

    with reaped(java_flood(bootstrap, flooder, flooder, 25_000)):
        await wait_for_metric(
            metrics,
            lambda s: (
                (value(s, "kafka_server_produce_throttle_time", user="", client_id=flooder) or 0)
                > 0
            ),
            timeout_s=30,
        )
        shared = await bystander_rate()
        flooded = await asyncio.to_thread(scrape, metrics)
    alone = await bystander_rate()  # after: connections, segments and JIT are warm by then
    print(
        f"bystander B/s: alone {alone:,.0f}, next to the flooder {shared:,.0f}"
        f" ({shared / alone:.0%})"
    )
    assert shared > 0 and alone > 0
    throttle = value(flooded, "kafka_server_produce_throttle_time", user="", client_id=bystander)
    assert throttle is not None and math.isnan(throttle), "the bystander was throttled"
    final = scrape(metrics)
    throttle = value(final, "kafka_server_produce_throttle_time", user="", client_id=bystander)
    assert throttle is not None and math.isnan(throttle), "the bystander was throttled"
