"""The proxy's producer_byte_rate against a real broker's own quota, in one run.

The same greedy aiokafka producer (as fast as it can, 100 records in flight) runs twice for
the same time against one Kafka broker: once direct, held by the broker's own client quota
(set with kafka-configs), once through the proxy, held by the proxy's quota of the same
value. Both use Kafka's default quota windows (11 x 1 s), so the broker's rate sensor pads
its first window to ten seconds and the producer's first burst echoes every eleven seconds.
Printed: bytes acknowledged per second for both, the averages over three whole echo periods
(11 s to 44 s) and over the 30 s after the first quota window, and proxy/direct ratios.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
from pathlib import Path

from localkafka import KafkaCluster
from localkafka.load import Timeline, aiokafka_flood
from localkafka.proxy_process import start_proxy

#: spans (start s, end s) over which the two runs are compared
SPANS = ((11.0, 44.0), (11.0, 41.0), (13.0, 43.0))


def flood(bootstrap: str, client_id: str, seconds: float) -> Timeline:
    timeline = Timeline()
    asyncio.run(aiokafka_flood(bootstrap, client_id, client_id, seconds, timeline))
    return timeline


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.quota_fidelity", description=__doc__)
    parser.add_argument("--rate", type=int, default=1_000_000, help="producer_byte_rate")
    parser.add_argument("--seconds", type=float, default=46.0)
    args = parser.parse_args(argv)
    cluster = KafkaCluster(brokers_count=1).start()
    try:
        for client_id in ("direct", "proxied"):
            cluster.create_topic(client_id, partitions=1)
        cluster.tool(
            "kafka.admin.ConfigCommand",
            "--bootstrap-server",
            cluster.bootstrap_servers,
            "--alter",
            "--entity-type",
            "clients",
            "--entity-name",
            "direct",
            "--add-config",
            f"producer_byte_rate={args.rate}",
        )
        direct = flood(cluster.bootstrap_servers, "direct", args.seconds)
        with tempfile.TemporaryDirectory() as tmp:
            quota = f'[clients."proxied"]\nproducer_byte_rate = {args.rate}\n'
            proxy = start_proxy(Path(tmp), cluster.bootstrap_servers, 1, extra=quota)
            try:
                proxied = flood(proxy.bootstrap, "proxied", args.seconds)
            finally:
                proxy.stop()
    finally:
        cluster.stop()
    report(direct, proxied, args.rate, int(args.seconds))
    return 0


def report(direct: Timeline, proxied: Timeline, rate: int, seconds: int) -> None:
    print(f"producer_byte_rate = {rate:,} B/s, Kafka's default windows (11 x 1 s)")
    for name, timeline in (("direct", direct), ("proxy ", proxied)):
        per_second = [timeline.rate(t, t + 1) / 1e6 for t in range(seconds)]
        print(f"{name} MB per second: {' '.join(f'{mb:.2f}' for mb in per_second)}")
    for start, end in SPANS:
        a, b = direct.rate(start, end), proxied.rate(start, end)
        print(
            f"{start:.0f}-{end:.0f} s: direct {a / rate:.3f} x quota, proxy {b / rate:.3f}"
            f" x quota, proxy/direct {b / a:.3f}"
        )


if __name__ == "__main__":
    raise SystemExit(main())
