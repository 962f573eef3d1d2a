"""Two fleet instances behind a real HAProxy in TCP mode that names each client with a PROXY
protocol header: the proxy tells clients apart by their own addresses (127.0.0.2, .3 ...),
never by the balancer's, refuses a client that skips the balancer, and leaves the balancer's
rotation (its /readyz health check) before it closes anyone's connection."""

from __future__ import annotations

import asyncio
import json
import signal
import socket
import struct
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from aiokafka import AIOKafkaProducer

from localkafka.cluster import KafkaCluster
from localkafka.ports import free_port
from localkafka.proxy_process import (
    SHORT_QUOTA_WINDOWS,
    RunningProxy,
    free_port_block,
    restart_proxy,
    start_proxy,
)
from localkafka.scrape import scrape, total
from tests.integration.support.clients import create_topic, kafka_python_consume
from tests.integration.support.haproxy import (
    BALANCER_SOURCE,
    Frontend,
    RunningHaproxy,
    Server,
)
from tests.integration.support.listeners import API_VERSIONS_V0, served

BALANCER = "127.0.1.10"
#: a second entry point that speaks v1 (send-proxy) to the first instance
BALANCER_V1 = "127.0.1.11"
INSTANCES = ("127.0.1.1", "127.0.1.2")
CAPPED = "127.0.0.2"  # max_connections_per_ip 3 on each instance
OTHER = "127.0.0.3"  # no limit of its own
STORM = "127.0.0.4"  # an ips connection_creation_rate of 2/s
VIA_V1 = "127.0.0.5"
CAP = 3
MAX_CONNECTIONS = 30
NODE = 1  # kafka1's broker


def instance_config(host: str, name: str) -> str:
    return (
        f'listen_host = "{host}"\nadvertised_host = "{BALANCER}"\n'
        f'max_connections_per_ip_overrides = {{ "{CAPPED}" = {CAP} }}\n'
        "drain_delay_s = 1.5\n"
        f"max_connections = {MAX_CONNECTIONS}\n"
        '\n[proxy_protocol]\nmode = "required"\n'
        f'trusted_sources = ["{BALANCER_SOURCE}"]\n'
        f'\n[ips."{STORM}"]\nconnection_creation_rate = 2\n\n'
        + SHORT_QUOTA_WINDOWS
        + '\n[fleet]\nname = "behind-haproxy"\n'
        + f'\n[usage]\ninterval_s = 0.5\ndirectory = "usage-{name}"\ninstance_id = "{name}"\n'
    )


class Setup:
    def __init__(self, kafka: KafkaCluster, tmp: Path) -> None:
        self.ports = (free_port(), free_port_block(NODE))
        self.tmp = tmp
        servers = kafka.bootstrap_servers
        self.instances = [
            start_proxy(
                tmp,
                servers,
                NODE,
                instance_config(host, name),
                name,
                ports=self.ports,
                metrics_port=free_port(),  # the balancer's health check stays on it
            )
            for host, name in zip(INSTANCES, ("a", "b"), strict=True)
        ]
        self.bootstrap = f"{BALANCER}:{self.ports[0]}"
        self.haproxy = RunningHaproxy(tmp, self._frontends())
        self.haproxy.until_up()

    def _frontends(self) -> list[Frontend]:
        bootstrap_port, base = self.ports
        frontends = []
        for name, port in (("bootstrap", bootstrap_port), (f"broker{NODE}", base + NODE)):
            pairs = enumerate(zip(INSTANCES, self.instances, strict=True))
            servers = [
                Server(f"proxy-{index}", f"{host}:{port}", health(instance))
                for index, (host, instance) in pairs
            ]
            frontends.append(Frontend(name, f"{BALANCER}:{port}", servers))
        first = Server("proxy-0", f"{INSTANCES[0]}:{bootstrap_port}", health(self.instances[0]))
        frontends.append(Frontend("v1", f"{BALANCER_V1}:{bootstrap_port}", [first], "send-proxy"))
        return frontends

    def logs(self) -> str:
        return "".join(instance.log() for instance in self.instances)

    def samples(self) -> list[dict[str, object]]:
        """Every usage sample written so far, hidden (open) files included."""
        lines = []
        for name in ("a", "b"):
            for path in (self.tmp / f"usage-{name}").glob("*usage-*.jsonl"):
                lines += path.read_text().splitlines()
        return [json.loads(line) for line in lines if line]

    def stop(self) -> None:
        self.haproxy.stop()
        for instance in self.instances:
            instance.stop()


def health(instance: RunningProxy) -> str:
    return instance.metrics_url.removeprefix("http://").removesuffix("/metrics")


@pytest.fixture(scope="module")
def setup(kafka1: KafkaCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    running = Setup(kafka1, tmp_path_factory.mktemp("haproxy"))
    yield running
    running.stop()


async def test_each_client_address_has_its_own_connection_limit_and_rate(setup: Setup) -> None:
    kept: list[asyncio.StreamWriter] = []
    capped = await asyncio.gather(*(served(setup.bootstrap, CAPPED, kept) for _ in range(10)))
    others = [await served(setup.bootstrap, OTHER) for _ in range(5)]
    storm_started = time.monotonic()
    storm = await asyncio.gather(*(served(setup.bootstrap, STORM) for _ in range(12)))
    storm_s = time.monotonic() - storm_started
    calm = [await served(setup.bootstrap, OTHER) for _ in range(5)]
    for writer in kept:
        writer.close()
    print(
        f"capped: {sum(capped)}/10 served; storm: {sum(storm)}/12 in {storm_s:.1f}s; "
        f"other: {sum(others) + sum(calm)}/10"
    )
    assert sum(capped) <= 2 * CAP < 10  # CAP on each instance
    assert all(others) and all(calm)
    # 2/s over 2 x 1 s windows on each instance: a burst of a window, then held
    assert sum(storm) < 12
    logs = setup.logs()
    assert f"rejected connection from {CAPPED}:" in logs
    assert f"throttling connection from {STORM} " in logs
    for address in (OTHER, BALANCER_SOURCE):
        assert f"connection from {address}" not in logs


async def test_usage_samples_name_the_client_whichever_header_version(setup: Setup) -> None:
    assert await served(f"{BALANCER_V1}:{setup.ports[0]}", VIA_V1)  # HAProxy's v1 header
    assert await served(setup.bootstrap, OTHER)  # and its v2
    deadline = time.monotonic() + 10
    while not {VIA_V1, OTHER} <= {s["client_ip"] for s in setup.samples()}:
        assert time.monotonic() < deadline, setup.samples()
        await asyncio.sleep(0.25)
    addresses = {sample["client_ip"] for sample in setup.samples()}
    assert BALANCER_SOURCE not in addresses and "127.0.0.1" not in addresses


async def test_a_client_that_skips_the_balancer_is_refused(setup: Setup) -> None:
    direct = f"{INSTANCES[0]}:{setup.ports[0]}"
    assert not await served(direct, "127.0.0.1")  # not a trusted source
    assert not await served(direct, BALANCER_SOURCE)  # trusted, but sends no header
    logs = setup.instances[0].log()
    assert "closing connection from 127.0.0.1 on bootstrap: not in [proxy_protocol]" in logs
    assert f"closing connection from {BALANCER_SOURCE} on bootstrap: no PROXY protocol" in logs
    refused = total(
        scrape(setup.instances[0].metrics_url), "kafka_quota_proxy_proxy_header_refused_total"
    )
    assert refused >= 2


async def with_header(address: str, client: str) -> bool:
    """A connection from the balancer's address that names `client` in a v1 header, then
    sends ApiVersions: whether it was answered."""
    host, port = address.rsplit(":", 1)
    reader, writer = await asyncio.open_connection(host, int(port), local_addr=(BALANCER_SOURCE, 0))
    writer.write(f"PROXY TCP4 {client} {host} 50000 {port}\r\n".encode())
    writer.write(struct.pack(">i", len(API_VERSIONS_V0)) + API_VERSIONS_V0)
    try:
        return len(await reader.read(4)) == 4
    finally:
        writer.close()


async def test_connections_awaiting_their_header_count_against_max_connections(
    setup: Setup,
) -> None:
    """Sockets whose header has not come hold slots of max_connections (a flood of them
    cannot open more), and give them back when they fail (a reset, a balancer's TCP check)."""
    second = f"{INSTANCES[1]}:{setup.ports[0]}"
    stalled = [
        await asyncio.open_connection(INSTANCES[1], setup.ports[0], local_addr=(BALANCER_SOURCE, 0))
        for _ in range(MAX_CONNECTIONS)
    ]
    waiting = asyncio.create_task(with_header(second, "127.0.0.6"))
    await asyncio.sleep(1.0)
    assert not waiting.done()  # every slot is held: it waits in the backlog
    for _, writer in stalled:  # reset, as a balancer's TCP check ends
        writer.transport.get_extra_info("socket").setsockopt(
            socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0)
        )
        writer.close()
    assert await asyncio.wait_for(waiting, 10)
    assert all(await asyncio.gather(*(with_header(second, OTHER) for _ in range(5))))


async def test_a_restarted_instance_leaves_the_rotation_before_it_closes_anyone(
    setup: Setup, kafka1: KafkaCluster
) -> None:
    """A producer through HAProxy while instance a is stopped (SIGTERM) and started again:
    HAProxy marks it down from its /readyz before its drain starts, and every acknowledged
    record is stored once."""
    topic = "behind-haproxy"
    create_topic(kafka1.bootstrap_servers, topic, partitions=3, replication=1)
    producer = AIOKafkaProducer(
        bootstrap_servers=setup.bootstrap, acks="all", enable_idempotence=True, linger_ms=5
    )
    await producer.start()
    acknowledged: list[bytes] = []
    first = setup.instances[0]
    done = asyncio.Event()

    async def produce() -> None:
        deadline = time.monotonic() + 60
        for index in range(3000):  # bounded in count and time
            if done.is_set() or time.monotonic() > deadline:
                break
            value = f"record-{index}".encode()
            await producer.send_and_wait(topic, value)
            acknowledged.append(value)
            await asyncio.sleep(0.02)

    producing = asyncio.create_task(produce())
    await asyncio.sleep(2)
    first.process.send_signal(signal.SIGTERM)
    before_stop = len(acknowledged)
    down_at = drain_at = None
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        # whether it had exited before its log is read: a drain and an exit within one turn
        # of this loop are then still seen, in the same turn
        exited = first.process.poll() is not None
        now = time.monotonic()
        states = setup.haproxy.states()
        if down_at is None and all(
            state.startswith("DOWN") for (_, server), state in states.items() if server == "proxy-0"
        ):
            down_at = now
        if drain_at is None and "shutting down" in first.log():
            drain_at = now
        if exited:
            break
        await asyncio.sleep(0.05)
    assert first.process.poll() is not None, "instance a did not stop"
    setup.instances[0] = restart_proxy(first)
    await asyncio.to_thread(setup.haproxy.until_up)
    restarted = len(acknowledged)
    await asyncio.sleep(2)
    done.set()
    await producing
    await producer.stop()
    lead = drain_at - down_at if drain_at is not None and down_at is not None else None
    print(
        f"{len(acknowledged)} acknowledged ({before_stop} before SIGTERM, {restarted} once "
        f"a was back); a was down in HAProxy {lead}s before its drain began"
    )
    assert down_at is not None and drain_at is not None and down_at < drain_at
    assert before_stop < restarted < len(acknowledged)  # it went on through the restart
    stored, _ = kafka_python_consume(
        kafka1.bootstrap_servers, topic, "behind-haproxy-check", len(acknowledged)
    )
    assert sorted(stored) == sorted(acknowledged)
