"""The cluster's produce ceiling against a real 3-broker Kafka, read at the brokers.

`kafka-quota-proxy.cluster_produce_ceiling` holds every broker together (docs/ceilings.md).
Six best-effort principals (client-ids) write as fast as librdkafka goes, one process each,
through two members of one fleet: three to a topic broker 1 leads, two to one broker 2 leads,
one to one broker 3 leads. An exempt seventh writes broker 3's topic at a steady rate. No
broker has a ceiling of its own, so only the cluster's holds them. What the brokers took is
their logs' growth, from DescribeLogDirs asked of each directly every half second.

Printed: the three brokers' intake together over every 10 s window after the settling time,
against the ceiling; each broker's share of it; each principal's acknowledged rate against
the fair share of what the exempt one leaves.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path

import bench.commit
from localkafka.cluster import KafkaCluster
from localkafka.fleet import confluent_fleet, fleet_rate, fleet_timelines
from localkafka.load import Timeline, aiokafka_flood
from localkafka.log_growth import watch_logs, window_rates
from localkafka.proxy_process import start_proxy
from localkafka.scrape import scrape, total

PARTITIONS = 2
EXEMPT_RATE = 500_000
#: (client-id, the node id leading its topic's partitions)
GREEDY = (("b1-a", 1), ("b1-b", 1), ("b1-c", 1), ("b2-a", 2), ("b2-b", 2), ("b3-a", 3))


def config(ceiling: int) -> str:
    return f"""
[fleet]
name = "cluster-ceiling"
[quota_store]
topic = "cluster-ceiling-store"
[clients.ops]
kafka-quota-proxy.ceiling_exempt = 1
[brokers."<default>"]
kafka-quota-proxy.cluster_produce_ceiling = {ceiling}
"""


async def measure(
    cluster: KafkaCluster, bootstraps: list[str], settle: float, span: float
) -> tuple[dict[str, float], list[float], dict[int, list[float]], float]:
    """Each principal's acknowledged rate, the brokers' intake together over 10 s windows,
    each broker's over the same windows, and the exempt principal's rate."""
    topics = {node: f"cluster-ceiling-{node}" for node in (1, 2, 3)}
    for node, topic in topics.items():
        cluster.create_topic(topic, PARTITIONS, replicas=[[node]] * PARTITIONS)
    addresses = {broker.node_id: broker.address for broker in cluster.brokers}
    seconds = settle + span
    exempt = Timeline()
    started = time.monotonic()
    with ExitStack() as stack:
        processes = [
            stack.enter_context(
                confluent_fleet(bootstraps[index % 2], name, topics[node], seconds, 1)
            )[0]
            for index, (name, node) in enumerate(GREEDY)
        ]
        watched = [watch_logs(list(addresses.values()), set(topics.values()), seconds + 1)]
        watched += [watch_logs([addresses[node]], {topics[node]}, seconds + 1) for node in topics]
        flood = aiokafka_flood(bootstraps[0], "ops", topics[3], seconds, exempt, EXEMPT_RATE)
        _, samples = await asyncio.gather(flood, asyncio.gather(*watched))
        timelines = await asyncio.to_thread(fleet_timelines, processes, seconds + 90)
    first = min(t.started for t in timelines)
    got = {
        name: fleet_rate([timeline], settle, seconds)
        for (name, _), timeline in zip(GREEDY, timelines, strict=True)
    }
    windows = [window_rates(each, started + settle, 10.0) for each in samples]
    brokers = dict(zip(topics, windows[1:], strict=True))
    return got, windows[0], brokers, exempt.rate(settle - (exempt.started - first), seconds)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.cluster_ceiling", description=__doc__)
    parser.add_argument("--ceiling", type=int, default=6_000_000, help="bytes per second")
    parser.add_argument("--settle", type=float, default=8.0, help="seconds before measuring")
    parser.add_argument("--span", type=float, default=20.0, help="seconds measured")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="kqp-cluster-ceiling-") as tmp:
        work = Path(tmp)
        cluster = KafkaCluster(brokers_count=3, workdir=work / "kafka")
        cluster.start()
        try:
            members = [
                start_proxy(work, cluster.bootstrap_servers, 3, config(args.ceiling), f"m{i}")
                for i in range(2)
            ]
            try:
                got, windows, brokers, ops = asyncio.run(
                    measure(cluster, [m.bootstrap for m in members], args.settle, args.span)
                )
                scraped = [scrape(member.metrics_url) for member in members]
            finally:
                for member in members:
                    member.stop()
        finally:
            cluster.stop()
    fair = (args.ceiling - ops) / len(GREEDY)
    print(
        f"\ncluster_produce_ceiling {args.ceiling:,} B/s; 3 brokers, 2 fleet members; "
        f"{args.settle:.0f} s settling, {args.span:.0f} s measured; commit {bench.commit.head()}"
    )
    print(
        "the brokers together, 10 s windows: "
        + ", ".join(f"{rate:,.0f}" for rate in windows)
        + f" B/s ({min(windows) / args.ceiling:.3f} to {max(windows) / args.ceiling:.3f} x)"
    )
    for node, rates in brokers.items():
        mean = sum(rates) / len(rates)
        print(f"broker {node}: {mean:,.0f} B/s on average over the same windows")
    print(f"exempt ops: {ops:,.0f} B/s of {EXEMPT_RATE:,} offered")
    print(f"fair share of the rest: {fair:,.0f} B/s")
    for name, rate in got.items():
        print(f"  {name}: {rate:,.0f} B/s ({rate / fair:.3f} x)")
    held = "kafka_quota_proxy_ceiling_throttles_total"
    cluster_held = sum(total(s, held, broker="cluster") for s in scraped)
    every = sum(total(s, held) for s in scraped)
    print(
        f"ceiling throttles, the cluster's / any broker's own: {cluster_held:,.0f} / "
        f"{every - cluster_held:,.0f}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
