"""TLS on both sides (issue 16). The local Kafka's SSL and SASL_SSL listeners use certificates
from a throwaway CA made at start; the proxy, with a certificate from the same CA, serves
SASL_SSL clients in front of the SASL_SSL listener: their SASL exchanges pass through inside
its TLS sessions, the broker authenticates them, and the proxy holds each principal to its
own quota."""

from __future__ import annotations

import asyncio
import json
import math
import os
import shutil
import signal
import socket
import ssl
import struct
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.helpers import create_ssl_context
from cryptography import x509
from cryptography.x509.oid import NameOID

from localkafka import workloads
from localkafka.cluster import KafkaCluster
from localkafka.load import Timeline, aiokafka_flood, kafka_python_flood
from localkafka.ports import LOOPBACK
from localkafka.proxy_process import SHORT_QUOTA_WINDOWS, RunningProxy, start_proxy, tls_sections
from localkafka.scrape import scrape, value, wait_for_metric
from localkafka.tls import ThrowawayCA
from protocol.client_quotas import AlterEntry
from tests.integration.support import clients
from tests.integration.support.clients import SASL_USERS

ALICE_QUOTA = 100_000  # producer_byte_rate, B/s
CLIENT_ID = "tls-app"
#: [proxy] connect_timeout_s, which also bounds a client's TLS handshake
HANDSHAKE_TIMEOUT_S = 5
ACCEPTED = "kafka_quota_proxy_connections_accepted_total"


@pytest.fixture(scope="module")
def tls_proxy(
    kafka1: KafkaCluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RunningProxy]:
    assert kafka1.ca is not None
    keystore = kafka1.ca.server("proxy", LOOPBACK)
    tls = tls_sections(keystore, kafka1.ca_certificate, "SASL_SSL")
    config = f"""connect_timeout_s = {HANDSHAKE_TIMEOUT_S}
{tls}
{SHORT_QUOTA_WINDOWS}
[users.alice]
producer_byte_rate = {ALICE_QUOTA}
"""
    tmp = tmp_path_factory.mktemp("tls-proxy")
    proxy = start_proxy(tmp, kafka1.brokers[0].sasl_ssl_address, 1, config)
    yield proxy
    proxy.stop()


#: principals from client certificates: CN=<name>,OU=apps names User:<name>
WRITERS = {"writer-a": 100_000, "writer-b": 300_000}  # producer_byte_rate, B/s


@pytest.fixture(scope="module")
def mtls_proxy(
    kafka1: KafkaCluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RunningProxy]:
    """SSL clients presenting certificates, in front of the cluster's SSL listener."""
    assert kafka1.ca is not None
    keystore = kafka1.ca.server("mtls-proxy", LOOPBACK)
    ca = kafka1.ca_certificate
    quotas = "".join(
        f'[users."{name}"]\nproducer_byte_rate = {rate}\n' for name, rate in WRITERS.items()
    )
    client_certificates = f"""ssl.client.auth = "required"
ssl.truststore.location = "{ca}"
ssl.principal.mapping.rules = "RULE:^CN=(.*?),OU=apps$/$1/L, DEFAULT"
acknowledge.broker.sees.proxy = true
"""
    config = f"""{tls_sections(keystore, ca, listener=client_certificates)}
{SHORT_QUOTA_WINDOWS}
{quotas}"""
    tmp = tmp_path_factory.mktemp("mtls-proxy")
    proxy = start_proxy(tmp, kafka1.brokers[0].ssl_address, 1, config)
    yield proxy
    proxy.stop()


def client_certificate(cluster: KafkaCluster, name: str, expired: bool = False) -> str:
    assert cluster.ca is not None
    subject = x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, "apps"),
            x509.NameAttribute(NameOID.COMMON_NAME, name.upper()),
        ]
    )
    return str(cluster.ca.client(name, subject, expired))


def sasl_ssl(ca: str, mechanism: str, user: str) -> dict[str, Any]:
    """aiokafka's settings for a SASL_SSL client trusting only the throwaway CA."""
    return {
        "security_protocol": "SASL_SSL",
        "ssl_context": create_ssl_context(cafile=ca),
        "sasl_mechanism": mechanism,
        "sasl_plain_username": user,
        "sasl_plain_password": SASL_USERS[user],
    }


def handshake(address: str, context: ssl.SSLContext) -> str:
    """The common name the server's verified certificate gives."""
    host, port = address.rsplit(":", 1)
    with (
        socket.create_connection((host, int(port)), timeout=10) as raw,
        context.wrap_socket(raw, server_hostname=host) as tls,
    ):
        certificate = x509.load_der_x509_certificate(tls.getpeercert(binary_form=True) or b"")
    return str(certificate.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value)


async def test_clients_produce_and_consume_over_ssl_and_sasl_ssl(kafka1: KafkaCluster) -> None:
    broker = kafka1.brokers[0]
    ca = kafka1.ca_certificate
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
        "sasl_plain_password": SASL_USERS["alice"],
    }
    await asyncio.to_thread(
        clients.kafka_python_produce, broker.sasl_ssl_address, topic, over_sasl_ssl, **scram
    )

    got, brokers = await clients.aiokafka_consume(
        broker.ssl_address, topic, "tls-readers", 200, **aiokafka_ssl
    )
    assert sorted(got) == sorted(over_ssl + over_sasl_ssl)
    assert brokers == {broker.ssl_address}  # the listener advertises itself


async def test_sasl_ssl_clients_through_a_tls_proxy_are_held_to_their_own_quotas(
    kafka1: KafkaCluster, tls_proxy: RunningProxy
) -> None:
    ca = str(kafka1.ca_certificate)
    bootstrap = tls_proxy.bootstrap
    topic = "through-tls"
    await asyncio.to_thread(clients.create_topic, kafka1.brokers[0].address, topic, 1, 1)

    exact = [f"exact-{i}".encode() for i in range(200)]
    await clients.aiokafka_produce(bootstrap, topic, exact, **sasl_ssl(ca, "PLAIN", "bob"))

    seconds = 8.0
    timelines = {"alice": Timeline(), "bob": Timeline()}
    kafka_python_alice = {
        "security_protocol": "SASL_SSL",
        "ssl_cafile": ca,
        "sasl_mechanism": "SCRAM-SHA-256",
        "sasl_plain_username": "alice",
        "sasl_plain_password": SASL_USERS["alice"],
    }
    await asyncio.gather(
        asyncio.to_thread(
            kafka_python_flood,
            bootstrap,
            CLIENT_ID,
            topic,
            seconds,
            timelines["alice"],
            **kafka_python_alice,
        ),
        aiokafka_flood(
            bootstrap,
            CLIENT_ID,
            topic,
            seconds,
            timelines["bob"],
            **sasl_ssl(ca, "SCRAM-SHA-512", "bob"),
        ),
    )
    alice_rate = timelines["alice"].rate(2.0, seconds)
    print(f"alice {alice_rate:,.0f} B/s, bob {timelines['bob'].rate(2.0, seconds):,.0f} B/s")
    # the bound test_principals.py allows one connection held alone (docs/enforcement.md, "Holds")
    assert 0 < alice_rate < 1.5 * ALICE_QUOTA
    assert timelines["bob"].rate(2.0, seconds) > 0
    samples = scrape(tls_proxy.metrics_url)
    alice = value(samples, "kafka_server_produce_throttle_time", user="alice", client_id="")
    bob = value(samples, "kafka_server_produce_throttle_time", user="bob", client_id="")
    assert alice is not None and alice > 0
    assert bob is not None and math.isnan(bob)  # the same client-id, never throttled
    log = tls_proxy.log()
    assert "authenticated as User:alice" in log and "authenticated as User:bob" in log

    got, brokers = await clients.aiokafka_consume(
        bootstrap, topic, "tls-readers", 200, **sasl_ssl(ca, "SCRAM-SHA-256", "alice")
    )
    assert [value for value in got if value.startswith(b"exact-")] == exact  # each, once
    assert brokers == {tls_proxy.broker_address(1)}  # the proxy's TLS listener, rewritten


async def closed_after(reader: asyncio.StreamReader, started: float) -> float | None:
    """Seconds from `started` until the proxy closed the connection; None if it did not
    within 30 s."""
    try:
        data = await asyncio.wait_for(reader.read(65536), 30)
    except ConnectionResetError:
        data = b""
    return time.monotonic() - started if data == b"" else None


async def test_bad_tls_input_closes_only_its_own_connection(
    kafka1: KafkaCluster, tls_proxy: RunningProxy
) -> None:
    host, port = tls_proxy.bootstrap.rsplit(":", 1)
    api_versions = struct.pack(">hhih", 18, 0, 1, 1) + b"c"
    plaintext_reader, plaintext = await asyncio.open_connection(host, int(port))
    plaintext.write(struct.pack(">i", len(api_versions)) + api_versions)
    started = time.monotonic()
    stalled_reader, stalled = await asyncio.open_connection(host, int(port))  # says nothing
    refused_after = await closed_after(plaintext_reader, started)
    assert refused_after is not None and refused_after < HANDSHAKE_TIMEOUT_S  # at its bytes
    stalled_after = await closed_after(stalled_reader, started)
    assert stalled_after is not None and stalled_after >= HANDSHAKE_TIMEOUT_S
    ca = str(kafka1.ca_certificate)
    await asyncio.to_thread(clients.create_topic, kafka1.brokers[0].address, "after", 1, 1)
    values = [f"after-{i}".encode() for i in range(50)]  # the proxy goes on serving TLS
    await clients.aiokafka_produce(
        tls_proxy.bootstrap, "after", values, **sasl_ssl(ca, "PLAIN", "bob")
    )
    assert tls_proxy.process.poll() is None
    assert tls_proxy.log().count("TLS handshake failed") >= 2
    plaintext.close()
    stalled.close()


async def test_client_certificates_name_principals_held_to_their_own_quotas(
    kafka1: KafkaCluster, mtls_proxy: RunningProxy
) -> None:
    ca = str(kafka1.ca_certificate)
    topic = "mtls"
    await asyncio.to_thread(clients.create_topic, kafka1.brokers[0].address, topic, 1, 1)
    seconds = 8.0
    timelines = {name: Timeline() for name in WRITERS}

    def settings(name: str) -> dict[str, Any]:
        keystore = client_certificate(kafka1, name)
        context = create_ssl_context(cafile=ca, certfile=keystore, keyfile=keystore)
        return {"security_protocol": "SSL", "ssl_context": context}

    await asyncio.gather(
        *(
            aiokafka_flood(
                mtls_proxy.bootstrap, CLIENT_ID, topic, seconds, timelines[name], **settings(name)
            )
            for name in WRITERS
        )
    )
    rates = {name: timeline.rate(2.0, seconds) for name, timeline in timelines.items()}
    print({name: f"{rate:,.0f} B/s" for name, rate in rates.items()})
    for name, quota in WRITERS.items():
        assert 0 < rates[name] < 1.5 * quota, name  # each held to its own quota
    assert rates["writer-b"] > 1.5 * WRITERS["writer-a"]  # not to the other's
    samples = scrape(mtls_proxy.metrics_url)
    for name in WRITERS:
        throttle = value(samples, "kafka_server_produce_throttle_time", user=name, client_id="")
        assert throttle is not None and throttle > 0, name
    assert "authenticated as User:writer-a by its certificate" in mtls_proxy.log()


async def refused_after_handshake(address: str, context: ssl.SSLContext) -> bool:
    """True when the proxy ends the connection of a client presenting this certificate (in
    TLS 1.3 the client's side of the handshake completes before the server has checked it)."""
    host, port = address.rsplit(":", 1)
    api_versions = struct.pack(">hhih", 18, 0, 1, 1) + b"c"
    try:
        reader, writer = await asyncio.wait_for(
            asyncio.open_connection(host, int(port), ssl=context, server_hostname=host), 10
        )
        writer.write(struct.pack(">i", len(api_versions)) + api_versions)
        answer = await asyncio.wait_for(reader.read(4), 10)
    except (ssl.SSLError, ConnectionResetError):
        return True
    writer.close()
    return answer == b""


async def test_an_untrusted_or_expired_client_certificate_is_refused(
    kafka1: KafkaCluster, mtls_proxy: RunningProxy, tmp_path: Path
) -> None:
    ca = str(kafka1.ca_certificate)
    stranger = ThrowawayCA(tmp_path / "stranger").client(
        "stranger", x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "stranger")])
    )
    expired = client_certificate(kafka1, "writer-old", expired=True)
    for keystore in (str(stranger), expired):
        context = create_ssl_context(cafile=ca, certfile=keystore, keyfile=keystore)
        assert await refused_after_handshake(mtls_proxy.bootstrap, context), keystore
    trusted = client_certificate(kafka1, "writer-a")
    context = create_ssl_context(cafile=ca, certfile=trusted, keyfile=trusted)
    assert not await refused_after_handshake(mtls_proxy.bootstrap, context)
    assert mtls_proxy.log().count("TLS handshake failed") >= 2


async def test_every_client_library_produces_and_consumes_through_the_tls_proxy(
    kafka1: KafkaCluster, tls_proxy: RunningProxy, tmp_path: Path
) -> None:
    """aiokafka, kafka-python, librdkafka and Kafka's Java clients, SASL_SSL to the proxy
    and the proxy SASL_SSL to the broker: every record arrives once, with its contents."""
    ca = str(kafka1.ca_certificate)
    bootstrap = tls_proxy.bootstrap
    topic = "four-clients"
    await asyncio.to_thread(clients.create_topic, kafka1.brokers[0].address, topic, 3, 1)
    librdkafka = {
        "security.protocol": "SASL_SSL",
        "ssl.ca.location": ca,
        "sasl.mechanism": "SCRAM-SHA-256",
        "sasl.username": "bob",
        "sasl.password": SASL_USERS["bob"],
    }
    java = tmp_path / "client.properties"
    java.write_text(
        "security.protocol=SASL_SSL\n"
        f"ssl.truststore.type=PEM\nssl.truststore.location={ca}\n"
        "sasl.mechanism=SCRAM-SHA-512\n"
        "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required "
        f'username="alice" password="{SASL_USERS["alice"]}";\n'
    )
    values = {
        name: [f"{name}-{i}".encode() for i in range(100)]
        for name in ("aiokafka", "kafka-python", "confluent")
    }
    values["java"] = [str(i).encode() for i in range(100)]  # VerifiableProducer's own
    await clients.aiokafka_produce(
        bootstrap, topic, values["aiokafka"], **sasl_ssl(ca, "SCRAM-SHA-512", "alice")
    )
    kafka_python = {
        "security_protocol": "SASL_SSL",
        "ssl_cafile": ca,
        "sasl_mechanism": "PLAIN",
        "sasl_plain_username": "bob",
        "sasl_plain_password": SASL_USERS["bob"],
    }
    await asyncio.to_thread(
        clients.kafka_python_produce, bootstrap, topic, values["kafka-python"], **kafka_python
    )
    await asyncio.to_thread(
        clients.confluent_produce, bootstrap, topic, values["confluent"], **librdkafka
    )
    await asyncio.to_thread(clients.java_produce, kafka1, bootstrap, topic, values["java"], java)
    everything = sorted(v for produced in values.values() for v in produced)
    by_confluent, brokers = await asyncio.to_thread(
        clients.confluent_consume, bootstrap, topic, "tls-confluent", 400, **librdkafka
    )
    assert sorted(by_confluent) == everything
    assert brokers == {tls_proxy.broker_address(1)}
    by_java = await asyncio.to_thread(
        clients.java_consume, kafka1, bootstrap, topic, "tls-java", 400, java
    )
    assert sorted(by_java) == everything


async def test_a_renewed_certificate_is_served_without_dropping_connections(
    kafka1: KafkaCluster, tmp_path: Path
) -> None:
    """A certificate renewal replaces the keystore file: new connections get the new
    certificate, connections already made go on with their sessions."""
    assert kafka1.ca is not None
    keystore = tmp_path / "proxy.pem"
    os.replace(kafka1.ca.server("before-renewal", LOOPBACK), keystore)
    ca = str(kafka1.ca_certificate)
    config = f"config_poll_interval_s = 0.2\n{tls_sections(keystore, kafka1.ca_certificate)}"
    proxy = await asyncio.to_thread(start_proxy, tmp_path, kafka1.brokers[0].ssl_address, 1, config)
    try:
        trusting = ssl.create_default_context(cafile=ca)
        assert await asyncio.to_thread(handshake, proxy.bootstrap, trusting) == "before-renewal"
        host, port = proxy.bootstrap.rsplit(":", 1)
        reader, writer = await asyncio.open_connection(
            host, int(port), ssl=trusting, server_hostname=host
        )
        api_versions = struct.pack(">hhih", 18, 0, 1, 1) + b"c"

        async def answered() -> bool:
            writer.write(struct.pack(">i", len(api_versions)) + api_versions)
            size: int = struct.unpack(">i", await asyncio.wait_for(reader.readexactly(4), 10))[0]
            body = await asyncio.wait_for(reader.readexactly(size), 10)
            return len(body) == size

        assert await answered()
        os.replace(kafka1.ca.server("after-renewal", LOOPBACK), keystore)
        deadline = time.monotonic() + 30
        while await asyncio.to_thread(handshake, proxy.bootstrap, trusting) != "after-renewal":
            assert time.monotonic() < deadline, "the renewed certificate was not served"
            await asyncio.sleep(0.2)
        assert await answered()  # the connection made before the renewal goes on
        writer.close()
        assert "config reloaded" in proxy.log()
    finally:
        proxy.stop()


async def test_a_client_stalled_in_its_handshake_does_not_hold_up_the_drain(
    kafka1: KafkaCluster, tmp_path: Path
) -> None:
    """SIGTERM drains the requests clients have sent; a client still in its TLS handshake has
    sent none, so the proxy neither waits out its handshake timeout nor its drain timeout."""
    assert kafka1.ca is not None
    keystore = kafka1.ca.server("proxy", LOOPBACK)
    config = f"""connect_timeout_s = 120
drain_timeout_s = 120
{tls_sections(keystore, kafka1.ca_certificate)}"""
    proxy = await asyncio.to_thread(start_proxy, tmp_path, kafka1.brokers[0].ssl_address, 1, config)
    try:
        host, port = proxy.bootstrap.rsplit(":", 1)
        reader, writer = await asyncio.open_connection(host, int(port))  # says nothing
        await wait_for_metric(
            proxy.metrics_url,
            lambda s: value(s, ACCEPTED, listener="bootstrap") == 1,
        )
        started = time.monotonic()
        proxy.process.send_signal(signal.SIGTERM)
        exit_code = await asyncio.to_thread(proxy.process.wait, 60)
        assert time.monotonic() - started < 10
        assert exit_code == 0
        assert await closed_after(reader, started) is not None
        writer.close()
    finally:
        proxy.stop()


async def test_usage_samples_reach_a_tls_cluster_over_the_proxys_upstream_tls_as_renewed(
    kafka1: KafkaCluster, tmp_path: Path
) -> None:
    """[usage] kafka_topic on the upstream cluster: written with [upstream]'s TLS, and with
    its files as a reload renews them (a truststore that does not trust the cluster stops the
    samples; the right one back, they flow again)."""
    assert kafka1.ca is not None
    plaintext = kafka1.brokers[0].address  # the test reads the cluster directly
    for topic in ("tls-traffic", "tls-usage"):
        await asyncio.to_thread(clients.create_topic, plaintext, topic, 1, 1)
    ca = str(kafka1.ca_certificate)
    keystore = kafka1.ca.server("usage-proxy", LOOPBACK)
    truststore = tmp_path / "truststore.pem"
    shutil.copyfile(kafka1.ca_certificate, truststore)
    config = f"""config_poll_interval_s = 0.2
{tls_sections(keystore, truststore)}
[usage]
interval_s = 1
directory = ""
kafka_topic = "tls-usage"
"""
    proxy = await asyncio.to_thread(start_proxy, tmp_path, kafka1.brokers[0].ssl_address, 1, config)
    ssl_settings = {"security_protocol": "SSL", "ssl_context": create_ssl_context(cafile=ca)}

    async def produce_and_await_samples(client_id: str) -> None:
        """Produce through the proxy as `client_id`; await its Produce samples in Kafka."""
        values = [f"{client_id}-{i}".encode() for i in range(20)]
        await clients.aiokafka_produce(
            proxy.bootstrap, "tls-traffic", values, client_id=client_id, **ssl_settings
        )
        deadline = time.monotonic() + 30
        while True:  # the group's committed offset moves on: each read takes new samples
            assert time.monotonic() < deadline, f"no usage sample of {client_id} reached Kafka"
            records, _ = await clients.aiokafka_consume(plaintext, "tls-usage", client_id, 1)
            samples = [json.loads(record) for record in records]
            if any(s["api"] == "Produce" and s["client_id"] == client_id for s in samples):
                return

    try:
        await produce_and_await_samples("first")
        stranger = ThrowawayCA(tmp_path / "stranger").certificate_path
        os.replace(stranger, truststore)  # a reload renews it: the sink's producer too
        deadline = time.monotonic() + 30
        while "usage samples to Kafka topic tls-usage" not in proxy.log():
            assert time.monotonic() < deadline, "the usage sink kept its old truststore"
            await asyncio.sleep(0.2)
        shutil.copyfile(kafka1.ca_certificate, truststore)

        def renewed_back() -> bool:  # reloaded, and no listener left closed by the stranger
            log = proxy.log()
            closed, reopened = log.count("is unreachable; probing"), log.count(" open again: ")
            return log.count("config reloaded") == 2 and closed == reopened

        deadline = time.monotonic() + 30
        while not renewed_back():
            assert time.monotonic() < deadline, "the proxy did not take the truststore back"
            await asyncio.sleep(0.2)
        await produce_and_await_samples("after-renewal")
    finally:
        proxy.stop()


async def test_the_quota_store_and_the_fleet_bus_read_on_with_a_renewed_cluster_truststore(
    kafka1: KafkaCluster, tmp_path: Path
) -> None:
    """[cluster]'s truststore replaced while a producer goes through the proxy: the quota
    store's reader and the fleet's bus reconnect with the file as renewed. One that trusts a
    stranger CA takes both down (the renewal reached them: before, they kept the context
    they were made with, and failed only once an old certificate expired); the right one
    back, both read again, and an alteration through the proxy is stored and read back. The
    clients' connections ([upstream]) never notice."""
    assert kafka1.ca is not None
    await asyncio.to_thread(
        clients.create_topic, kafka1.brokers[0].address, "renewal-traffic", 1, 1
    )
    truststore = tmp_path / "cluster-ca.pem"
    shutil.copyfile(kafka1.ca_certificate, truststore)
    config = f"""config_poll_interval_s = 0.2
[listener]
allow.plaintext.clients = true
[upstream]
security.protocol = "SSL"
ssl.truststore.location = "{kafka1.ca_certificate}"
[cluster]
security.protocol = "SSL"
ssl.truststore.location = "{truststore}"
[quota_store]
topic = "renewal-quotas"
[fleet]
name = "renewal"
"""
    proxy = await asyncio.to_thread(start_proxy, tmp_path, kafka1.brokers[0].ssl_address, 1, config)
    store_up, bus_up = "kafka_quota_proxy_quota_store_up", "kafka_quota_proxy_fleet_bus_up"

    def alter(client_id: str) -> None:
        entry = AlterEntry([("client-id", client_id)], [("producer_byte_rate", 1_000_000.0)])
        workloads.alter_client_quotas(proxy.bootstrap, [entry])

    async def both(up: float, timeout_s: float) -> None:
        await wait_for_metric(
            proxy.metrics_url,
            lambda s: value(s, store_up) == up and value(s, bus_up) == up,
            timeout_s,
        )

    stop = asyncio.Event()

    async def produce() -> int:
        """Records acknowledged through the proxy until stopped (bounded: 120 s)."""
        producer = AIOKafkaProducer(bootstrap_servers=proxy.bootstrap, client_id="renewal")
        await producer.start()
        acknowledged, deadline = 0, time.monotonic() + 120
        try:
            while not stop.is_set() and time.monotonic() < deadline:
                await producer.send_and_wait("renewal-traffic", b"x" * 100)
                acknowledged += 1
                await asyncio.sleep(0.01)
        finally:
            await producer.stop()
        return acknowledged

    load = asyncio.create_task(produce())
    try:
        await both(1, 30)
        await asyncio.to_thread(alter, "before-renewal")
        os.replace(ThrowawayCA(tmp_path / "stranger").certificate_path, truststore)
        await both(0, 30)
        with pytest.raises(RuntimeError, match="AlterClientQuotas refused"):
            await asyncio.to_thread(alter, "while-untrusted")
        shutil.copyfile(kafka1.ca_certificate, truststore)
        await both(1, 30)
        await asyncio.to_thread(alter, "after-renewal")
        stop.set()
        assert await load > 0
        log = proxy.log()
        assert log.count("config reloaded") == 2, log
        assert "Traceback" not in log, log
    finally:
        stop.set()
        await asyncio.gather(load, return_exceptions=True)
        proxy.stop()
