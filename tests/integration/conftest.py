"""A real Kafka (from the Maven-fetched jars) and the real proxy CLI in front of it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from localkafka import KafkaCluster
from localkafka.proxy_process import RunningProxy, start_proxy


@pytest.fixture(scope="session")
def kafka3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaCluster]:
    cluster = KafkaCluster(brokers_count=3, workdir=tmp_path_factory.mktemp("kafka3"))
    cluster.start()
    yield cluster
    cluster.stop()


@pytest.fixture(scope="session")
def proxy3(
    kafka3: KafkaCluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RunningProxy]:
    # the proxy learns the other two brokers from the first one's metadata
    proxy = start_proxy(tmp_path_factory.mktemp("proxy3"), kafka3.brokers[0].address, 3)
    yield proxy
    proxy.stop()
