"""Request storms beside a healthy producer, with and without the request-rate guards.

    python -m bench.request_storms [--clients 100] [--seconds 20] [--metadata-rate 10]
                                   [--churners 30] [--join-rate 1]

One broker, and two proxies in front of it with the same config but for the guards: one sets
`kafka-quota-proxy.metadata_rate`, and `join_group_rate`, `sync_group_rate` and
`consumer_group_heartbeat_rate`, for the client-ids of the storms, one sets none. Legs, one
after another, each `--seconds` long:
- none: the healthy producer alone (confluent-kafka, acks=1, a record every 20 ms, client-id
  "healthy"), through the guarded proxy;
- metadata, unguarded and guarded: `--clients` librdkafka producers (client-id "storm")
  refreshing their metadata every 10 ms, from another process, beside the healthy producer;
- churn, unguarded and guarded: `--churners` consumers of one group (client-id "churn") that
  join, take their assignment and leave, in a loop, by the classic protocol, then by
  KIP-848's;
- metadata, shadow: the Metadata storm through a third proxy, the guarded one's config with
  `[guards.requests] shadow = true`: what its guard counts, and what it lets through.

A steady consumer of another group on the same coordinator reads the healthy producer's
records in every leg.

Printed per leg, from the broker's JMX (localkafka's BrokerRequestMetrics) over the leg but
its first SETTLE_S: requests per second (all, and of each API a storm sends) and the
request handlers' idle share; the healthy producer's delivery latency, p50 and p99, as a
ratio to the leg without a storm; the steady consumer's rebalances, and its lag as the leg
ends.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from confluent_kafka import Consumer, KafkaError, Message, Producer, TopicPartition

import bench.commit
from bench.latency import percentile
from localkafka.broker_metrics import BrokerMetrics, Span
from localkafka.cluster import KafkaCluster
from localkafka.proxy_process import start_proxy
from localkafka.scrape import scrape, total
from proxy.cli.main import raise_open_file_limit

TOPIC = "healthy"
CHURN_TOPIC = "churned"
#: the storms' connections are made and their first bursts spent by then
SETTLE_S = 3.0
#: a healthy record every this many seconds
PAUSE_S = 0.02


@dataclass
class Healthy:
    """The healthy producer's delivery latencies (µs) and errors over a leg."""

    latencies: list[int] = field(default_factory=list)
    errors: int = 0


def healthy(bootstrap: str, seconds: float, out: Healthy) -> None:
    producer = Producer(
        {"bootstrap.servers": bootstrap, "client.id": "healthy", "acks": 1, "linger.ms": 0}
    )
    producer.produce(TOPIC, b"warm")
    producer.flush(30)

    def delivered(sent: float) -> Callable[[KafkaError | None, Message], None]:
        def done(error: KafkaError | None, _message: Message) -> None:
            if error is None:
                out.latencies.append(int((time.monotonic() - sent) * 1e6))
            else:
                out.errors += 1

        return done

    start = time.monotonic()
    for tick in range(int(seconds / PAUSE_S)):
        while time.monotonic() < start + tick * PAUSE_S:  # poll returns at each delivery
            producer.poll(max(0.0, start + tick * PAUSE_S - time.monotonic()))
        producer.produce(TOPIC, b"x" * 100, on_delivery=delivered(time.monotonic()))
    producer.flush(30)


@dataclass
class Steady:
    """The steady consumer of another group: its rebalances, and its lag as the leg ends."""

    rebalances: int = 0
    lag: int = -1


def steady(bootstrap: str, stop: threading.Event, out: Steady) -> None:
    def assigned(_consumer: object, _partitions: object) -> None:
        out.rebalances += 1

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "client.id": "steady",
            "group.id": "steady",
            "auto.offset.reset": "latest",
        }
    )
    consumer.subscribe([TOPIC], on_assign=assigned)
    while not stop.is_set():
        consumer.poll(0.1)
    partition = TopicPartition(TOPIC, 0)
    _, high = consumer.get_watermark_offsets(partition, timeout=10)
    out.lag = high - consumer.position([partition])[0].offset
    consumer.close()


def metadata_storm(bootstrap: str, clients: int, seconds: float) -> None:
    """`clients` librdkafka producers refreshing their metadata every 10 ms."""
    producers = [
        Producer(
            {
                "bootstrap.servers": bootstrap,
                "client.id": "storm",
                "topic.metadata.refresh.interval.ms": 10,
                "log_level": 0,
            }
        )
        for _ in range(clients)
    ]
    for producer in producers:
        producer.list_topics(TOPIC, timeout=30)  # connected before the leg's clock
    print("ready", flush=True)
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        for producer in producers:
            producer.poll(0)
        time.sleep(0.01)


def churn(bootstrap: str, churners: int, seconds: float, protocol: str = "classic") -> None:
    """`churners` consumers of one group, each joining, taking its assignment and leaving,
    by the classic protocol or KIP-848's ("consumer")."""
    deadline = time.monotonic() + seconds
    settings: dict[str, object] = {
        "bootstrap.servers": bootstrap,
        "client.id": "churn",
        "group.id": f"churning-{protocol}",
        "group.protocol": protocol,
        "log_level": 0,
    }
    if protocol == "classic":
        settings["session.timeout.ms"] = 6000

    def one(index: int) -> None:
        while time.monotonic() < deadline:
            consumer = Consumer(settings)
            consumer.subscribe([CHURN_TOPIC])
            until = time.monotonic() + 10
            while not consumer.assignment() and time.monotonic() < min(until, deadline):
                consumer.poll(0.05)
            consumer.close()

    print("ready", flush=True)
    threads = [threading.Thread(target=one, args=(index,)) for index in range(churners)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


@dataclass
class Leg:
    span: Span
    healthy: Healthy
    steady: Steady


def leg(bootstrap: str, broker: BrokerMetrics, storm: list[str] | None, seconds: float) -> Leg:
    out = Healthy()
    producing = threading.Thread(target=healthy, args=(bootstrap, seconds, out), daemon=True)
    stop, steady_out = threading.Event(), Steady()
    consuming = threading.Thread(target=steady, args=(bootstrap, stop, steady_out), daemon=True)
    consuming.start()
    process = None
    if storm is not None:  # it runs past the leg, and is stopped once the leg is measured
        command = [sys.executable, "-m", "bench.request_storms", "--storm", bootstrap, *storm]
        process = subprocess.Popen(
            [*command, "--seconds", str(seconds + 60)], stdout=subprocess.PIPE, text=True
        )
        assert process.stdout is not None and process.stdout.readline() == "ready\n"
    producing.start()
    time.sleep(SETTLE_S)
    first = broker.snapshot()
    producing.join()
    last = broker.snapshot()
    if process is not None:
        process.terminate()
        process.wait(60)
    stop.set()
    consuming.join(60)
    return Leg(BrokerMetrics.span(first, last), out, steady_out)


def run(args: argparse.Namespace, workdir: Path) -> None:
    cluster = KafkaCluster(workdir=workdir / "kafka")
    cluster.start()
    broker = None
    try:
        cluster.create_topic(TOPIC, partitions=1)
        cluster.create_topic(CHURN_TOPIC, partitions=args.churners)
        upstream = cluster.bootstrap_servers
        guard = (
            "\n[clients.storm]\n"
            f"kafka-quota-proxy.metadata_rate = {args.metadata_rate}\n"
            "\n[clients.churn]\n"
            f"kafka-quota-proxy.join_group_rate = {args.join_rate}\n"
            f"kafka-quota-proxy.sync_group_rate = {args.join_rate}\n"
            f"kafka-quota-proxy.consumer_group_heartbeat_rate = {args.join_rate}\n"
        )
        guarded = start_proxy(workdir, upstream, 1, guard, name="guarded")
        unguarded = start_proxy(workdir, upstream, 1, name="unguarded")
        shadow = "\n[guards.requests]\nshadow = true\n" + guard
        shadowed = start_proxy(workdir, upstream, 1, shadow, name="shadowed")
        broker = BrokerMetrics(cluster)
        storms = {
            "metadata": ["metadata", str(args.clients)],
            "churn": ["churn", str(args.churners)],
            "churn, KIP-848": ["churn-848", str(args.churners)],
        }
        try:
            legs = {"none": leg(guarded.bootstrap, broker, None, args.seconds)}
            for name, storm in storms.items():
                for side, proxy in (("unguarded", unguarded), ("guarded", guarded)):
                    legs[f"{name}, {side}"] = leg(proxy.bootstrap, broker, storm, args.seconds)
            metadata = storms["metadata"]
            legs["metadata, shadow"] = leg(shadowed.bootstrap, broker, metadata, args.seconds)
            counted = total(
                scrape(shadowed.metrics_url), "kafka_quota_proxy_shadow_throttles_total"
            )
        finally:
            for proxy in (guarded, unguarded, shadowed):
                proxy.stop()
    finally:
        if broker is not None:
            broker.stop()
        cluster.stop()
    report(args, legs)
    print(f"\nthe shadow leg's guard counted {counted:,.0f} throttles it did not apply")


def report(args: argparse.Namespace, legs: dict[str, Leg]) -> None:
    commit = bench.commit.head()
    print(
        f"\n{args.clients} librdkafka clients refreshing metadata every 10 ms (metadata_rate"
        f" {args.metadata_rate}); {args.churners} consumers of one group rejoining in a loop"
        f" (join_group_rate, sync_group_rate and consumer_group_heartbeat_rate"
        f" {args.join_rate}); {args.seconds:.0f} s a"
        f" leg, the broker measured from {SETTLE_S:.0f} s on; commit {commit}\n"
    )
    print(
        "| leg | requests / s at the broker | Metadata / s | JoinGroup / s | SyncGroup / s"
        " | ConsumerGroupHeartbeat / s | handlers idle² | healthy p50 | healthy p99"
        " | healthy errors | steady group: rebalances, lag |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    base = percentile(legs["none"].healthy.latencies, 99)
    for name, result in legs.items():
        rates, latencies = result.span.rates, result.healthy.latencies
        p50, p99 = statistics.median(latencies) / 1000, percentile(latencies, 99)
        group = f"{result.steady.rebalances}, {result.steady.lag}"
        print(
            f"| {name} | {sum(rates.values()):,.0f} | {rates.get('Metadata', 0):,.0f}"
            f" | {rates.get('JoinGroup', 0):,.1f} | {rates.get('SyncGroup', 0):,.1f}"
            f" | {rates.get('ConsumerGroupHeartbeat', 0):,.1f} | {result.span.idle:.0%}"
            f" | {p50:.1f} ms | {p99:.1f} ms ({p99 / base:.2f} x) | {result.healthy.errors}"
            f" | {group} |"
        )
    print(
        "\n² RequestHandlerAvgIdlePercent over the leg: a combined (KRaft broker and"
        " controller) node marks one meter from both its handler pools, so 200 % is both idle"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=100)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--metadata-rate", type=float, default=10.0)
    parser.add_argument("--churners", type=int, default=30)
    parser.add_argument("--join-rate", type=float, default=1.0)
    parser.add_argument("--storm", nargs=3, metavar=("BOOTSTRAP", "KIND", "COUNT"))
    args = parser.parse_args(argv)
    raise_open_file_limit()
    if args.storm:
        bootstrap, kind, count = args.storm
        if kind == "metadata":
            metadata_storm(bootstrap, int(count), args.seconds)
        else:
            churn(
                bootstrap,
                int(count),
                args.seconds,
                "consumer" if kind == "churn-848" else "classic",
            )
        return 0
    with tempfile.TemporaryDirectory(prefix="kqp-request-storms-") as tmp:
        run(args, Path(tmp))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
