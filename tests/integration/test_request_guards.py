"""The request-rate guards against a real broker (issue 52): a guard set through the proxy
with `kafka-quota-proxy quotas` (stock kafka-configs refuses a key it does not know before
sending it), and librdkafka clients refreshing their metadata every 10 ms, one client-id
guarded and one not, side by side through the same proxy.

Each client counts the requests it sent (librdkafka's statistics): every Metadata request a
client sends goes to the broker, since a guard only throttles (it never answers a request
itself). The guarded clients still produce, and see throttles, never errors.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer

from localkafka.cluster import KafkaCluster
from localkafka.proxy_process import RunningProxy, start_proxy
from localkafka.scrape import scrape, value

TOPIC = "request-guards"
CLIENTS = 4
STORM_S = 3.0
RATE, BURST_S, MAX_THROTTLE_MS = 5, 2, 1000
#: a KIP-848 member's time in its group: eight heartbeats at kafka1's 500 ms
MEMBER_S = 4.0
GUARDS = f"""
[guards.requests]
burst_s = {BURST_S}
max_throttle_ms = {MAX_THROTTLE_MS}

[quota_store]
topic = "kafka-quota-proxy-quotas-guards"
"""


@pytest.fixture
def proxy(kafka1: KafkaCluster, tmp_path: Path) -> Iterator[RunningProxy]:
    """With usage samples of every second: what it read of each client-id, and so sent to
    the broker (a guard answers nothing itself)."""
    kafka1.create_topic(TOPIC, partitions=1)
    usage = f'[usage]\ninterval_s = 1\ndirectory = "{tmp_path / "usage"}"\n'
    running = start_proxy(tmp_path, kafka1.bootstrap_servers, 1, GUARDS + usage)
    yield running
    running.stop()


def metadata_read(directory: Path) -> dict[str, int]:
    """Metadata requests the proxy read, by client-id, from its usage samples."""
    read: dict[str, int] = {}
    for path in directory.glob("usage-*.jsonl"):
        for line in path.read_text().splitlines():
            sample = json.loads(line)
            if sample["api"] == "Metadata":
                client_id = sample["client_id"]
                read[client_id] = read.get(client_id, 0) + sample["requests"]
    return read


@dataclass
class Refreshing:
    """What librdkafka clients of one client-id sent and were told."""

    #: each client's Metadata requests sent, from its latest statistics
    metadata: dict[int, int] = field(default_factory=dict)
    throttles: int = 0
    errors: list[str] = field(default_factory=list)
    delivered: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)


def refresh(bootstrap: str, client_id: str, index: int, seen: Refreshing, until: float) -> None:
    """One librdkafka producer that asks for metadata every 10 ms and sends a record every
    100 ms, for as long as the storm lasts."""

    def stats(text: str) -> None:
        brokers = json.loads(text)["brokers"].values()
        with seen.lock:
            seen.metadata[index] = sum(b["req"].get("Metadata", 0) for b in brokers)

    def throttled(event: Any) -> None:
        if event.throttle_time > 0:
            with seen.lock:
                seen.throttles += 1

    def delivered(error: Any, _message: Any) -> None:
        with seen.lock:
            if error is None:
                seen.delivered += 1
            else:
                seen.errors.append(str(error))

    def failed(error: Any) -> None:
        with seen.lock:
            seen.errors.append(str(error))

    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "client.id": client_id,
            "topic.metadata.refresh.interval.ms": 10,
            "statistics.interval.ms": 200,
            "stats_cb": stats,
            "throttle_cb": throttled,
            "error_cb": failed,
            "linger.ms": 0,
        }
    )
    while time.monotonic() < until:
        producer.produce(TOPIC, b"x", on_delivery=delivered)
        producer.poll(0.1)
    # a guarded client's records wait behind the Metadata requests it queued meanwhile,
    # each held a mute: what is not delivered by then is not waited for
    producer.flush(1)
    producer.poll(0.3)  # the last statistics


def storm(
    bootstrap: str, client_id: str, until: float
) -> tuple[Refreshing, list[threading.Thread]]:
    seen = Refreshing()
    threads = [
        threading.Thread(target=refresh, args=(bootstrap, client_id, index, seen, until))
        for index in range(CLIENTS)
    ]
    for thread in threads:
        thread.start()
    return seen, threads


def test_a_metadata_storm_is_held_to_its_guard_and_its_neighbour_is_not(
    kafka1: KafkaCluster, proxy: RunningProxy
) -> None:
    quotas = [sys.executable, "-m", "proxy", "quotas", "--bootstrap-server", proxy.bootstrap]
    entity = ["--entity-type", "clients", "--entity-name", "storm"]
    key = f"kafka-quota-proxy.metadata_rate={RATE}"
    subprocess.run([*quotas, "--alter", *entity, "--add-config", key], check=True, timeout=60)
    described = subprocess.run(
        [*quotas, "--describe", *entity], check=True, capture_output=True, text=True, timeout=60
    ).stdout
    assert f"kafka-quota-proxy.metadata_rate={RATE}" in described, described

    began = time.monotonic()
    until = began + STORM_S
    guarded, guarded_threads = storm(proxy.bootstrap, "storm", until)
    free, free_threads = storm(proxy.bootstrap, "calm", until)
    for thread in (*guarded_threads, *free_threads):
        thread.join(30)
    elapsed = time.monotonic() - began

    proxy.stop()  # its usage files are whole once it has stopped
    read = metadata_read(proxy.config_path.parent / "usage")
    sent = sum(guarded.metadata.values())
    # the bucket's burst and refill, and past them one request per connection (the
    # bootstrap's and the broker's) per mute
    connections = 2 * CLIENTS
    bound = RATE * BURST_S + RATE * elapsed + connections * (elapsed * 1000 / MAX_THROTTLE_MS + 1)
    print(f"read {read}, sent by the guarded clients {sent}, bound {bound:.0f}")
    assert read["storm"] <= bound, (read, bound, sent)
    assert read["calm"] > 4 * read["storm"], (read, sent)
    assert guarded.throttles > 0 and free.throttles == 0
    assert guarded.errors == [] and free.errors == []
    assert guarded.delivered > 0 and free.delivered > 0


def test_check_config_shows_a_guard_where_an_entity_sets_it(tmp_path: Path) -> None:
    """The guards' buckets and each entity's rate; a guard no entity sets is not listed."""
    config = tmp_path / "proxy.toml"
    config.write_text(
        '[proxy]\nupstream_bootstrap_servers = ["127.0.0.1:9"]\n'
        '[users."<default>"]\nkafka-quota-proxy.join_group_rate = 2\n'
    )
    shown = subprocess.run(
        [sys.executable, "-m", "proxy", "check-config", str(config)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "guards.requests burst_s=10 max_throttle_ms=1000" in shown
    assert "kafka-quota-proxy.join_group_rate" in shown and "metadata_rate" not in shown


def test_a_kip848_members_keepalives_take_no_token_and_it_stays_in_its_group(
    kafka1: KafkaCluster, tmp_path: Path
) -> None:
    """A librdkafka member of a KIP-848 group, heartbeating every 500 ms (kafka1's interval),
    under a guard of one heartbeat every 10 s: its join and its acknowledgements take tokens,
    its keepalives none, so the guard throttles it at the start and never expels it."""
    kafka1.create_topic("kip848-guarded", partitions=3)
    # librdkafka times a KIP-848 heartbeat out after twice the interval, 1 s here: a
    # throttle of more would time out the heartbeat sent behind it (a broker's 5 s interval
    # leaves 10 s)
    guard = (
        "\n[guards.requests]\nmax_throttle_ms = 200\n"
        "\n[clients.member]\nkafka-quota-proxy.consumer_group_heartbeat_rate = 0.1\n"
    )
    proxy = start_proxy(tmp_path, kafka1.bootstrap_servers, 1, guard)
    assignments: list[int] = []
    consumer = Consumer(
        {
            "bootstrap.servers": proxy.bootstrap,
            "client.id": "member",
            "group.id": "kip848-guarded",
            "group.protocol": "consumer",
        }
    )
    try:
        consumer.subscribe(
            ["kip848-guarded"], on_assign=lambda _c, partitions: assignments.append(len(partitions))
        )
        deadline = time.monotonic() + MEMBER_S
        while time.monotonic() < deadline:
            consumer.poll(0.1)
        samples = scrape(proxy.metrics_url)
    finally:
        consumer.close()
        proxy.stop()
    labels = {"api": "ConsumerGroupHeartbeat", "user": "", "client_id": "member"}
    tokens = value(samples, "kafka_quota_proxy_guard_tokens", **labels)
    # a burst of one: the join and an acknowledgement or two, refilled at 0.1 a second (-1.6
    # here); each of the ~8 keepalives would take one more (-7.6 with them counted)
    assert tokens is not None and tokens > -5, tokens
    assert sum(assignments) == 3 and len(assignments) <= 2, assignments
