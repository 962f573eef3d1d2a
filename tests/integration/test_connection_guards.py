"""Connections per principal across a fleet (issue 52's connection guard), against a real
broker: a client-id that opens 300 connections through two fleet members, with a limit of
50, holds at most 50 across the fleet while it storms; the same storm under a client-id
without a limit holds all 300; another principal's 20 librdkafka producers connect and
deliver untouched. Then a creation rate: a reconnect storm is held to it, each refused
connection held before it is closed. Last, shadow mode: a storm past the limit is counted,
and every connection served.

Each storm connection is a socket that sends one Metadata request and stays open while it
is answered: a connection is judged at its first request past authentication, and one
refused is closed without an answer, as a client meets it (and retries).
"""

from __future__ import annotations

import asyncio
import struct
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Producer

from localkafka.cluster import KafkaCluster
from localkafka.proxy_process import RunningProxy, start_proxy
from localkafka.scrape import scrape, total, value, wait_for_metric

LIMIT = 50
ATTEMPTS = 300
#: how long refused connections keep coming back, and how often
STORM_S = 3.0
RETRY_S = 0.1
CALM = 20
RATE = 5.0  # the creation rate: connections per second


def config(name: str) -> str:
    key = '"kafka-quota-proxy.connections"'
    rate = '"kafka-quota-proxy.connection_creation_rate"'
    return (
        f'[clients."storm"]\n{key} = {LIMIT}\n'
        f'[clients."calm"]\n{key} = {LIMIT}\n'
        f'[clients."reconnects"]\n{rate} = {RATE}\n'
        f'[fleet]\nname = "{name}"\n'
    )


@pytest.fixture(scope="module")
def members(
    kafka1: KafkaCluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[list[RunningProxy]]:
    tmp: Path = tmp_path_factory.mktemp("connection-guards")
    fleet = [
        start_proxy(tmp, kafka1.bootstrap_servers, 1, config("guarded"), name=f"member-{i}")
        for i in range(2)
    ]
    yield fleet
    for member in fleet:
        member.stop()


def metadata(client_id: str) -> bytes:
    """Metadata v1 for no topic: a request of the session."""
    encoded = client_id.encode()
    body = struct.pack(">hhih", 3, 1, 1, len(encoded)) + encoded + struct.pack(">i", 0)
    return struct.pack(">i", len(body)) + body


async def connect(address: str, client_id: str) -> asyncio.StreamWriter | None:
    """A connection that sent Metadata: kept open (its writer) if answered, None if closed."""
    host, port = address.rsplit(":", 1)
    reader, writer = await asyncio.open_connection(host, int(port))
    writer.write(metadata(client_id))
    try:
        head = await asyncio.wait_for(reader.readexactly(4), 10)
        await reader.readexactly(struct.unpack(">i", head)[0])
    except (asyncio.IncompleteReadError, ConnectionResetError):
        writer.close()
        return None
    return writer


class Storm:
    """ATTEMPTS connections of one client-id, half through each member, at once; then each
    refused one tries again every RETRY_S until STORM_S has passed."""

    def __init__(self, members: list[RunningProxy], client_id: str) -> None:
        self.addresses = [member.bootstrap for member in members]
        self.client_id = client_id
        self.open: list[asyncio.StreamWriter] = []
        self.attempts = 0
        self.most_open = 0

    async def run(self) -> None:
        deadline = time.monotonic() + STORM_S
        await asyncio.gather(
            *(self._connection(self.addresses[i % 2], deadline) for i in range(ATTEMPTS))
        )

    async def _connection(self, address: str, deadline: float) -> None:
        while True:
            self.attempts += 1
            writer = await connect(address, self.client_id)
            if writer is not None:
                self.open.append(writer)
                self.most_open = max(self.most_open, len(self.open))
                return
            if time.monotonic() >= deadline:
                return
            await asyncio.sleep(RETRY_S)

    def close(self) -> None:
        for writer in self.open:
            writer.close()


def fleet_count(members: list[RunningProxy], client_id: str) -> float:
    return sum(
        value(scrape(m.metrics_url), "kafka_quota_proxy_principal_connections", user="",
              client_id=client_id) or 0.0
        for m in members
    )  # fmt: skip


def calm_producers(members: list[RunningProxy]) -> list[str | None]:
    """CALM librdkafka producers of another principal, half through each member: each
    delivers one record; the error each met, None for none."""
    errors: list[str | None] = []
    for index in range(CALM):
        producer = Producer(
            {
                "bootstrap.servers": members[index % 2].bootstrap,
                "client.id": "calm",
                "message.timeout.ms": 20_000,
            }
        )
        outcome: list[str | None] = []

        def delivered(err: object, _: object, outcome: list[str | None] = outcome) -> None:
            outcome.append(None if err is None else str(err))

        producer.produce("connection-guards", b"calm", on_delivery=delivered)
        producer.flush(30)
        errors.append(outcome[0] if outcome else "not delivered")
    return errors


async def test_a_principal_holds_at_most_its_limit_across_the_fleet(
    kafka1: KafkaCluster, members: list[RunningProxy]
) -> None:
    for member in members:
        await wait_for_metric(
            member.metrics_url,
            lambda s: (
                value(s, "kafka_quota_proxy_fleet_members") == 2.0
                and value(s, "kafka_quota_proxy_fleet_bus_up") == 1.0
            ),
            timeout_s=30,
        )
    kafka1.create_topic("connection-guards", partitions=1)
    guarded, unguarded = Storm(members, "storm"), Storm(members, "unguarded")
    try:
        await asyncio.gather(guarded.run(), unguarded.run())
        held = fleet_count(members, "storm")
        errors = await asyncio.to_thread(calm_producers, members)
        refused = [
            total(scrape(m.metrics_url), "kafka_quota_proxy_principal_connections_refused_total",
                  client_id="storm")
            for m in members
        ]  # fmt: skip
        calm_refused = sum(
            total(scrape(m.metrics_url), "kafka_quota_proxy_principal_connections_refused_total",
                  client_id="calm")
            for m in members
        )  # fmt: skip
    finally:
        guarded.close()
        unguarded.close()
    print(
        f"limit {LIMIT}, {ATTEMPTS} connections through 2 members, {STORM_S:.0f} s: "
        f"guarded {guarded.attempts} attempts, at most {guarded.most_open} open, "
        f"{held:.0f} counted by the fleet, refused {refused[0]:.0f} + {refused[1]:.0f}; "
        f"unguarded at most {unguarded.most_open} open; calm: {CALM - errors.count(None)} "
        f"of {CALM} producers failed"
    )
    assert guarded.most_open <= LIMIT
    assert guarded.most_open >= LIMIT - 2, "the fleet left most of the limit unused"
    assert held == len(guarded.open)
    assert unguarded.most_open == ATTEMPTS
    assert all(refused), "a member refused none: the storm was not spread"
    assert errors == [None] * CALM
    assert calm_refused == 0


async def test_a_reconnect_storm_is_held_to_its_principals_creation_rate(
    members: list[RunningProxy],
) -> None:
    """Every connection closes again at once, and opens anew: its principal's bucket (ten
    seconds of RATE) is shared by the fleet, and each refused connection is held first."""
    started = time.monotonic()
    outcomes: list[tuple[bool, float]] = []

    async def reconnecting(address: str) -> None:
        while time.monotonic() - started < STORM_S and len(outcomes) < 2000:
            attempt = time.monotonic()
            writer = await connect(address, "reconnects")
            outcomes.append((writer is not None, time.monotonic() - attempt))
            if writer is not None:
                writer.close()

    await asyncio.gather(*(reconnecting(members[i % 2].bootstrap) for i in range(20)))
    elapsed = time.monotonic() - started
    admitted = sum(ok for ok, _ in outcomes)
    refused_waits = sorted(wait for ok, wait in outcomes if not ok)
    print(
        f"reconnect storm, {RATE:g}/s: {len(outcomes)} attempts in {elapsed:.1f} s, "
        f"{admitted} admitted; refused ones held a median "
        f"{refused_waits[len(refused_waits) // 2] * 1000:.0f} ms"
    )
    # the bucket's burst (10 s of the rate), its refill, and what a member admits before
    # it hears the other's use (a sync interval of each member's own half)
    assert admitted <= RATE * (10 + elapsed) + 2 * RATE
    assert refused_waits and refused_waits[len(refused_waits) // 2] >= 0.05


async def test_in_shadow_mode_a_storm_is_counted_and_nothing_is_refused(
    kafka1: KafkaCluster, tmp_path: Path
) -> None:
    limit, opened = 10, 30
    shadow = (
        f'[clients."storm"]\n"kafka-quota-proxy.connections" = {limit}\n'
        "[guards.connections]\nshadow = true\n"
    )
    proxy = await asyncio.to_thread(start_proxy, tmp_path, kafka1.bootstrap_servers, 1, shadow)
    try:
        writers = await asyncio.gather(*(connect(proxy.bootstrap, "storm") for _ in range(opened)))
        samples = await asyncio.to_thread(scrape, proxy.metrics_url)
        for writer in writers:
            if writer is not None:
                writer.close()
    finally:
        proxy.stop()
    counted = total(
        samples, "kafka_quota_proxy_shadow_throttles_total", quota="kafka-quota-proxy.connections"
    )
    refused = total(samples, "kafka_quota_proxy_principal_connections_refused_total")
    print(
        f"shadow mode, limit {limit}: {opened} opened, {counted:.0f} counted, {refused:.0f} refused"
    )
    assert all(writer is not None for writer in writers)
    assert (counted, refused) == (opened - limit, 0)
