"""A local Apache Kafka for tests, benchmarks and `make run`.

The project brings its own broker: the pom beside this file pins one Kafka 4.x release, Maven
copies its jars into a git-ignored cache, and this module formats KRaft storage and runs 1..N
combined broker+controller nodes with Java 17 on free loopback ports. Kafka's CLI tools run
from the same classpath, so tests and benchmarks measure the exact release the proxy fronts.
"""

from __future__ import annotations

import base64
import os
import random
import re
import shutil
import socket
import struct
import subprocess
import tempfile
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from kafka.admin import KafkaAdminClient, NewTopic

from localkafka.tls import ThrowawayCA
from protocol.apis import METADATA
from protocol.headers import encode_request
from protocol.metadata import OWN_METADATA_VERSION, metadata_request_body, read_metadata_response

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
POM = HERE / "pom.xml"
SPARK_KAFKA_POM = HERE / "spark-kafka-pom.xml"
CACHE = Path(os.environ.get("KQP_CACHE", REPO / ".cache"))
LOOPBACK = "127.0.0.1"
#: what the SASL_PLAINTEXT listener accepts; PLAIN first, then the SCRAM ones
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
_PLAIN_LOGIN = "org.apache.kafka.common.security.plain.PlainLoginModule"
_SCRAM_LOGIN = "org.apache.kafka.common.security.scram.ScramLoginModule"
#: OAUTHBEARER's login module; with no callback handlers named, Kafka's unsecured ones (for
#: tests: unsigned JWTs, the principal from a claim)
OAUTH_LOGIN = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"


def _pinned(pom: Path, prop: str) -> str:
    """A pom's pinned version, read from the pom so there is a single place to change it."""
    match = re.search(rf"<{re.escape(prop)}>([^<]+)</{re.escape(prop)}>", pom.read_text())
    if match is None:
        raise RuntimeError(f"{pom}: no <{prop}> property")
    return match.group(1)


def kafka_version() -> str:
    return _pinned(POM, "kafka.version")


def spark_version() -> str:
    """The Spark release whose Kafka source the usage report's Kafka-topic path uses."""
    return _pinned(SPARK_KAFKA_POM, "spark.version")


def libs_dir() -> Path:
    return CACHE / f"kafka-{kafka_version()}" / "libs"


def ensure_jars() -> Path:
    """Fetch the broker and tools jars from Maven Central once; later calls are free."""
    return _fetch(POM, libs_dir(), kafka_version())


def ensure_spark_kafka_jars() -> list[Path]:
    """Spark's Kafka source and what it needs beside pyspark's jars, fetched once."""
    libs = _fetch(SPARK_KAFKA_POM, CACHE / f"spark-kafka-{spark_version()}", spark_version())
    return sorted(libs.glob("*.jar"))


def _fetch(pom: Path, libs: Path, version: str) -> Path:
    marker = libs / ".complete"
    if marker.exists():
        return libs
    libs.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [
            "mvn",
            "-q",
            "-B",
            "-f",
            str(pom),
            "dependency:copy-dependencies",
            f"-DoutputDirectory={libs}",
            "-DincludeScope=runtime",
        ],
        check=True,
    )
    marker.write_text(version)
    return libs


def java_command(
    main_class: str, args: Sequence[str], heap: str = "512m", server: bool = False
) -> list[str]:
    """A command line running one of Kafka's main classes from the cached jars.

    A tool (anything but a broker) runs a few seconds at most: it gets the client JIT only and
    the serial collector, which start it in about 60 % of the time and CPU (TopicCommand
    --version: 0.38 s against 0.63 s here); a broker keeps C2 and G1."""
    libs = ensure_jars()
    runtime = ["-XX:+UseG1GC"] if server else ["-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1"]
    return [
        shutil.which("java") or "java",
        f"-Xmx{heap}",
        *runtime,
        "-Djava.awt.headless=true",
        f"-Dlog4j2.configurationFile={HERE / 'log4j2.properties'}",
        "-cp",
        f"{libs}/*",
        main_class,
        *args,
    ]


def create_topic(bootstrap: str, name: str, partitions: int, replication: int) -> None:
    """With kafka-python's admin client: TopicCommand took a second of JVM start for each of
    the suite's topics, and a topic is set-up, not what a test is about. The controller
    answers once the topic is committed and each broker's metadata follows a moment later:
    this returns once every broker of `bootstrap` describes it (TopicCommand's JVM start had
    left them that moment, and tests came to rely on it)."""
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, client_id="localkafka")
    try:
        admin.create_topics([NewTopic(name, partitions, replication)])
    finally:
        admin.close()
    deadline = time.monotonic() + 10
    for address in bootstrap.split(","):
        host, _, port = address.rpartition(":")
        while metadata_partitions(host, int(port), name) != partitions:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{address} does not describe the topic {name} after 10 s")
            time.sleep(0.02)


def metadata_partitions(host: str, port: int, topic: str, timeout: float = 2.0) -> int | None:
    """The partitions a node describes the topic with, or None while it does not."""
    body = metadata_request_body([topic])
    frame = encode_request(METADATA, OWN_METADATA_VERSION, 1, "localkafka", body)
    try:
        with socket.create_connection((host, port), timeout=timeout) as sock:
            sock.sendall(frame)
            size = recv_exact(sock, 4)
            answer = read_metadata_response(
                size + recv_exact(sock, struct.unpack(">i", size)[0]), OWN_METADATA_VERSION
            )
    except OSError:
        return None
    return next((t.partitions for t in answer.topics if t.name == topic), None)


#: ports this process has handed out: a port is given once, so two listeners that have not
#: bound yet can never be given the same one
_HANDED_OUT: set[int] = set()
_EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")


def _listener_port_range() -> range:
    """Ports below the kernel's ephemeral range.

    A port taken with bind(0) and released lies in the ephemeral range, where any outgoing
    connection (a Kafka node dialling its voters, a client) may take it before the listener
    binds: a CI run lost node 2 of three to "Address already in use" that way. Ports below the
    range are only ever taken by a deliberate bind, which the reservation below checks.
    """
    try:
        low = int(_EPHEMERAL_RANGE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768
    return range(10000, low) if low > 11000 else range(low - 1000, low)


def free_ports(count: int, *, contiguous: bool = False, host: str = LOOPBACK) -> list[int]:
    """`count` distinct ports free on `host` now, outside the ephemeral range, never handed out
    before by this process; `contiguous` asks for consecutive ones (a proxy's broker listeners)."""
    candidates = _listener_port_range()
    rng = random.Random()
    for _ in range(500):
        if contiguous:
            start = rng.randrange(candidates.start, candidates.stop - count)
            ports = list(range(start, start + count))
        else:
            ports = rng.sample(candidates, count)
        if _HANDED_OUT.intersection(ports):
            continue
        sockets: list[socket.socket] = []
        try:
            for port in ports:
                sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                sockets.append(sock)
                sock.bind((host, port))
        except OSError:
            continue
        finally:
            for sock in sockets:
                sock.close()
        _HANDED_OUT.update(ports)
        return ports
    raise RuntimeError(f"no {count} free ports on {host} in {candidates}")


def free_port(host: str = LOOPBACK) -> int:
    return free_ports(1, host=host)[0]


def _cluster_id() -> str:
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


def metadata_broker_count(host: str, port: int, timeout: float = 2.0) -> int:
    """Number of brokers a node reports in Metadata v1, or -1 while it does not serve yet."""
    # Metadata v1 with an empty topic list: brokers only
    frame = encode_request(METADATA, 1, 1, "localkafka", struct.pack(">i", 0))
    try:
        with socket.create_connection((host, port), timeout=timeout) as sock:
            sock.sendall(frame)
            size = struct.unpack(">i", recv_exact(sock, 4))[0]
            body = recv_exact(sock, size)
    except OSError:
        return -1
    count: int = struct.unpack_from(">i", body, 4)[0]  # after the correlation id
    return count


def recv_exact(sock: socket.socket, n: int) -> bytes:
    chunks = bytearray()
    while len(chunks) < n:
        chunk = sock.recv(n - len(chunks))
        if not chunk:
            raise ConnectionError("connection closed")
        chunks += chunk
    return bytes(chunks)


@dataclass
class Broker:
    node_id: int
    port: int
    controller_port: int
    log_dir: Path
    #: the SASL_PLAINTEXT listener, when the cluster has SASL users
    sasl_port: int | None = None
    #: the SSL listener, and with SASL users the SASL_SSL one, when the cluster has TLS
    ssl_port: int | None = None
    sasl_ssl_port: int | None = None
    process: subprocess.Popen[bytes] | None = None

    @property
    def address(self) -> str:
        return f"{LOOPBACK}:{self.port}"

    @property
    def sasl_address(self) -> str:
        assert self.sasl_port is not None, "the cluster was started without sasl_users"
        return f"{LOOPBACK}:{self.sasl_port}"

    @property
    def ssl_address(self) -> str:
        assert self.ssl_port is not None, "the cluster was started without tls"
        return f"{LOOPBACK}:{self.ssl_port}"

    @property
    def sasl_ssl_address(self) -> str:
        assert self.sasl_ssl_port is not None, "the cluster was started without tls and users"
        return f"{LOOPBACK}:{self.sasl_ssl_port}"


@dataclass
class KafkaCluster:
    """1..N combined KRaft nodes on loopback; `start()` returns once every node serves."""

    brokers_count: int = 1
    workdir: Path | None = None
    overrides: dict[str, str] = field(default_factory=dict)
    heap: str = "768m"
    #: user -> password: adds a SASL_PLAINTEXT listener taking PLAIN and SCRAM-SHA-256/512
    #: for these users, next to the PLAINTEXT one the brokers use among themselves, and
    #: OAUTHBEARER for anyone with an unsigned JWT
    sasl_users: dict[str, str] = field(default_factory=dict)
    #: the JWT claim OAUTHBEARER names the principal by (the unsecured validator's
    #: unsecuredValidatorPrincipalClaimName)
    oauth_principal_claim: str = "sub"
    #: adds an SSL listener (and, with sasl_users, a SASL_SSL one) whose certificates a
    #: throwaway CA made at start signs (`ca`: it issues more, for a proxy in front)
    tls: bool = False
    brokers: list[Broker] = field(default_factory=list)
    ca: ThrowawayCA | None = None
    _tmp: tempfile.TemporaryDirectory[str] | None = None

    @property
    def bootstrap_servers(self) -> str:
        return ",".join(b.address for b in self.brokers)

    @property
    def ca_certificate(self) -> Path:
        """The clients' truststore: the throwaway CA's certificate."""
        assert self.ca is not None, "the cluster was started without tls"
        return self.ca.certificate_path

    def _properties(self, broker: Broker, voters: str, keystore: Path | None) -> str:
        replication = min(3, self.brokers_count)
        listeners = {
            "PLAINTEXT": broker.port,
            "SASL_PLAINTEXT": broker.sasl_port,
            "SSL": broker.ssl_port,
            "SASL_SSL": broker.sasl_ssl_port,
        }
        advertised = ",".join(
            f"{name}://{LOOPBACK}:{port}" for name, port in listeners.items() if port is not None
        )
        props = {
            "process.roles": "broker,controller",
            "node.id": str(broker.node_id),
            "controller.quorum.voters": voters,
            "listeners": f"{advertised},CONTROLLER://{LOOPBACK}:{broker.controller_port}",
            "advertised.listeners": advertised,
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": ",".join(
                [f"{name}:{name}" for name in listeners] + ["CONTROLLER:PLAINTEXT"]
            ),
            "log.dirs": str(broker.log_dir),
            "num.partitions": "1",
            "offsets.topic.replication.factor": str(replication),
            "offsets.topic.num.partitions": "5",
            "transaction.state.log.replication.factor": str(replication),
            "transaction.state.log.min.isr": "1",
            "transaction.state.log.num.partitions": "5",
            "group.initial.rebalance.delay.ms": "0",
            "auto.create.topics.enable": "false",
        }
        if self.sasl_users:
            plain_users = " ".join(f'user_{u}="{p}"' for u, p in self.sasl_users.items())
            props["sasl.enabled.mechanisms"] = ",".join((*SASL_MECHANISMS, "OAUTHBEARER"))
            for name in ("SASL_PLAINTEXT", "SASL_SSL"):
                if listeners[name] is not None:
                    prefix = f"listener.name.{name.lower()}"
                    props[f"{prefix}.plain.sasl.jaas.config"] = (
                        f"{_PLAIN_LOGIN} required {plain_users};"
                    )
                    # the broker logs in too (a token of its own, never sent here)
                    claim = self.oauth_principal_claim
                    props[f"{prefix}.oauthbearer.sasl.jaas.config"] = (
                        f'{OAUTH_LOGIN} required unsecuredValidatorPrincipalClaimName="{claim}" '
                        f'unsecuredLoginPrincipalClaimName="{claim}" '
                        f'unsecuredLoginStringClaim_{claim}="broker";'
                    )
                    for scram in ("scram-sha-256", "scram-sha-512"):
                        props[f"{prefix}.{scram}.sasl.jaas.config"] = f"{_SCRAM_LOGIN} required;"
        if keystore is not None:
            props.update(
                {
                    "ssl.keystore.type": "PEM",
                    "ssl.keystore.location": str(keystore),
                    "ssl.truststore.type": "PEM",
                    "ssl.truststore.location": str(self.ca_certificate),
                }
            )
        props.update(self.overrides)
        return "".join(f"{k}={v}\n" for k, v in props.items())

    def start(self, timeout: float = 90.0) -> KafkaCluster:
        ensure_jars()
        if self.workdir is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="localkafka-")
            self.workdir = Path(self._tmp.name)
        self.workdir.mkdir(parents=True, exist_ok=True)
        # the PLAINTEXT and CONTROLLER listeners, then each optional one
        optional = [bool(self.sasl_users), self.tls, self.tls and bool(self.sasl_users)]
        per_node = 2 + sum(optional)
        ports = iter(free_ports(per_node * self.brokers_count))
        self.brokers = []
        for i in range(1, self.brokers_count + 1):
            port, controller_port = next(ports), next(ports)
            sasl, ssl, sasl_ssl = (next(ports) if wanted else None for wanted in optional)
            log_dir = self.workdir / f"node-{i}" / "data"
            self.brokers.append(
                Broker(i, port, controller_port, log_dir, sasl, ssl, sasl_ssl_port=sasl_ssl)
            )
        ca = self.ca = ThrowawayCA(self.workdir / "tls") if self.tls else None
        # SCRAM credentials live in the cluster metadata; KRaft writes them at format time
        scram = [
            arg
            for user, password in self.sasl_users.items()
            for mechanism in SASL_MECHANISMS[1:]
            for arg in ("--add-scram", f"{mechanism}=[name={user},password={password}]")
        ]
        voters = ",".join(f"{b.node_id}@{LOOPBACK}:{b.controller_port}" for b in self.brokers)
        cluster_id = _cluster_id()
        for broker in self.brokers:
            node_dir = broker.log_dir.parent
            node_dir.mkdir(parents=True, exist_ok=True)
            props_file = node_dir / "server.properties"
            keystore = ca.server(f"node-{broker.node_id}", LOOPBACK) if ca is not None else None
            props_file.write_text(self._properties(broker, voters, keystore))
            subprocess.run(
                java_command(
                    "kafka.tools.StorageTool",
                    [
                        "format",
                        f"--cluster-id={cluster_id}",
                        "-c",
                        str(props_file),
                        "--ignore-formatted",
                        *scram,
                    ],
                    heap="256m",
                ),
                check=True,
                stdout=subprocess.DEVNULL,
            )
        for broker in self.brokers:
            self._launch(broker)
        self._wait_serving(timeout)
        return self

    def _launch(self, broker: Broker) -> None:
        node_dir = broker.log_dir.parent
        log = (node_dir / "server.log").open("ab")
        broker.process = subprocess.Popen(
            java_command(
                "kafka.Kafka", [str(node_dir / "server.properties")], heap=self.heap, server=True
            ),
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**os.environ, "LOG_DIR": str(node_dir)},
        )

    def stop_broker(self, node_id: int, crash: bool = False) -> None:
        """Stop one node as an operator would (SIGTERM: a controlled shutdown), or as a crash
        does (SIGKILL: it stays in the metadata, leading its partitions, until the controller
        fences it after broker.session.timeout.ms)."""
        broker = self.brokers[node_id - 1]
        assert broker.process is not None
        if crash:
            broker.process.kill()
        else:
            broker.process.terminate()
        try:
            broker.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            broker.process.kill()
            broker.process.wait()

    def restart_broker(self, node_id: int, timeout: float = 90.0) -> None:
        """Start a stopped node again on its ports and data; returns once it serves."""
        self._launch(self.brokers[node_id - 1])
        self._wait_serving(timeout)

    def _wait_serving(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        pending = list(self.brokers)
        while pending:
            for broker in list(pending):
                if broker.process is not None and broker.process.poll() is not None:
                    self.stop()
                    log = broker.log_dir.parent / "server.log"
                    errors = [
                        line
                        for line in log.read_text(errors="replace").splitlines()
                        if "ERROR" in line
                    ]
                    raise RuntimeError(
                        f"Kafka node {broker.node_id} exited with {broker.process.returncode}; "
                        f"see {log}; its first errors:\n" + "\n".join(errors[:5])
                    )
                if metadata_broker_count(LOOPBACK, broker.port) == self.brokers_count:
                    pending.remove(broker)
            if time.monotonic() > deadline:
                self.stop()
                raise TimeoutError(f"Kafka did not serve within {timeout:.0f}s")
            if pending:
                time.sleep(0.25)

    def stop(self) -> None:
        for broker in self.brokers:
            if broker.process is not None and broker.process.poll() is None:
                broker.process.terminate()
        for broker in self.brokers:
            if broker.process is not None:
                try:
                    broker.process.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    broker.process.kill()
                    broker.process.wait()
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None

    def tool(self, main_class: str, *args: str, timeout: float = 120.0) -> str:
        """Run a Kafka CLI tool to completion and return its stdout (raises on failure)."""
        result = subprocess.run(
            java_command(main_class, list(args), heap="256m"),
            capture_output=True,
            timeout=timeout,
            text=True,
        )
        if result.returncode != 0:
            raise RuntimeError(
                f"{main_class} {' '.join(args)} exited {result.returncode}:\n"
                f"{result.stderr[-4000:]}"
            )
        return result.stdout

    def create_topic(self, name: str, partitions: int, replication: int = 1) -> None:
        create_topic(self.bootstrap_servers, name, partitions, replication)
