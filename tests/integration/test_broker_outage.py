"""A broker of three stopped and restarted under load through the proxy: its listener
refuses while it is down (so clients back off instead of reconnecting in a loop), opens
again when it is back, and an idempotent acks=all VerifiableProducer loses and duplicates
nothing while other clients keep being served."""

from __future__ import annotations

import asyncio
import json
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from kafka import KafkaConsumer, KafkaProducer

from localkafka.cluster import KafkaCluster
from localkafka.jars import java_command
from localkafka.load import read_all
from localkafka.proxy_process import RunningProxy, start_proxy
from localkafka.scrape import scrape, total, value
from tests.integration.support import clients
from tests.integration.support.listeners import answered, until

STOPPED = 3
#: acknowledgements awaited before the broker is stopped, and again once it is back
ACKS_PER_PHASE = 600


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaCluster]:
    kafka = KafkaCluster(brokers_count=3, workdir=tmp_path_factory.mktemp("outage"))
    kafka.start()
    yield kafka
    kafka.stop()


@pytest.fixture(scope="module")
def proxy(
    cluster: KafkaCluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RunningProxy]:
    running = start_proxy(tmp_path_factory.mktemp("outage-proxy"), cluster.brokers[0].address, 3)
    yield running
    running.stop()


def kafka_python_clients(bootstrap: str, topic: str, seconds: float) -> int:
    """A producer and a consumer of kafka-python, as in the report of the reconnect loop."""
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=5)
    consumer = KafkaConsumer(topic, bootstrap_servers=bootstrap, group_id="outage-readers")
    sent = 0
    try:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            producer.send(topic, b"x").get(timeout=30)
            sent += 1
            consumer.poll(timeout_ms=50)
    finally:
        producer.close()
        consumer.close()
    return sent


async def test_a_stopped_broker_is_refused_then_served_and_nothing_is_lost(
    cluster: KafkaCluster, proxy: RunningProxy, tmp_path: Path
) -> None:
    topic = "outage"
    await asyncio.to_thread(clients.create_topic, proxy.bootstrap, topic, 6, 3)
    await asyncio.to_thread(clients.create_topic, proxy.bootstrap, "bystander", 3, 3)
    config = tmp_path / "producer.properties"
    config.write_text("enable.idempotence=true\nretries=2147483647\ndelivery.timeout.ms=120000\n")
    verifiable = subprocess.Popen(
        java_command(
            "org.apache.kafka.tools.VerifiableProducer",
            [
                "--bootstrap-server",
                proxy.bootstrap,
                "--topic",
                topic,
                "--max-messages",
                "-1",  # until it is stopped, once the broker is back and serving
                "--throughput",
                "600",
                "--acks",
                "-1",
                "--producer.config",
                str(config),
            ],
            heap="256m",
        ),
        stdout=(tmp_path / "verifiable.out").open("w"),
        stderr=(tmp_path / "verifiable.err").open("w"),
    )
    broker_listener = proxy.broker_address(STOPPED)
    output = tmp_path / "verifiable.out"

    def acks() -> int:
        return output.read_text().count('"name":"producer_send_success"')

    async def acked_at_least(count: int) -> None:
        deadline = time.monotonic() + 60
        while acks() < count:
            assert verifiable.poll() is None and time.monotonic() < deadline, f"{acks()} acks"
            await asyncio.sleep(0.1)

    try:
        await acked_at_least(ACKS_PER_PHASE)  # producing steadily through the proxy
        assert await answered(broker_listener) is True
        await asyncio.to_thread(cluster.stop_broker, STOPPED)
        await until(None, broker_listener)  # refused, as the stopped broker refuses
        before = scrape(proxy.metrics_url)
        assert value(before, "kafka_quota_proxy_listener_up", listener=f"broker-{STOPPED}") == 0
        sent = await asyncio.to_thread(kafka_python_clients, proxy.bootstrap, "bystander", 8.0)
        during = scrape(proxy.metrics_url)
        accepted = total(
            during, "kafka_quota_proxy_connections_accepted_total", listener=f"broker-{STOPPED}"
        ) - total(
            before, "kafka_quota_proxy_connections_accepted_total", listener=f"broker-{STOPPED}"
        )
        print(f"broker {STOPPED} down 8 s: {accepted:.0f} connections accepted for it; {sent} sent")
        assert sent > 0
        assert accepted <= 20  # was 4,498 + 2,588 when every connection was accepted
        await asyncio.to_thread(cluster.restart_broker, STOPPED)
        await until(True, broker_listener)
        await acked_at_least(acks() + ACKS_PER_PHASE)  # and goes on with the broker back
        verifiable.terminate()  # its shutdown hook flushes, then prints what it sent and acked
        await asyncio.to_thread(verifiable.wait, 180)
    finally:
        if verifiable.poll() is None:
            verifiable.kill()
            verifiable.wait()
    events = [json.loads(line) for line in output.read_text().splitlines() if line.startswith("{")]
    summary = [e for e in events if e.get("name") == "tool_data"]
    assert summary, (tmp_path / "verifiable.err").read_text()[-3000:]
    acked = [e["value"] for e in events if e.get("name") == "producer_send_success"]
    failed = [e for e in events if e.get("name") == "producer_send_error"]
    # SIGTERM can land between the tool's stop check and its next send(), which then meets
    # the closed producer: that one record was never handed to Kafka
    closed = [e for e in failed if "closed" in e.get("message", "").lower()]
    print(f"VerifiableProducer: {summary[0]['sent']} sent, {len(acked)} acked")
    assert len(failed) == len(closed) <= 1, failed[:3]
    assert summary[0]["acked"] == len(acked) == summary[0]["sent"] - len(closed)
    stored = [value.decode() for value in read_all(cluster.bootstrap_servers, topic)]
    assert len(stored) == len(set(stored)), "duplicates stored"
    assert set(acked) <= set(stored), "acknowledged records lost"
    assert proxy.process.poll() is None
