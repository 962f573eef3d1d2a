"""The proxy's producer_byte_rate against a real broker's own quota, per client family, in one run.

Each greedy producer (aiokafka and kafka-python with at most 100 and 1000 records in flight,
Kafka's ProducerPerformance) runs alone twice for the same time against one Kafka broker:
once direct, held by the broker's own client quota (set with kafka-configs), once through the
proxy, held by the proxy's quota of the same value, with the same quota windows on both sides
(Kafka's default 11 x 1 s, or --windows 2 for the 2 x 1 s the integration tests use).
Printed per family: bytes acknowledged per second over the run, the average over the spans
below as a multiple of the quota for both, and proxy/direct. How close either gets depends on
this machine; the ratio between them is the proxy's fidelity to Kafka here.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
from collections.abc import Callable
from pathlib import Path

from localkafka import KafkaCluster
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

#: (bootstrap, client_id, quota, first second measured, seconds measured) -> bytes/s acked
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


FAMILIES: dict[str, Flood] = {
    "aiokafka": aiokafka,
    "kafka-python": kafka_python,
    "ProducerPerformance": producer_performance,
}


def set_broker_quota(cluster: KafkaCluster, client_id: str, rate: int) -> None:
    cluster.tool(
        "kafka.admin.ConfigCommand",
        "--bootstrap-server",
        cluster.bootstrap_servers,
        "--alter",
        "--entity-type",
        "clients",
        "--entity-name",
        client_id,
        "--add-config",
        f"producer_byte_rate={rate}",
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.quota_fidelity", description=__doc__)
    parser.add_argument("--rate", type=int, default=1_000_000, help="producer_byte_rate")
    parser.add_argument("--span", type=int, default=33, help="seconds measured (3 echo periods)")
    parser.add_argument("--windows", type=int, default=11, help="quota.window.num (1 s each)")
    parser.add_argument("--family", choices=sorted(FAMILIES), action="append")
    args = parser.parse_args(argv)
    families = args.family or list(FAMILIES)
    windows = {"quota.window.num": str(args.windows), "quota.window.size.seconds": "1"}
    cluster = KafkaCluster(brokers_count=1, overrides=windows).start()
    results: dict[str, tuple[float, float]] = {}
    try:
        quotas = "[broker]\n" + "".join(f"{k} = {v}\n" for k, v in windows.items())
        for family in families:
            for client_id in (f"direct-{family}", f"proxied-{family}"):
                cluster.create_topic(client_id, partitions=1)
            set_broker_quota(cluster, f"direct-{family}", args.rate)
            quotas += f'[clients."proxied-{family}"]\nproducer_byte_rate = {args.rate}\n'
        with tempfile.TemporaryDirectory() as tmp:
            proxy = start_proxy(Path(tmp), cluster.bootstrap_servers, 1, extra=quotas)
            try:
                for family in families:
                    flood, measured = FAMILIES[family], (args.rate, args.windows, args.span)
                    results[family] = (
                        flood(cluster.bootstrap_servers, f"direct-{family}", *measured),
                        flood(proxy.bootstrap, f"proxied-{family}", *measured),
                    )
            finally:
                proxy.stop()
    finally:
        cluster.stop()
    print(
        f"producer_byte_rate = {args.rate:,} B/s, {args.windows} x 1 s quota windows,"
        f" {args.span} s measured after the first {args.windows} s, each client alone"
    )
    print("| client | direct (broker's quota) | through the proxy | proxy / direct |")
    print("|---|---|---|---|")
    for family, (direct, proxied) in results.items():
        print(
            f"| {family} | {direct / args.rate:.3f} x quota | {proxied / args.rate:.3f} x quota"
            f" | {proxied / direct:.3f} |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
