"""The local Kafka's SSL and SASL_SSL listeners (issue 16's test cluster): certificates from a
throwaway CA made at start, verified by clients with hostname verification on, and refused by
a client that does not trust that CA."""

from __future__ import annotations

import asyncio
import socket
import ssl
from collections.abc import Iterator

import pytest
from aiokafka.helpers import create_ssl_context
from cryptography import x509
from cryptography.x509.oid import NameOID

from localkafka import KafkaCluster
from tests.integration import clients

pytestmark = pytest.mark.integration

USERS = {"alice": "alice-secret"}


@pytest.fixture(scope="module")
def tls_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaCluster]:
    cluster = KafkaCluster(
        brokers_count=1, workdir=tmp_path_factory.mktemp("tls"), sasl_users=USERS, tls=True
    )
    cluster.start()
    yield cluster
    cluster.stop()


def handshake(address: str, context: ssl.SSLContext) -> str:
    """The common name the server's verified certificate gives."""
    host, port = address.rsplit(":", 1)
    with (
        socket.create_connection((host, int(port)), timeout=10) as raw,
        context.wrap_socket(raw, server_hostname=host) as tls,
    ):
        certificate = x509.load_der_x509_certificate(tls.getpeercert(binary_form=True) or b"")
    return str(certificate.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value)


async def test_clients_produce_and_consume_over_ssl_and_sasl_ssl(tls_cluster: KafkaCluster) -> None:
    broker = tls_cluster.brokers[0]
    ca = tls_cluster.ca_certificate
    assert ca is not None
    topic = "tls"
    await asyncio.to_thread(clients.create_topic, broker.address, topic, 2, 1)

    trusting = ssl.create_default_context(cafile=str(ca))
    assert await asyncio.to_thread(handshake, broker.ssl_address, trusting) == "node-1"
    with pytest.raises(ssl.SSLCertVerificationError):  # the system's CAs do not know it
        await asyncio.to_thread(handshake, broker.ssl_address, ssl.create_default_context())

    over_ssl = [f"ssl-{i}".encode() for i in range(100)]
    aiokafka_ssl = {"security_protocol": "SSL", "ssl_context": create_ssl_context(cafile=str(ca))}
    await clients.aiokafka_produce(broker.ssl_address, topic, over_ssl, **aiokafka_ssl)

    over_sasl_ssl = [f"sasl-ssl-{i}".encode() for i in range(100)]
    scram = {
        "security_protocol": "SASL_SSL",
        "ssl_cafile": str(ca),
        "sasl_mechanism": "SCRAM-SHA-512",
        "sasl_plain_username": "alice",
        "sasl_plain_password": USERS["alice"],
    }
    await asyncio.to_thread(
        clients.kafka_python_produce, broker.sasl_ssl_address, topic, over_sasl_ssl, **scram
    )

    got, brokers = await clients.aiokafka_consume(
        broker.ssl_address, topic, "tls-readers", 200, **aiokafka_ssl
    )
    assert sorted(got) == sorted(over_ssl + over_sasl_ssl)
    assert brokers == {broker.ssl_address}  # the listener advertises itself
