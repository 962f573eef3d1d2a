"""One TLS port for a TLS cluster of three ([proxy] routing = "sni"): clients on another
host (a network namespace whose own hosts file names the proxy's addresses) reach the
bootstrap and every broker by name on that one port, and a name the proxy does not serve
fails the TLS handshake."""

from __future__ import annotations

import socket
import ssl
import struct
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from localkafka.cluster import KafkaCluster
from localkafka.proxy_process import RunningProxy, start_proxy, tls_sections
from localkafka.scrape import scrape
from tests.integration.support import clients
from tests.integration.support.namespace import Namespace, namespace
from tests.integration.support.tls_clients import values

HOST_ADDRESS, CLIENT_ADDRESS = "10.231.0.1", "10.231.0.2"
DOMAIN = "kafka.test"
BOOTSTRAP_HOST = f"bootstrap.{DOMAIN}"
PYTHON_CLIENTS = ("aiokafka", "kafka-python", "confluent")
RECORDS = 100
MAX_CONNECTIONS = 20
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def sni(
    kafka3: KafkaCluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[RunningProxy, Namespace]]:
    assert kafka3.ca is not None
    tmp = tmp_path_factory.mktemp("sni")
    keystore = kafka3.ca.server("proxy-sni", HOST_ADDRESS, [BOOTSTRAP_HOST, f"*.{DOMAIN}"])
    extra = (
        f'listen_host = "{HOST_ADDRESS}"\nrouting = "sni"\nmax_connections = {MAX_CONNECTIONS}\n'
        + tls_sections(keystore, kafka3.ca_certificate)
        + f'\n[sni]\nbootstrap_host = "{BOOTSTRAP_HOST}"\nbroker_host = "broker-{{id}}.{DOMAIN}"\n'
        + "\n[usage]\nenabled = false\n"
    )
    names = [BOOTSTRAP_HOST, *(f"broker-{b.node_id}.{DOMAIN}" for b in kafka3.brokers)]
    upstream = ",".join(broker.ssl_address for broker in kafka3.brokers)
    with namespace(
        "kqp-sni", HOST_ADDRESS, CLIENT_ADDRESS, dict.fromkeys(names, HOST_ADDRESS)
    ) as ns:
        proxy = start_proxy(tmp, upstream, 3, extra)
        yield proxy, ns
        proxy.stop()


def in_namespace(ns: Namespace, *args: str) -> str:
    """A Python client family's run (support/tls_clients.py) inside the namespace."""
    command = [*ns.wrapper, sys.executable, "-m", "tests.integration.support.tls_clients", *args]
    result = subprocess.run(command, capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout


def test_every_client_family_produces_and_reads_back_through_one_port(
    sni: tuple[RunningProxy, Namespace], kafka3: KafkaCluster, tmp_path: Path
) -> None:
    proxy, ns = sni
    assert proxy.bootstrap.startswith(f"{BOOTSTRAP_HOST}:")
    ca = str(kafka3.ca_certificate)
    topic = "sni-one-port"
    clients.create_topic(kafka3.bootstrap_servers, topic, partitions=6, replication=3)
    java = tmp_path / "client.properties"
    java.write_text(
        f"security.protocol=SSL\nssl.truststore.type=PEM\nssl.truststore.location={ca}\n"
    )
    expected = [str(i).encode() for i in range(RECORDS)]  # VerifiableProducer's own
    for client in PYTHON_CLIENTS:
        in_namespace(ns, "produce", client, proxy.bootstrap, topic, ca, str(RECORDS))
        expected += values(client, RECORDS)
    clients.java_produce(
        kafka3, proxy.bootstrap, topic, expected[:RECORDS], java, wrapper=ns.wrapper
    )
    for client in PYTHON_CLIENTS:
        read = in_namespace(ns, "consume", client, proxy.bootstrap, topic, ca, str(len(expected)))
        assert sorted(read.encode().split()) == sorted(expected), client
    read_by_java = clients.java_consume(
        kafka3, proxy.bootstrap, topic, f"{topic}-java", len(expected), java, wrapper=ns.wrapper
    )
    assert sorted(read_by_java) == sorted(expected)
    listeners = {
        dict(labels)["listener"]
        for name, labels in scrape(proxy.metrics_url)
        if name == "kafka_quota_proxy_listener_up"
    }
    assert listeners == {"bootstrap"}  # one port, whatever the brokers


@pytest.mark.parametrize("name", ["nobody.kafka.test", "broker-9.kafka.test", None])
def test_a_name_the_proxy_does_not_serve_fails_the_handshake(
    sni: tuple[RunningProxy, Namespace], kafka3: KafkaCluster, name: str | None
) -> None:
    proxy, _ = sni
    port = int(proxy.bootstrap.rsplit(":", 1)[1])
    context = ssl.create_default_context(cafile=str(kafka3.ca_certificate))
    context.check_hostname = name is not None
    with (
        socket.create_connection((HOST_ADDRESS, port), timeout=10) as raw,
        pytest.raises(ssl.SSLError, match="UNRECOGNIZED_NAME"),
    ):
        context.wrap_socket(raw, server_hostname=name)
    with (
        socket.create_connection((HOST_ADDRESS, port), timeout=10) as raw,
        context.wrap_socket(raw, server_hostname="broker-1.kafka.test") as served,
    ):
        assert served.version() is not None
    assert f"closing client {HOST_ADDRESS}: {name or ''!r}" in proxy.log()


def test_clients_that_reset_before_their_hello_give_their_slots_back(
    sni: tuple[RunningProxy, Namespace], kafka3: KafkaCluster
) -> None:
    """A TCP check (or a client gone) resets before any ClientHello: each frees its slot of
    max_connections, so twice as many as the slots leave the port serving."""
    proxy, _ = sni
    port = int(proxy.bootstrap.rsplit(":", 1)[1])
    for _ in range(2 * MAX_CONNECTIONS):
        raw = socket.create_connection((HOST_ADDRESS, port), timeout=10)
        raw.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        raw.close()
    context = ssl.create_default_context(cafile=str(kafka3.ca_certificate))
    with (
        socket.create_connection((HOST_ADDRESS, port), timeout=10) as raw,
        context.wrap_socket(raw, server_hostname=BOOTSTRAP_HOST) as served,
    ):
        assert served.version() is not None
