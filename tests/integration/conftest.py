"""A real Kafka (from the Maven-fetched jars) and the real proxy CLI in front of it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from localkafka.cluster import KafkaCluster
from localkafka.proxy_process import GENEROUS_GUARDS, RunningProxy, start_proxy
from tests.integration.support.clients import IDENTITY_USERS, SASL_USERS


@pytest.fixture(scope="session")
def kafka3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaCluster]:
    """Three brokers, with SASL and TLS listeners beside the PLAINTEXT one: SASL for the
    tests of the proxy's own identity (test_cluster_identity.py), TLS for a TLS cluster of
    three behind one SNI port (test_sni.py); clients of the others never see them."""
    cluster = KafkaCluster(
        brokers_count=3,
        workdir=tmp_path_factory.mktemp("kafka3"),
        sasl_users=IDENTITY_USERS,
        tls=True,
    )
    cluster.start()
    yield cluster
    cluster.stop()


@pytest.fixture(scope="session")
def kafka1(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaCluster]:
    """One broker with every listener (PLAINTEXT, SASL_PLAINTEXT, SSL, SASL_SSL) for the
    modules that need one broker and nothing of their own: a cluster start is seconds of the
    suite each. num.partitions is 11 so that a topic created with the cluster's default is
    told apart from one the proxy would count as 1; every other topic names its count.
    KIP-848 groups heartbeat every half second instead of five (test_request_time.py's
    rebalances), which the classic protocol's groups never see."""
    cluster = KafkaCluster(
        workdir=tmp_path_factory.mktemp("kafka1"),
        sasl_users=SASL_USERS,
        tls=True,
        overrides={
            "num.partitions": "11",
            "group.consumer.heartbeat.interval.ms": "500",
            "group.consumer.min.heartbeat.interval.ms": "500",
        },
    )
    cluster.start()
    yield cluster
    cluster.stop()


@pytest.fixture(scope="session")
def proxy3(
    kafka3: KafkaCluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RunningProxy]:
    # the proxy learns the other two brokers from the first one's metadata; every guard is
    # on, far above what the clients of the tests that share it send
    proxy = start_proxy(
        tmp_path_factory.mktemp("proxy3"), kafka3.brokers[0].address, 3, GENEROUS_GUARDS
    )
    yield proxy
    proxy.stop()
