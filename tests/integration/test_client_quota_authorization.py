"""Who may alter the proxy's quotas is the cluster's authorizer's to say (issue 28).

A KRaft broker with StandardAuthorizer and SASL users: admin is a super user; alice may
describe the cluster and its configs but not alter them. Through the proxy, stock kafka-configs as
alice gets CLUSTER_AUTHORIZATION_FAILED, as the broker gave it, and nothing changes; as admin
the alteration is made. A topic's quota (issue 38) is the topic's: alice, who may describe a
topic's configs but not alter them, gets TOPIC_AUTHORIZATION_FAILED for it.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from localkafka.cluster import KafkaCluster
from localkafka.proxy_process import RunningProxy, start_proxy

USERS = {"admin": "admin-secret", "alice": "alice-secret"}
CONFIGS = "kafka.admin.ConfigCommand"
PASSWORD_ENV = "KQP_ADMIN_PASSWORD"
FILE = f"""
[cluster]
security.protocol = "SASL_PLAINTEXT"
sasl.mechanism = "SCRAM-SHA-512"
sasl.username = "admin"
sasl.password = "${{env:{PASSWORD_ENV}}}"

[quota_store]
topic = "kafka-quota-proxy-quotas"
"""


@pytest.fixture(scope="module")
def kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaCluster]:
    cluster = KafkaCluster(
        workdir=tmp_path_factory.mktemp("kafka-authz"),
        sasl_users=USERS,
        overrides={
            "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            # the brokers' own PLAINTEXT and controller listeners are ANONYMOUS
            "super.users": "User:admin;User:ANONYMOUS",
        },
    )
    cluster.start()
    cluster.tool(
        "org.apache.kafka.tools.AclCommand",
        *("--bootstrap-server", cluster.bootstrap_servers, "--add", "--cluster"),
        *("--allow-principal", "User:alice", "--operation", "DescribeConfigs"),
        *("--operation", "Describe"),  # kafka-configs describes users' SCRAM credentials too
    )
    yield cluster
    cluster.stop()


@pytest.fixture
def proxy(kafka: KafkaCluster, tmp_path: Path) -> Iterator[RunningProxy]:
    running = start_proxy(
        tmp_path,
        kafka.brokers[0].sasl_address,
        1,
        FILE,
        env={PASSWORD_ENV: USERS["admin"]},
    )
    yield running
    running.stop()


def client_properties(tmp_path: Path, user: str) -> Path:
    path = tmp_path / f"{user}.properties"
    path.write_text(
        "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\n"
        "sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required "
        f'username="{user}" password="{USERS[user]}";\n'
    )
    return path


def test_a_user_the_authorizer_refuses_changes_nothing_and_an_admin_may(
    kafka: KafkaCluster, proxy: RunningProxy, tmp_path: Path
) -> None:
    def configs(user: str, *args: str) -> str:
        return kafka.tool(
            CONFIGS,
            *("--bootstrap-server", proxy.bootstrap),
            *("--command-config", str(client_properties(tmp_path, user))),
            *args,
        )

    alter = ["--alter", "--entity-type", "users", "--entity-name", "carol"]
    with pytest.raises(RuntimeError) as refused:
        configs("alice", *alter, "--add-config", "producer_byte_rate=1000")
    assert "ClusterAuthorizationException" in str(refused.value)
    assert "Cluster authorization failed." in str(refused.value)
    described = ["--describe", "--entity-type", "users", "--entity-name", "carol"]
    assert "Quota configs" not in configs("admin", *described)  # nothing changed
    assert "Completed updating" in configs(
        "admin", *alter, "--add-config", "producer_byte_rate=1000"
    )
    assert (
        "Quota configs for user-principal 'carol' are producer_byte_rate=1000.0"
        in configs("alice", *described)  # alice may describe, as the cluster lets her
    )


def test_a_topic_quota_is_altered_only_by_whom_the_authorizer_lets_alter_the_topic(
    kafka: KafkaCluster, proxy: RunningProxy, tmp_path: Path
) -> None:
    """The proxy's topic configs are the topic's: AlterConfigs on it, as for retention.ms."""
    topic = "guarded"
    kafka.create_topic(topic, partitions=1)
    kafka.tool(
        "org.apache.kafka.tools.AclCommand",
        *("--bootstrap-server", kafka.bootstrap_servers, "--add", "--topic", topic),
        *("--allow-principal", "User:alice", "--operation", "DescribeConfigs"),
        *("--operation", "Describe"),  # kafka-configs looks the topic up first
    )

    def configs(user: str, *args: str) -> str:
        return kafka.tool(
            CONFIGS,
            *("--bootstrap-server", proxy.bootstrap),
            *("--command-config", str(client_properties(tmp_path, user))),
            *("--entity-type", "topics", "--entity-name", topic),
            *args,
        )

    quota = "kafka-quota-proxy.producer_byte_rate"
    with pytest.raises(RuntimeError) as refused:
        configs("alice", "--alter", "--add-config", f"{quota}=1000")
    assert "TopicAuthorizationException" in str(refused.value)
    assert configs("alice", "--describe") == "Dynamic configs for topic guarded are:\n"
    assert "Completed updating" in configs("admin", "--alter", "--add-config", f"{quota}=1000")
    assert f"{quota}=1000 sensitive=false" in configs("alice", "--describe")
