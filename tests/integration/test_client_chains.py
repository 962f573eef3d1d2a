"""A real client's own workloads under request_percentage, on a broker's own quota and on the
proxy's (issue 48): franz-go's consumer-group chains (classic and KIP-848) and transactional
chains take at most 1.25 x as long through the proxy as under the broker's quota.

Two clusters of one broker each, with the same 2 x 1 s quota windows, and the same quota,
20 % of a thread for users/<default>: the broker's own on the first, whose chain connects to
it directly, and the proxy's on the second, whose chain connects through the proxy (the
broker's quota would hold both, since both are ANONYMOUS to it). Both chains, each with its
own two clusters, and all four legs run at once, so that each runs on a machine the others
keep busy, as CI's is.

Before issue 48 the proxy took 2.4-4.3 x as long: it charged the time requests queued in the
broker, and held principals whose connections then resumed at once, and queued again. Kafka's
own figures of the same chains, per API, are in docs/request-time.md (bench.request_time).
"""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import pytest

from localkafka import workloads
from localkafka.cluster import KafkaCluster
from localkafka.franz_go import CHAINS, run_chain
from localkafka.proxy_process import SHORT_QUOTA_WINDOWS, RunningProxy, start_proxy
from protocol.client_quotas import AlterEntry
from tests.integration.support.scrape import scrape, total

QUOTA = 20.0
#: records through each chain: enough for every group of the chain to be throttled
RECORDS = 30_000
CHAIN_TIMEOUT_S = 150.0
BOUND = 1.25
#: the 2 x 1 s windows of the proxy's [broker] section (SHORT_QUOTA_WINDOWS), on the brokers
WINDOWS = {"quota.window.num": "2", "quota.window.size.seconds": "1"}


@dataclass
class Legs:
    """One chain's two clusters: the broker's own quota on one, the proxy's on the other."""

    chain: str
    broker: KafkaCluster
    proxied: KafkaCluster
    proxy: RunningProxy


@pytest.fixture(scope="module")
def legs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[Legs]]:
    """Two clusters per chain, so that both chains run at once without sharing a quota (every
    chain's principal is ANONYMOUS): four brokers and two proxies on the machine together."""
    clusters = {
        (chain, leg): KafkaCluster(
            workdir=tmp_path_factory.mktemp(f"chains-{chain}-{leg}"), overrides=WINDOWS
        )
        for chain in CHAINS
        for leg in ("broker", "proxied")
    }
    with ThreadPoolExecutor(len(clusters)) as pool:
        list(pool.map(KafkaCluster.start, clusters.values()))
    proxies: list[RunningProxy] = []
    try:
        entry = AlterEntry([("user", None)], [("request_percentage", QUOTA)])
        config = f'{SHORT_QUOTA_WINDOWS}\n[users."<default>"]\nrequest_percentage = {QUOTA}\n'
        legs = []
        for chain in CHAINS:
            broker, proxied = clusters[chain, "broker"], clusters[chain, "proxied"]
            workloads.alter_client_quotas(broker.bootstrap_servers, [entry])
            directory = tmp_path_factory.mktemp(f"chains-{chain}-proxy")
            proxies.append(start_proxy(directory, proxied.bootstrap_servers, 1, config))
            legs.append(Legs(chain, broker, proxied, proxies[-1]))
        yield legs
    finally:
        for proxy in proxies:
            proxy.stop()
        for cluster in clusters.values():
            cluster.stop()


def throttled(proxy: RunningProxy) -> float:
    return total(
        scrape(proxy.metrics_url), "kafka_quota_proxy_throttles_total", quota="request_percentage"
    )


def test_a_real_clients_chains_take_about_as_long_through_the_proxy(legs: list[Legs]) -> None:
    """Every leg of both chains at once; each chain's two legs compared."""
    with ThreadPoolExecutor(2 * len(legs)) as pool:
        runs = {
            (each.chain, leg): pool.submit(run_chain, each.chain, seeds, RECORDS, CHAIN_TIMEOUT_S)
            for each in legs
            for leg, seeds in (
                ("broker", each.broker.bootstrap_servers),
                ("proxy", each.proxy.bootstrap),
            )
        }
        results = {key: run.result() for key, run in runs.items()}
    for each in legs:
        on_broker, through_proxy = results[each.chain, "broker"], results[each.chain, "proxy"]
        ratio = through_proxy.seconds / on_broker.seconds
        print(
            f"{each.chain}: {on_broker.seconds:.1f} s under the broker's quota,"
            f" {through_proxy.seconds:.1f} s under the proxy's ({ratio:.2f} x),"
            f" {throttled(each.proxy):.0f} responses throttled by the proxy"
        )
    for each in legs:
        on_broker, through_proxy = results[each.chain, "broker"], results[each.chain, "proxy"]
        assert on_broker.passed, on_broker.output
        assert through_proxy.passed, through_proxy.output
        # the quota held the chain through the proxy: the comparison is of two quotas at work
        assert throttled(each.proxy) > 0, each.chain
        assert through_proxy.seconds <= BOUND * on_broker.seconds, each.chain
