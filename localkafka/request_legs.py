"""The workloads of issue 41 run under two request quotas side by side: the broker's own and
the proxy's (tests/integration/test_request_time.py asserts them; bench.request_time prints
them at several quotas and cluster sizes).

A leg is one client-id: the broker's legs have a broker quota (AlterClientQuotas), the
proxy's a proxy quota and a broker quota they never reach, so that the broker measures the
request time of both (JMX, localkafka's RequestQuotaMetrics helper) beside the proxy's
estimate (its Prometheus endpoint), once a second while the legs run.
"""

from __future__ import annotations

import statistics
import subprocess
import threading
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from localkafka import workloads as load
from localkafka.cluster import KafkaCluster
from localkafka.jars import java_command
from localkafka.scrape import scrape, value
from protocol.client_quotas import AlterEntry

#: the legs' names, and the workloads, by the names their client-ids carry
WORKLOADS = ("classic", "consumer", "transactions", "acks-all", "idle", "flood")
#: a broker quota the proxy's legs never reach: it makes the broker measure them apart
UNREACHED = 1e6
#: KIP-848 groups heartbeat every half second instead of five: a rebalance is seconds, not
#: tens of them (the classic protocol's groups never see these)
KIP_848_HEARTBEATS = {
    "group.consumer.heartbeat.interval.ms": "500",
    "group.consumer.min.heartbeat.interval.ms": "500",
}

#: one leg's work: (bootstrap, client-id, a topic of six partitions per purpose) -> outcome
Work = Callable[[str, str, Callable[[str], str]], load.Outcome]


def client_id(workload: str, leg: str) -> str:
    return f"request-time-{workload}-{leg}"


def broker_quotas(
    address: str, quotas: Mapping[str, float | None], proxy_legs: list[str]
) -> list[AlterEntry]:
    """Set (or, with None, remove) each broker leg's quota and the proxy legs' unreached one;
    what was set, for removing it."""
    entries = [
        AlterEntry([("client-id", client)], [("request_percentage", quota)])
        for client, quota in quotas.items()
    ] + [
        AlterEntry([("client-id", client)], [("request_percentage", UNREACHED)])
        for client in proxy_legs
    ]
    load.alter_client_quotas(address, entries)
    return entries


def remove_quotas(address: str, entries: list[AlterEntry]) -> None:
    load.alter_client_quotas(
        address, [AlterEntry(entry.pairs, [("request_percentage", None)]) for entry in entries]
    )


def proxy_quotas(quotas: Mapping[str, float]) -> str:
    """The proxy config's quota sections for these client-ids."""
    return "".join(
        f'[clients."{client}"]\nrequest_percentage = {quota}\n' for client, quota in quotas.items()
    )


def work_of(workload: str, source_records: int = 2000) -> Work:
    """What one leg of `workload` runs (each bounded: a leg that cannot finish raises)."""

    def classic(bootstrap: str, client: str, topic: Callable[[str], str]) -> load.Outcome:
        return load.rebalancing_group(
            bootstrap, client, f"{client}-group", topic("group"), 6, "classic", 16, 120
        )

    def consumer(bootstrap: str, client: str, topic: Callable[[str], str]) -> load.Outcome:
        return load.rebalancing_group(
            bootstrap, client, f"{client}-group", topic("group"), 6, "consumer", 48, 120
        )

    def transactions(bootstrap: str, client: str, topic: Callable[[str], str]) -> load.Outcome:
        return load.transactional_etl(
            bootstrap,
            client,
            f"{client}-group",
            topic("source"),
            topic("sink"),
            source_records,
            50,
            120,
        )

    def acks_all(bootstrap: str, client: str, topic: Callable[[str], str]) -> load.Outcome:
        return load.acks_all_producer(bootstrap, client, topic("acks"), 4000, 120)

    def idle(bootstrap: str, client: str, topic: Callable[[str], str]) -> load.Outcome:
        return load.idle_consumers(bootstrap, client, topic("idle"), 6, 5, 60)

    def flood(bootstrap: str, client: str, topic: Callable[[str], str]) -> load.Outcome:
        return load.run_flood(bootstrap, client, 10.0)

    works: dict[str, Work] = {
        "classic": classic,
        "consumer": consumer,
        "transactions": transactions,
        "acks-all": acks_all,
        "idle": idle,
        "flood": flood,
    }
    return works[workload]


class ChargeSamples:
    """The request time each client-id is charged, in % of a thread, once a second: by the
    broker (JMX, on the first broker only) and by the proxy (its Prometheus endpoint)."""

    def __init__(self, kafka: KafkaCluster, metrics_urls: list[str], clients: list[str]) -> None:
        process = kafka.brokers[0].process
        assert process is not None
        self._jmx = subprocess.Popen(
            java_command(
                str(load.REQUEST_QUOTA_METRICS), [str(process.pid), "1000", "300"], heap="128m"
            ),
            stdout=subprocess.PIPE,
            text=True,
        )
        self._urls, self._clients = metrics_urls, clients
        self.broker: dict[str, list[float]] = {client: [] for client in clients}
        self.proxy: dict[str, list[float]] = {client: [] for client in clients}
        self._stop = threading.Event()
        self._threads = [
            threading.Thread(target=self._read_broker, daemon=True),
            threading.Thread(target=self._read_proxy, daemon=True),
        ]
        for thread in self._threads:
            thread.start()

    def _read_broker(self) -> None:
        assert self._jmx.stdout is not None
        for line in self._jmx.stdout:
            fields = line.split()
            if len(fields) == 5 and fields[2] in self.broker and fields[3] != "NaN":
                self.broker[fields[2]].append(float(fields[3]))

    def _read_proxy(self) -> None:
        while not self._stop.wait(1.0):
            for url in self._urls:
                samples = scrape(url)
                for client in self._clients:
                    share = value(
                        samples, "kafka_server_request_request_time", user="", client_id=client
                    )
                    if share is not None:
                        self.proxy[client].append(share)

    def stop(self) -> None:
        self._stop.set()
        self._jmx.kill()
        self._jmx.wait()
        for thread in self._threads:
            thread.join(5)

    def means(self, client: str) -> tuple[float | None, float | None]:
        """(the broker's, the proxy's) mean request time of `client`, % of a thread."""
        broker, proxy = self.broker[client], self.proxy[client]
        return (
            statistics.mean(broker) if broker else None,
            statistics.mean(proxy) if proxy else None,
        )


@dataclass
class Leg:
    """One client-id's run of a workload, and what it was charged."""

    outcome: load.Outcome
    #: mean request time, % of a thread, measured by the broker and estimated by the proxy
    broker_measured: float | None
    proxy_estimated: float | None


def run_legs(
    kafka: KafkaCluster,
    metrics_urls: list[str],
    workload: str,
    legs: Mapping[str, str],
    topic: Callable[[str, str], str],
    *,
    together: bool = True,
) -> dict[str, Leg]:
    """Each leg (name -> bootstrap) of `workload` under its own client-id, all at once so
    that they see the same machine, or one after another (`together` False)."""
    work = work_of(workload)
    ids = {leg: client_id(workload, leg) for leg in legs}
    samples = ChargeSamples(kafka, metrics_urls, list(ids.values()))
    try:

        def one(leg: str) -> load.Outcome:
            return work(legs[leg], ids[leg], lambda purpose: topic(leg, purpose))

        if together:
            with ThreadPoolExecutor(len(legs)) as pool:
                futures = {leg: pool.submit(one, leg) for leg in legs}
                outcomes = {leg: future.result() for leg, future in futures.items()}
        else:
            outcomes = {leg: one(leg) for leg in legs}
    finally:
        samples.stop()
    return {leg: Leg(outcomes[leg], *samples.means(ids[leg])) for leg in legs}


def describe(workload: str, leg: str, result: Leg) -> str:
    def share(value: float | None) -> str:
        return "-" if value is None else f"{value:.2f} %"

    outcome = result.outcome
    return (
        f"{workload} under {leg}'s quota: {outcome.seconds:.2f} s, throttle"
        f" {outcome.throttle_ms} ms over {outcome.throttled} responses,"
        f" {outcome.requests or '-'} requests; request time measured by the broker"
        f" {share(result.broker_measured)}, estimated by the proxy {share(result.proxy_estimated)}"
    )
