"""request_percentage as the proxy charges it against the broker's own, per workload (issue 41).

Each workload of localkafka/request_legs.py (a classic and a KIP-848 group
rebalancing,
a transactional consume-transform-produce loop, an acks=all producer, idle long polls, a
Metadata flood) runs once per leg, one leg after another, on a local cluster of 1 or 3
brokers, every leg's clients through the proxy:

- broker: the broker's own request quota (client-id entity), no proxy quota;
- proxy: the proxy's request quota, the same value and windows (Kafka's 11 x 1 s);
- with --against REV: the proxy at REV (a git worktree) holding the same quota.

Printed per leg: the time the work took, the throttle_time_ms its responses carried, the
Metadata requests answered (the flood), and the request time charged, in % of a thread, as the
broker measured it (JMX, first broker) and as the proxy estimated it; then each leg's time and
throttle as a ratio to the broker's leg. Run: python -m bench.request_time [--brokers 1 3]
[--quota 20 5] [--against REV]
"""

from __future__ import annotations

import argparse
import tempfile
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path

from confluent_kafka import KafkaException

from bench.instructions import checkout
from localkafka import request_legs
from localkafka import workloads as load
from localkafka.cluster import KafkaCluster
from localkafka.proxy_process import RunningProxy, start_proxy
from localkafka.request_legs import Leg


def _ratio(value: float, reference: float) -> str:
    return f"{value / reference:.2f}" if reference else ("1.00" if not value else "inf")


def run(brokers: int, quotas: list[float], against: str | None, work: Path) -> list[str]:
    """The table's rows for one cluster."""
    legs = ["broker", "proxy"] + ([f"at {against}"] if against else [])

    def named(leg: str, quota: float) -> str:
        """A leg's name in its client-id, apart for each quota."""
        return f"{leg.replace(' ', '-')}-{quota:g}"

    ids = {
        (quota, workload, leg): request_legs.client_id(workload, named(leg, quota))
        for quota in quotas
        for workload in request_legs.WORKLOADS
        for leg in legs
    }
    rows = []
    with ExitStack() as stack:
        cluster = KafkaCluster(
            brokers_count=brokers,
            workdir=work / "kafka",
            overrides=dict(request_legs.KIP_848_HEARTBEATS),
        ).start()
        stack.callback(cluster.stop)
        request_legs.broker_quotas(
            cluster.brokers[0].address,
            {ids[key]: key[0] for key in ids if key[2] == "broker"},
            [ids[key] for key in ids if key[2] != "broker"],
        )
        config = request_legs.proxy_quotas({ids[key]: key[0] for key in ids if key[2] != "broker"})
        proxies: dict[str, RunningProxy] = {}
        proxies["proxy"] = start_proxy(work, cluster.bootstrap_servers, brokers, config)
        stack.callback(proxies["proxy"].stop)
        if against:
            tree = stack.enter_context(checkout(against))
            proxies[legs[2]] = start_proxy(
                work,
                cluster.bootstrap_servers,
                brokers,
                config,
                "at-rev",
                {"PYTHONPATH": str(tree)},
            )
            stack.callback(proxies[legs[2]].stop)
        topics: set[str] = set()

        def topic_of(quota: float, workload: str) -> Callable[[str, str], str]:
            def topic(leg: str, purpose: str) -> str:
                name = f"{workload}-{quota:g}-{leg.replace(' ', '-')}-{purpose}"
                if name not in topics:
                    cluster.create_topic(name, 6, min(brokers, 3))
                    topics.add(name)
                    if purpose == "source":
                        load.fill(cluster.bootstrap_servers, name, 2000, b"v%d".__mod__)
                return name

            return topic

        for quota in quotas:
            for workload in request_legs.WORKLOADS:
                results: dict[str, Leg] = {}
                for leg in legs:  # one after another: each leg has the machine to itself
                    bootstrap = proxies.get(leg, proxies["proxy"]).bootstrap
                    name = named(leg, quota)
                    try:
                        results[leg] = request_legs.run_legs(
                            cluster,
                            [proxy.metrics_url for proxy in proxies.values()],
                            workload,
                            {name: bootstrap},
                            topic_of(quota, workload),
                        )[name]
                    except (TimeoutError, KafkaException) as exc:  # held past its bound
                        rows.append(
                            f"| {brokers} | {quota:g} % | {workload} | {leg} | did not finish:"
                            f" {exc} | | | | | | |"
                        )
                        print(f"{workload} under {leg}'s quota: {exc}", flush=True)
                        continue
                    print(request_legs.describe(workload, leg, results[leg]), flush=True)
                if "broker" not in results:
                    continue
                reference = results["broker"].outcome
                for leg, result in results.items():
                    outcome = result.outcome

                    def share(value: float | None) -> str:
                        return "-" if value is None else f"{value:.2f}"

                    rows.append(
                        f"| {brokers} | {quota:g} % | {workload} | {leg} | {outcome.seconds:.2f}"
                        f" | {outcome.throttle_ms:,} | {outcome.requests or '-'}"
                        f" | {share(result.broker_measured)} | {share(result.proxy_estimated)}"
                        f" | {_ratio(outcome.seconds, reference.seconds)}"
                        f" | {_ratio(outcome.throttle_ms, reference.throttle_ms)} |"
                    )
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.request_time", description=__doc__)
    parser.add_argument("--brokers", type=int, nargs="+", default=[1, 3])
    parser.add_argument("--quota", type=float, nargs="+", default=[20.0, 5.0])
    parser.add_argument("--against", metavar="REV", help="a third leg: the proxy at REV")
    args = parser.parse_args(argv)
    rows = [
        "| brokers | quota | workload | quota by | s | throttle ms | requests"
        " | broker measured % | proxy estimated % | s / broker's | throttle / broker's |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for brokers in args.brokers:
        with tempfile.TemporaryDirectory(prefix="request-time-") as work:
            rows += run(brokers, args.quota, args.against, Path(work))
    print("\n".join(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
