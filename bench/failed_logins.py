"""A failed-login storm beside healthy producers, with and without the failed-login backoff.

    python -m bench.failed_logins [--attackers 200] [--healthy 20] [--seconds 20]
                                  [--max-wait-ms 20000]

One broker with a SASL listener, and two proxies in front of it: one with
[guards.failed_logins] (first_wait_ms 100, max_wait_ms as given) and one without. Three legs,
one after another:
- none: `--healthy` producers of user alice (aiokafka, SCRAM-SHA-512, acks=1, a record every
  50 ms each, connected before the leg) through the guarded proxy, and no storm;
- unguarded: the same producers through the unguarded proxy, while `--attackers` clients of
  user grace log in with an old password in a loop, from another process;
- guarded: the same through the guarded proxy.

Printed per leg: the refused logins that reached the broker per second (every attempt the
attackers saw refused did: the proxy never answers a SaslAuthenticate itself), the longest
attempt, and the healthy producers' send latency, p50 and p99, as a ratio to the leg without
a storm: over the leg, and from SETTLED_S on, once the storm's first attempts (which nobody
can hold: no refusal came before them) are over. Issue 52's target: the healthy p99 within
1.2 x of the leg without a storm.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from aiokafka import AIOKafkaProducer

import bench.commit
from bench.latency import percentile
from localkafka.cluster import KafkaCluster
from localkafka.load import scram_producer
from localkafka.proxy_process import start_proxy
from localkafka.scrape import scrape, total
from proxy.cli.main import raise_open_file_limit

USERS = {"alice": "alice-secret", "grace": "grace-secret"}
TOPIC = "healthy"
#: a healthy producer's pause between records
PAUSE_S = 0.05
#: the storm's first attempts, made before any refusal, are over by then
SETTLED_S = 5.0


async def attack(bootstrap: str, attackers: int, seconds: float) -> dict[str, float]:
    """`attackers` clients of grace with an old password, each logging in again at once."""
    deadline = time.monotonic() + seconds
    refused: list[float] = []

    async def one() -> None:
        while time.monotonic() < deadline:
            client = scram_producer(bootstrap, "grace", "the-old-password")
            began = time.monotonic()
            try:
                await client.start()
            except Exception:  # refused, however the client words it
                refused.append(time.monotonic() - began)
            finally:
                await client.stop()

    await asyncio.gather(*(one() for _ in range(attackers)))
    return {"refused": len(refused), "longest_s": max(refused, default=0.0)}


async def healthy(
    bootstrap: str, count: int, seconds: float, started: asyncio.Event
) -> list[tuple[float, int]]:
    """(seconds into the leg, send latency in us) of `count` producers of alice, each sending
    a record every PAUSE_S."""
    clients = [scram_producer(bootstrap, "alice", USERS["alice"]) for _ in range(count)]
    await asyncio.gather(*(client.start() for client in clients))
    latencies: list[tuple[float, int]] = []

    async def send(client: AIOKafkaProducer, start: float) -> None:
        while time.monotonic() < start + seconds:
            began = time.monotonic()
            await client.send_and_wait(TOPIC, b"x" * 100)
            latencies.append((began - start, round((time.monotonic() - began) * 1e6)))
            await asyncio.sleep(PAUSE_S)

    try:
        await client_warm(clients)
        started.set()
        start = time.monotonic()
        await asyncio.gather(*(send(client, start) for client in clients))
    finally:
        await asyncio.gather(*(client.stop() for client in clients))
    return latencies


async def client_warm(clients: list[AIOKafkaProducer]) -> None:
    """A first record each: metadata and the connection to the leader are made before the
    leg is timed."""
    await asyncio.gather(*(client.send_and_wait(TOPIC, b"warm") for client in clients))


async def leg(
    bootstrap: str, attackers: int, healthy_count: int, seconds: float
) -> tuple[dict[str, float], list[tuple[float, int]]]:
    started = asyncio.Event()
    run = asyncio.ensure_future(healthy(bootstrap, healthy_count, seconds, started))
    await started.wait()
    storm = {"refused": 0.0, "longest_s": 0.0}
    if attackers:
        command = [sys.executable, "-m", "bench.failed_logins", "--attack", bootstrap]
        command += ["--attackers", str(attackers), "--seconds", str(seconds)]
        process = await asyncio.create_subprocess_exec(*command, stdout=subprocess.PIPE)
        out, _ = await process.communicate()
        storm = json.loads(out.decode().strip().splitlines()[-1])
    return storm, await run


def settled(latencies: list[tuple[float, int]]) -> list[int]:
    """The latencies of sends from SETTLED_S into the leg on: after the storm's first
    attempts, which no backoff holds (nobody was refused yet)."""
    return [latency for at, latency in latencies if at >= SETTLED_S]


async def run(args: argparse.Namespace, workdir: Path) -> None:
    cluster = KafkaCluster(workdir=workdir / "kafka", sasl_users=USERS)
    cluster.start()
    try:
        cluster.create_topic(TOPIC, partitions=1)
        upstream = cluster.brokers[0].sasl_address
        guard = f"\n[guards.failed_logins]\nmax_wait_ms = {args.max_wait_ms}\n"
        guarded = start_proxy(workdir, upstream, 1, guard, name="guarded")
        unguarded = start_proxy(workdir, upstream, 1, name="unguarded")
        try:
            legs = (
                ("none", guarded.bootstrap, 0),
                ("unguarded", unguarded.bootstrap, args.attackers),
                ("guarded", guarded.bootstrap, args.attackers),
            )
            results = {}
            for name, bootstrap, attackers in legs:
                results[name] = await leg(bootstrap, attackers, args.healthy, args.seconds)
                print(f"{name} done", flush=True)
            held_s = total(
                scrape(guarded.metrics_url), "kafka_quota_proxy_login_held_seconds_total"
            )
        finally:
            guarded.stop()
            unguarded.stop()
    finally:
        cluster.stop()
    commit = bench.commit.head()
    print(
        f"\n{args.attackers} clients of one user on an old SCRAM password, {args.healthy}"
        f" healthy producers, {args.seconds:.0f} s a leg, max_wait_ms {args.max_wait_ms};"
        f" commit {commit}\n"
    )
    print(
        "| leg | refused logins at the broker / s | longest attempt | healthy p50 | healthy p99"
        f" | healthy p99 from {SETTLED_S:.0f} s on |"
    )
    print("|---|---|---|---|---|---|")
    whole = [latency for _, latency in results["none"][1]]
    base = percentile(whole, 99)
    settled_base = percentile(settled(results["none"][1]), 99)
    for name, (storm, latencies) in results.items():
        values = [latency for _, latency in latencies]
        p50, p99 = statistics.median(values) / 1000, percentile(values, 99)  # ms
        later = percentile(settled(latencies), 99)
        print(
            f"| {name} | {storm['refused'] / args.seconds:.1f} | {storm['longest_s']:.2f} s"
            f" | {p50:.1f} ms | {p99:.1f} ms ({p99 / base:.2f} x)"
            f" | {later:.1f} ms ({later / settled_base:.2f} x) |"
        )
    print(f"\nthe guarded proxy held attempts {held_s:.0f} s in all")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--attackers", type=int, default=200)
    parser.add_argument("--healthy", type=int, default=20)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--max-wait-ms", type=int, default=20_000)
    parser.add_argument("--attack", metavar="BOOTSTRAP", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    raise_open_file_limit()
    if args.attack:
        logging.getLogger("aiokafka").setLevel(logging.CRITICAL)  # a line per refusal
        print(json.dumps(asyncio.run(attack(args.attack, args.attackers, args.seconds))))
        return 0
    with tempfile.TemporaryDirectory(prefix="kqp-failed-logins-") as tmp:
        asyncio.run(run(args, Path(tmp)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
