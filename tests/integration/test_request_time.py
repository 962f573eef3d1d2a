"""request_percentage charged as a broker charges it (issue 41): each workload runs twice at
once through one proxy, one leg under the broker's own request quota and one under the
proxy's, with the same quota and windows (Kafka's default 11 x 1 s); the legs get the same
throttle and finish in about the same time, and a greedy flood is held at least as tightly
as the broker holds it.

Both legs go through the proxy so that what differs between them is who enforces the quota,
not the proxy's own latency. The quota is 20 % of a thread, the default the issue's operators
set: the broker's own quota charges these workloads 0.1-8 % here, and charging round trips
took a rebalancing group 43-48 % (docs/request-time.md has the figures, from
bench.request_time, which also runs them at tighter quotas and on three brokers). The flood's
quota is 2 %, under what it takes, so that both hold it. The broker's own measure of each
leg (JMX) is printed beside the proxy's estimate.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pytest

from localkafka import workloads as load
from localkafka.cluster import KafkaCluster
from localkafka.proxy_process import RunningProxy, start_proxy
from localkafka.request_legs import (
    WORKLOADS,
    Leg,
    broker_quotas,
    client_id,
    describe,
    proxy_quotas,
    remove_quotas,
    run_legs,
)

QUOTA, FLOOD_QUOTA = 20.0, 2.0
#: throttles that add up to less than this share of a run are noise, not a difference
NEGLIGIBLE_THROTTLE = 0.02


def quota(workload: str) -> float:
    return FLOOD_QUOTA if workload == "flood" else QUOTA


@dataclass
class Setup:
    proxy: RunningProxy
    kafka: KafkaCluster


@pytest.fixture(scope="module")
def setup(kafka1: KafkaCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    address = kafka1.brokers[0].address
    set_ = broker_quotas(
        address,
        {client_id(workload, "broker"): quota(workload) for workload in WORKLOADS},
        [client_id(workload, "proxy") for workload in WORKLOADS],
    )
    config = proxy_quotas({client_id(w, "proxy"): quota(w) for w in WORKLOADS})
    tmp = tmp_path_factory.mktemp("request-time")
    proxy = start_proxy(tmp, kafka1.bootstrap_servers, 1, config)
    try:
        yield Setup(proxy, kafka1)
    finally:
        proxy.stop()
        remove_quotas(address, set_)


@pytest.fixture
def topic(setup: Setup, request: pytest.FixtureRequest) -> Callable[[str, str], str]:
    """A topic of six partitions per leg and purpose, named after the test."""
    made: set[str] = set()

    def name(leg: str, purpose: str) -> str:
        topic = f"{request.node.name}-{leg}-{purpose}".replace("[", "-").replace("]", "")
        if topic not in made:
            setup.kafka.create_topic(topic, 6)
            made.add(topic)
        return topic

    return name


def legs(setup: Setup, workload: str, topic: Callable[[str, str], str]) -> dict[str, Leg]:
    bootstrap = setup.proxy.bootstrap
    results = run_legs(
        setup.kafka,
        [setup.proxy.metrics_url],
        workload,
        {"broker": bootstrap, "proxy": bootstrap},
        topic,
    )
    for leg, result in results.items():
        print(describe(workload, leg, result))
    return results


def assert_as_the_broker(results: dict[str, Leg]) -> None:
    """The same throttle, and where a quota held either leg, the same time. Where neither
    was held, the quotas cost both legs nothing alike, and their times differ only by this
    machine (unthrottled transactions took 2.85 and 3.68 s in one run here)."""
    broker, proxy = results["broker"].outcome, results["proxy"].outcome
    negligible = NEGLIGIBLE_THROTTLE * 1000 * max(broker.seconds, proxy.seconds)
    if broker.throttle_ms > negligible or proxy.throttle_ms > negligible:
        assert 0.8 <= proxy.throttle_ms / max(broker.throttle_ms, 1) <= 1.25, results
        assert 0.8 <= proxy.seconds / broker.seconds <= 1.25, results


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_a_rebalancing_group_is_charged_as_the_broker_charges_it(
    setup: Setup, topic: Callable[[str, str], str], protocol: str
) -> None:
    """Three members, the oldest leaving and a new one joining, again and again: a JoinGroup
    waits for the other members, a SyncGroup for the leader, a KIP-848 heartbeat for the
    coordinator's commit, and none of that holds a broker thread."""
    assert_as_the_broker(legs(setup, protocol, topic))


def test_a_transactional_etl_is_charged_as_the_broker_charges_it(
    setup: Setup, topic: Callable[[str, str], str]
) -> None:
    """Consume, transform and produce in transactions: AddPartitionsToTxn, AddOffsetsToTxn,
    TxnOffsetCommit and EndTxn go to the transaction and group coordinators."""
    for leg in ("broker", "proxy"):
        load.fill(setup.kafka.bootstrap_servers, topic(leg, "source"), 2000, b"v%d".__mod__)
    assert_as_the_broker(legs(setup, "transactions", topic))


def test_an_acks_all_producer_is_charged_as_the_broker_charges_it(
    setup: Setup, topic: Callable[[str, str], str]
) -> None:
    assert_as_the_broker(legs(setup, "acks-all", topic))


def test_idle_long_polls_are_charged_as_the_broker_charges_them(
    setup: Setup, topic: Callable[[str, str], str]
) -> None:
    """Six consumers long-polling empty partitions: a Fetch parked in purgatory holds no
    thread; a record written after 5 s wakes each of them as soon as it is written."""
    assert_as_the_broker(legs(setup, "idle", topic))


def test_a_metadata_flood_is_held_at_least_as_tightly_as_the_broker_holds_it(
    setup: Setup, topic: Callable[[str, str], str]
) -> None:
    """A client that does cost threads (Metadata back to back, throttle_time_ms ignored) is
    not let through by charging less than round trips: under a quota smaller than what it
    takes, it gets no more requests answered than under the broker's own, and is throttled
    for at least as long."""
    results = legs(setup, "flood", topic)
    broker, proxy = results["broker"].outcome, results["proxy"].outcome
    assert broker.throttle_ms > 0, results  # the broker holds it: the comparison means something
    assert proxy.requests <= broker.requests, results
    assert proxy.throttle_ms >= 0.8 * broker.throttle_ms, results
