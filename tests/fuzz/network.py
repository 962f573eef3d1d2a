"""Network fuzzing: random and mutated frames into a real proxy in front of a real broker.

    python -m tests.fuzz.network [--seconds 300] [--connections 16] [--seed 1]

Fuzzing connections send the captured client requests mutated (most behind a corrected size
prefix, so they reach the decoders), random bytes, truncated frames and absurd sizes, to the
bootstrap and the broker listener, while an idempotent acks=all producer works beside them
through the same proxy. At the end the proxy must still run, its log must hold no
traceback and no "malformed request" (a decoder's missed bounds check, which the core turns
into a closed connection), and every record the producer had acknowledged must be in the
topic once, with acknowledgements in the fuzzing's last 10 s.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import struct
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from localkafka.cluster import KafkaCluster
from localkafka.load import Timeline, aiokafka_flood, read_all, seq_of
from localkafka.proxy_process import SHORT_QUOTA_WINDOWS, RunningProxy, start_proxy
from protocol.apis import CREATE_PARTITIONS, CREATE_TOPICS, DELETE_TOPICS
from protocol.headers import parse_request_header
from tests.fuzz.mutate import mutate, with_size_prefix
from tests.fuzz.seeds import captured

PRODUCER = "kept-producer"
#: every quota low for the fuzzing principals, so their requests run the quota paths
CONFIG = f"""{SHORT_QUOTA_WINDOWS}
[clients."<default>"]
producer_byte_rate = 50000
consumer_byte_rate = 50000
request_percentage = 20
controller_mutation_rate = 2

[users."<default>"]
producer_ids_rate = 5

[clients."{PRODUCER}"]
producer_byte_rate = 100000000
request_percentage = 1000
"""
READ_TIMEOUT_S = 0.2
MAX_CONNECTIONS_PER_WORKER = 100_000
#: the producer starts first and must have its first acknowledgement within this
PRODUCER_HEAD_START_S = 10.0


@dataclass
class FuzzCounts:
    connections: int = 0
    frames: int = 0
    bytes_sent: int = 0
    closed_by_proxy: int = 0
    refused: int = 0
    by_kind: dict[str, int] = field(default_factory=dict)


@dataclass
class Report:
    seconds: float
    counts: FuzzCounts
    acked: int
    stored: int
    duplicates: int
    missing: int
    acked_last_10s: int
    proxy_exit: int | None
    tracebacks: int
    #: a decoder's struct.error or IndexError, caught by the core: a missed bounds check
    malformed: int


def _frames(rng: random.Random, seeds: list[bytes]) -> tuple[str, list[bytes]]:
    """What one fuzzing connection sends: a kind and its writes."""
    seed, other = rng.choice(seeds), rng.choice(seeds)
    roll = rng.random()
    if roll < 0.55:  # mutated, reaching the decoders
        return "mutated", [
            with_size_prefix(mutate(rng, seed, other)) for _ in range(rng.randint(1, 4))
        ]
    if roll < 0.7:  # a valid request first (ApiVersions, a SASL handshake), then mutated ones
        return "valid-then-mutated", [seed, with_size_prefix(mutate(rng, other, seed))]
    if roll < 0.8:
        return "mutated-raw", [mutate(rng, seed, other, moves=rng.randint(1, 12))]
    if roll < 0.87:
        return "random", [rng.randbytes(rng.randint(1, 2048))]
    if roll < 0.94:
        return "truncated", [seed[: rng.randrange(1, len(seed))]]
    size = rng.choice((2**31 - 1, -1, -(2**31), 100 * 2**20 + 1, 2**30))
    return "absurd-size", [struct.pack(">i", size) + rng.randbytes(rng.randint(0, 64))]


async def _fuzz_connection(
    rng: random.Random, addresses: list[tuple[str, int]], seeds: list[bytes], counts: FuzzCounts
) -> None:
    host, port = rng.choice(addresses)
    kind, writes = _frames(rng, seeds)
    counts.by_kind[kind] = counts.by_kind.get(kind, 0) + 1
    try:
        reader, writer = await asyncio.open_connection(host, port)
    except ConnectionRefusedError:
        counts.refused += 1
        return
    counts.connections += 1
    try:
        for data in writes:
            writer.write(data)
            counts.frames += 1
            counts.bytes_sent += len(data)
        await writer.drain()
        while await asyncio.wait_for(reader.read(65536), READ_TIMEOUT_S):
            pass
        counts.closed_by_proxy += 1
    except (TimeoutError, ConnectionError):
        pass
    finally:
        writer.close()


async def _fuzz(
    addresses: list[tuple[str, int]], seconds: float, connections: int, seed: int
) -> FuzzCounts:
    # not the topic-creating and -deleting requests: mutated partition counts would have the
    # real broker create thousands of partitions (their decoders are fuzzed in-process)
    seeds = [
        frame
        for frame in captured().values()
        if parse_request_header(frame).api_key
        not in (CREATE_TOPICS, CREATE_PARTITIONS, DELETE_TOPICS)
    ]
    counts = FuzzCounts()
    deadline = time.monotonic() + seconds

    async def loop(worker: int) -> None:
        rng = random.Random(seed * 1000 + worker)
        for _ in range(MAX_CONNECTIONS_PER_WORKER):
            if time.monotonic() >= deadline:
                break
            await _fuzz_connection(rng, addresses, seeds, counts)

    await asyncio.gather(*(loop(worker) for worker in range(connections)))
    return counts


def _addresses(proxy: RunningProxy) -> list[tuple[str, int]]:
    host, _, port = proxy.bootstrap.rpartition(":")
    return [(host, int(port)), (host, proxy.broker_port_base + 1)]


async def _first_ack(timeline: Timeline, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not timeline.events:
        if time.monotonic() > deadline:
            raise TimeoutError(f"the producer had no acknowledgement in {timeout_s:.0f} s")
        await asyncio.sleep(0.05)


async def run_network_fuzz(workdir: Path, seconds: float, connections: int, seed: int) -> Report:
    cluster = KafkaCluster(workdir=workdir / "kafka")
    proxy: RunningProxy | None = None
    producing: asyncio.Task[int] | None = None
    topic = f"kept-records-{random.Random(seed).getrandbits(48):012x}"  # no seed names it
    try:
        cluster.start()
        proxy = start_proxy(workdir, cluster.bootstrap_servers, 1, CONFIG)
        cluster.create_topic(topic, partitions=3)
        timeline = Timeline()
        producing = asyncio.create_task(
            aiokafka_flood(
                proxy.bootstrap,
                PRODUCER,
                topic,
                seconds + PRODUCER_HEAD_START_S,
                timeline,
                offered_rate=20_000.0,
                enable_idempotence=True,
                acks="all",
            )
        )
        # its producer id is admitted before the fuzzers, User:ANONYMOUS too, spend that
        # user's producer_ids_rate
        await _first_ack(timeline, PRODUCER_HEAD_START_S)
        started = time.monotonic()
        counts = await _fuzz(_addresses(proxy), seconds, connections, seed)
        ended = time.monotonic()
        await producing
        proxy_exit = proxy.process.poll()
        stored = [
            seq_of(value)
            for value in await asyncio.to_thread(read_all, cluster.bootstrap_servers, topic)
        ]
        acked = timeline.seqs
        last_10s = sum(1 for at, _ in timeline.events if ended - 10 <= at <= ended)
        log = proxy.log()
    finally:
        if producing is not None and not producing.done():
            producing.cancel()
        if proxy is not None:
            proxy.stop()
        cluster.stop()
    return Report(
        ended - started,
        counts,
        len(acked),
        len(stored),
        len(stored) - len(set(stored)),
        len(set(acked) - set(stored)),
        last_10s,
        proxy_exit,
        log.count("Traceback"),
        log.count("malformed request"),
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=300.0)
    parser.add_argument("--connections", type=int, default=16)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="kqp-netfuzz-") as tmp:
        report = asyncio.run(run_network_fuzz(Path(tmp), args.seconds, args.connections, args.seed))
    print(report)
    ok = (
        report.proxy_exit is None
        and report.tracebacks == 0
        and report.malformed == 0
        and report.missing == 0
        and report.duplicates == 0
        and report.acked_last_10s > 0
    )
    print("no finding" if ok else "FINDING")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
