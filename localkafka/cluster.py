"""KRaft brokers on loopback: 1..N combined broker+controller nodes with Java 17, started,
stopped and restarted for tests, benchmarks and `make run`."""

from __future__ import annotations

import base64
import os
import subprocess
import tempfile
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from localkafka.broker_queries import create_topic, metadata_broker_count
from localkafka.jars import ensure_jars, java_command
from localkafka.ports import LOOPBACK, free_ports
from localkafka.tls import ThrowawayCA

#: what the SASL_PLAINTEXT listener accepts; PLAIN first, then the SCRAM ones
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
#: how long stop() waits for the nodes to exit on SIGTERM before it kills them
STOP_GRACE_S = 3.0


_PLAIN_LOGIN = "org.apache.kafka.common.security.plain.PlainLoginModule"


_SCRAM_LOGIN = "org.apache.kafka.common.security.scram.ScramLoginModule"


#: OAUTHBEARER's login module; with no callback handlers named, Kafka's unsecured ones (for
#: tests: unsigned JWTs, the principal from a claim)
OAUTH_LOGIN = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"


#: Kafka's request log to a file of its own, buffered (merged over localkafka's log4j2 config)
_REQUEST_LOG = """appender.requests.type = File
appender.requests.name = REQUESTS
appender.requests.fileName = {path}
appender.requests.bufferedIo = true
appender.requests.immediateFlush = false
appender.requests.layout.type = PatternLayout
appender.requests.layout.pattern = %m%n
logger.requests.name = kafka.request.logger
logger.requests.level = DEBUG
logger.requests.additivity = false
logger.requests.appenderRef.requests.ref = REQUESTS
"""


def _cluster_id() -> str:
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


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
    #: writes Kafka's request log (kafka.request.logger at DEBUG: every request's queue, local,
    #: remote and send times) of node N to this path with N in place of "{node}"; a path in
    #: memory (/dev/shm) keeps its writes from stalling the broker's disk
    request_log: str | None = None
    #: node id -> megabytes: that node's log directory is a tmpfs of this size of its own
    #: (mounted at start, unmounted at stop: root only), its metadata log on the work
    #: directory's disk, so that a full log directory does not take the quorum with it
    small_disks: dict[int, int] = field(default_factory=dict)
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
            "log.dirs": str(self.small_disk(broker) or broker.log_dir),
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
        if self.small_disk(broker) is not None:
            props["metadata.log.dir"] = str(broker.log_dir)
        props.update(self.overrides)
        return "".join(f"{k}={v}\n" for k, v in props.items())

    def small_disk(self, broker: Broker) -> Path | None:
        """Where a node with a small disk keeps its logs (small_disks)."""
        if broker.node_id not in self.small_disks:
            return None
        return broker.log_dir.parent / "small"

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
        formats = []  # one JVM per node, side by side: each takes a second or two to start
        for broker in self.brokers:
            node_dir = broker.log_dir.parent
            node_dir.mkdir(parents=True, exist_ok=True)
            small = self.small_disk(broker)
            if small is not None:
                small.mkdir(exist_ok=True)
                size = f"size={self.small_disks[broker.node_id]}m"
                subprocess.run(
                    ["mount", "-t", "tmpfs", "-o", size, "tmpfs", str(small)], check=True
                )
            props_file = node_dir / "server.properties"
            keystore = ca.server(f"node-{broker.node_id}", LOOPBACK) if ca is not None else None
            props_file.write_text(self._properties(broker, voters, keystore))
            formatting = subprocess.Popen(
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
                stdout=subprocess.DEVNULL,
            )
            formats.append(formatting)
        for formatting in formats:
            if formatting.wait() != 0:
                raise subprocess.CalledProcessError(formatting.returncode, formatting.args)
        for broker in self.brokers:
            self._launch(broker)
        self._wait_serving(timeout)
        return self

    def _launch(self, broker: Broker) -> None:
        node_dir = broker.log_dir.parent
        log = (node_dir / "server.log").open("ab")
        logging = []
        if self.request_log is not None:
            logging.append(node_dir / "request-log.properties")
            logging[0].write_text(
                _REQUEST_LOG.format(path=self.request_log.format(node=broker.node_id))
            )
        broker.process = subprocess.Popen(
            java_command(
                "kafka.Kafka",
                [str(node_dir / "server.properties")],
                heap=self.heap,
                server=True,
                logging=logging,
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
        """SIGTERM to every node, then SIGKILL to any still running STOP_GRACE_S later: KRaft
        nodes stopped together can wait on a quorum that is stopping too (a 3-node
        cluster's teardown took 30 s), and the cluster is thrown away."""
        for broker in self.brokers:
            if broker.process is not None and broker.process.poll() is None:
                broker.process.terminate()
        deadline = time.monotonic() + STOP_GRACE_S
        for broker in self.brokers:
            if broker.process is not None:
                try:
                    broker.process.wait(timeout=max(deadline - time.monotonic(), 0.1))
                except subprocess.TimeoutExpired:
                    broker.process.kill()
                    broker.process.wait()
        for broker in self.brokers:
            small = self.small_disk(broker)
            if small is not None:
                subprocess.run(["umount", str(small)], check=False)
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None

    def tool(
        self, main_class: str, *args: str, timeout: float = 120.0, wrapper: Sequence[str] = ()
    ) -> str:
        """Run a Kafka CLI tool to completion and return its stdout (raises on failure);
        `wrapper` runs it through a command (`ip netns exec NAME`)."""
        result = subprocess.run(
            [*wrapper, *java_command(main_class, list(args), heap="256m")],
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

    def create_topic(
        self,
        name: str,
        partitions: int,
        replication: int = 1,
        replicas: Sequence[Sequence[int]] | None = None,
    ) -> None:
        create_topic(self.bootstrap_servers, name, partitions, replication, replicas)
