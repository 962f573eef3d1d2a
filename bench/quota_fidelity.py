"""The proxy's producer_byte_rate against real brokers' own quota, per client and layout.

Each greedy producer runs for the same time against a three-broker Kafka, once direct (held by
the brokers' own client quota, set with kafka-configs), once through the proxy holding the
principal (the default) and once through the proxy holding each connection alone ([enforcement]
hold = "connection", a broker's behaviour), with the same quota and windows everywhere (Kafka's
default 11 x 1 s, or --windows 2 for the 2 x 1 s the integration tests use). The clients:

- aiokafka and kafka-python (at most 100 and 1000 records in flight) and Kafka's
  ProducerPerformance, one process each, to a topic of one partition (one broker);
- librdkafka (confluent-kafka) fleets of 1 or 3 processes sharing a client-id, to a topic of one
  partition (one broker) or six (two on each broker): 1 to 9 connections of one principal.

Printed per row: bytes acknowledged per second over the span after the first windows, as a
multiple of the quota, for the three, and proxy/direct. How close any gets depends on this
machine; the ratios between them are the proxy's fidelity to Kafka here, and what holding the
principal changes.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from localkafka.cluster import KafkaCluster
from localkafka.fleet import confluent_fleet, fleet_rate, fleet_timelines
from localkafka.load import (
    RECORD_BYTES,
    Timeline,
    aiokafka_flood,
    java_flood,
    java_flood_reports,
    kafka_python_flood,
    reaped,
)
from localkafka.proxy_process import start_proxy

#: (bootstrap, client_id (also the topic), quota, first second measured, seconds measured)
#: -> bytes/s acknowledged
Flood = Callable[[str, str, int, int, int], float]


def aiokafka(bootstrap: str, client_id: str, quota: int, start: int, span: int) -> float:
    timeline = Timeline()
    asyncio.run(aiokafka_flood(bootstrap, client_id, client_id, start + span, timeline))
    return timeline.rate(start, start + span)


def kafka_python(bootstrap: str, client_id: str, quota: int, start: int, span: int) -> float:
    timeline = Timeline()
    kafka_python_flood(bootstrap, client_id, client_id, start + span, timeline)
    return timeline.rate(start, start + span)


def producer_performance(
    bootstrap: str, client_id: str, quota: int, start: int, span: int
) -> float:
    """From ProducerPerformance's 5-second reports: those that begin at `start` or later."""
    records = int(quota / RECORD_BYTES * (start + span + 10))
    with reaped(java_flood(bootstrap, client_id, client_id, records)) as process:
        reports = java_flood_reports(process, (start + span) * 3 + 60)
    sent = seconds = elapsed = 0.0
    for count, report_s in reports:
        if elapsed >= start and seconds < span:
            sent, seconds = sent + count, seconds + report_s
        elapsed += report_s
    return sent * RECORD_BYTES / seconds


def librdkafka_fleet(processes: int) -> Flood:
    def flood(bootstrap: str, client_id: str, quota: int, start: int, span: int) -> float:
        with confluent_fleet(bootstrap, client_id, client_id, start + span, processes) as fleet:
            timelines = fleet_timelines(fleet, start + span + 90)
        return fleet_rate(timelines, start, start + span)

    return flood


@dataclass(frozen=True)
class Row:
    client: str
    flood: Flood
    partitions: int = 1

    @property
    def layout(self) -> str:
        brokers = "1 broker" if self.partitions == 1 else "3 brokers"
        return f"{self.partitions} partition(s) on {brokers}"


ROWS = {
    row.client + ("" if row.partitions == 1 else " x6"): row
    for row in (
        Row("aiokafka", aiokafka),
        Row("kafka-python", kafka_python),
        Row("ProducerPerformance", producer_performance),
        Row("librdkafka, 1 process", librdkafka_fleet(1)),
        Row("librdkafka, 3 processes", librdkafka_fleet(3)),
        Row("librdkafka, 1 process", librdkafka_fleet(1), partitions=6),
        Row("librdkafka, 3 processes", librdkafka_fleet(3), partitions=6),
    )
}
#: where each measurement goes: straight to the brokers, or through one of the two proxies
MODES = ("direct", "principal", "connection")


def client_id(mode: str, key: str) -> str:
    return f"{mode}-" + "".join(c if c.isalnum() else "-" for c in key)


def set_broker_quota(cluster: KafkaCluster, client: str, rate: int) -> None:
    cluster.tool(
        "kafka.admin.ConfigCommand",
        "--bootstrap-server",
        cluster.bootstrap_servers,
        "--alter",
        "--entity-type",
        "clients",
        "--entity-name",
        client,
        "--add-config",
        f"producer_byte_rate={rate}",
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.quota_fidelity", description=__doc__)
    parser.add_argument("--rate", type=int, default=1_000_000, help="producer_byte_rate")
    parser.add_argument("--span", type=int, default=33, help="seconds measured (3 echo periods)")
    parser.add_argument("--windows", type=int, default=11, help="quota.window.num (1 s each)")
    parser.add_argument("--row", choices=sorted(ROWS), action="append")
    args = parser.parse_args(argv)
    rows = args.row or list(ROWS)
    windows = {"quota.window.num": str(args.windows), "quota.window.size.seconds": "1"}
    cluster = KafkaCluster(brokers_count=3, overrides=windows).start()
    results: dict[str, dict[str, float]] = {}
    try:
        quotas = "[broker]\n" + "".join(f"{k} = {v}\n" for k, v in windows.items())
        for key in rows:
            for mode in MODES:
                cluster.create_topic(client_id(mode, key), partitions=ROWS[key].partitions)
            set_broker_quota(cluster, client_id("direct", key), args.rate)
            for mode in MODES[1:]:
                quotas += f'[clients."{client_id(mode, key)}"]\nproducer_byte_rate = {args.rate}\n'
        with tempfile.TemporaryDirectory() as tmp:
            proxies = {
                mode: start_proxy(
                    Path(tmp),
                    cluster.bootstrap_servers,
                    3,
                    extra=f'{quotas}[enforcement]\nhold = "{mode}"\n',
                    name=mode,
                )
                for mode in MODES[1:]
            }
            bootstraps = {"direct": cluster.bootstrap_servers} | {
                mode: proxy.bootstrap for mode, proxy in proxies.items()
            }
            try:
                for key in rows:
                    measured = (args.rate, args.windows, args.span)
                    results[key] = {
                        mode: ROWS[key].flood(bootstraps[mode], client_id(mode, key), *measured)
                        for mode in MODES
                    }
            finally:
                for proxy in proxies.values():
                    proxy.stop()
    finally:
        cluster.stop()
    print(
        f"producer_byte_rate = {args.rate:,} B/s, {args.windows} x 1 s quota windows,"
        f" {args.span} s measured after the first {args.windows} s, each row alone"
    )
    print(
        "| client | topic | direct (brokers' quota) | proxy, principal held |"
        " proxy, each connection held | principal / direct |"
    )
    print("|---|---|---|---|---|---|")
    for key, rates in results.items():
        row = ROWS[key]
        direct, principal, connection = (rates[mode] / args.rate for mode in MODES)
        print(
            f"| {row.client} | {row.layout} | {direct:.3f} x quota | {principal:.3f} x |"
            f" {connection:.3f} x | {principal / direct:.3f} |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
