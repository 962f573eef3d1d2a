"""The proxy's memory under hostile clients, and a well-behaved producer's rate beside them.

    python -m bench.hostile [--trickling 1000] [--idle 10000] [--frame-mb 50] [--pool-mb 128]
                            [--trickle-kib-per-s 2048] [--seconds 40]

One broker, the proxy in front of it with queued_max_request_bytes = the pool. The proxy's
resident memory (VmRSS, from /proc) is printed at rest, after `--idle` connections that
never send a byte, and every second while `--trickling` connections each send one frame
that claims `--frame-mb` MB at `--trickle-kib-per-s`: fast enough that the frames the pool
admits fill up and complete within the run (then the broker refuses them and the next
waiting connections are admitted), so the pool's bound is reached, not just claimed. At the
same time an aiokafka producer (acks=all) produces at a fixed rate through the proxy; its
rate is printed beside the same producer's rate direct to Kafka, measured in the same run.

Passes when the proxy runs to the end, the producer keeps 0.9 of its direct rate, and peak
RSS <= RSS at rest + pool + one frame (the pool is not strict: like Kafka's, it grants a
frame while any memory is left) + CONNECTION_BUDGET per connection + one pressure read
(proxy.runtime.read_budget.PRESSURE_READ_BYTES) per connection sending a frame: docs/operations.md,
"Memory".
"""

from __future__ import annotations

import argparse
import asyncio
import struct
import tempfile
import time
from pathlib import Path

from localkafka.cluster import KafkaCluster
from localkafka.load import RECORD_BYTES, Timeline, aiokafka_flood
from localkafka.proxy_process import RunningProxy, start_proxy
from localkafka.scrape import scrape, total
from proxy.cli.main import raise_open_file_limit
from proxy.runtime.read_budget import PRESSURE_READ_BYTES

MIB = 2**20
#: the well-behaved producer's offered rate, bytes/s
OFFERED = 500_000.0
TRICKLE_CHUNK = 64 * 1024
#: docs/operations.md, "Memory": what to plan per client connection beyond the pool
CONNECTION_BUDGET = 16 * 1024
#: the share of its direct rate the producer beside the attack must keep
KEPT_RATE = 0.9


async def _produce(bootstrap: str, topic: str, seconds: float) -> float:
    """Acked bytes/s of a producer offering OFFERED bytes/s for `seconds`."""
    timeline = Timeline()
    await aiokafka_flood(
        bootstrap, "well-behaved", topic, seconds, timeline, offered_rate=OFFERED, acks="all"
    )
    return timeline.rate(1.0, seconds)


async def _idle(host: str, port: int, count: int) -> list[asyncio.StreamWriter]:
    writers = []
    for start in range(0, count, 500):
        opened = await asyncio.gather(
            *(asyncio.open_connection(host, port) for _ in range(min(500, count - start)))
        )
        writers += [writer for _, writer in opened]
    return writers


async def _trickle(host: str, port: int, frame_bytes: int, rate: float, deadline: float) -> bool:
    """One connection sending a frame that claims frame_bytes at `rate` bytes/s, until the
    deadline; True when the whole frame went out."""
    _, writer = await asyncio.open_connection(host, port)
    # a Produce v7 header (client_id "trickler"), then zeros: the broker refuses it whole
    header = struct.pack(">ihhih", frame_bytes, 0, 7, 1, 8) + b"trickler"
    writer.write(header)
    sent, started = len(header) - 4, time.monotonic()
    chunk = bytes(TRICKLE_CHUNK)
    try:
        while sent < frame_bytes and time.monotonic() < deadline:
            data = chunk[: frame_bytes - sent]
            writer.write(data)
            await asyncio.wait_for(writer.drain(), max(deadline - time.monotonic(), 0.01))
            sent += len(data)
            await asyncio.sleep(max(started + sent / rate - time.monotonic(), 0.0))
    except (TimeoutError, ConnectionError):
        pass
    writer.close()
    return sent >= frame_bytes


async def _sample(proxy: RunningProxy, until: float, rss: list[int], waiting: list[float]) -> None:
    """The proxy's RSS, and its connections waiting for pool memory, each second."""
    while time.monotonic() < until:
        rss.append(proxy.rss_bytes())
        metrics = await asyncio.to_thread(scrape, proxy.metrics_url)
        waiting.append(total(metrics, "kafka_quota_proxy_memory_pool_waiting_connections"))
        await asyncio.sleep(1.0)


async def run(args: argparse.Namespace, workdir: Path) -> bool:
    needed = args.idle + args.trickling + 200
    allowed = raise_open_file_limit()
    if needed > allowed:
        raise SystemExit(f"{needed} open files are needed and the limit is {allowed}")
    pool = args.pool_mb * MIB
    frame = args.frame_mb * 10**6
    cluster = KafkaCluster(workdir=workdir / "kafka")
    proxy: RunningProxy | None = None
    idle: list[asyncio.StreamWriter] = []
    try:
        cluster.start()
        proxy = start_proxy(
            workdir, cluster.bootstrap_servers, 1, f"queued_max_request_bytes = {pool}\n"
        )
        cluster.create_topic("well-behaved", partitions=3)
        host, _, port_text = proxy.bootstrap.rpartition(":")
        port = int(port_text)
        direct = await _produce(cluster.bootstrap_servers, "well-behaved", args.seconds)
        await _produce(proxy.bootstrap, "well-behaved", 3.0)  # the proxy's code paths warm
        rest = proxy.rss_bytes()
        idle = await _idle(host, port, args.idle)
        await asyncio.sleep(2.0)
        after_idle = proxy.rss_bytes()
        per_connection = max(after_idle - rest, 0) / max(args.idle, 1)
        print(
            f"proxy RSS at rest {rest / MIB:.1f} MiB; with {args.idle:,} idle connections "
            f"{after_idle / MIB:.1f} MiB: {per_connection / 1024:.1f} KiB per connection"
        )
        deadline = time.monotonic() + args.seconds + 5.0
        samples: list[int] = []
        waiting: list[float] = []
        rate = args.trickle_kib_per_s * 1024
        completed, proxied, _ = await asyncio.gather(
            asyncio.gather(
                *(_trickle(host, port, frame, rate, deadline) for _ in range(args.trickling))
            ),
            _produce(proxy.bootstrap, "well-behaved", args.seconds),
            _sample(proxy, deadline, samples, waiting),
        )
        alive = proxy.process.poll() is None
    finally:
        for writer in idle:
            writer.close()
        if proxy is not None:
            proxy.stop()
        cluster.stop()
    peak = max(samples)
    connections = args.idle + args.trickling
    bound = rest + pool + frame + CONNECTION_BUDGET * connections
    bound += PRESSURE_READ_BYTES * args.trickling
    ratio = proxied / direct
    print(
        f"{args.trickling:,} connections sent frames of {args.frame_mb} MB at "
        f"{args.trickle_kib_per_s} KiB/s each beside {args.idle:,} idle ones for "
        f"{args.seconds:.0f} s: {sum(completed)} frames completed; at most {max(waiting):.0f} "
        "connections waited for pool memory at once"
    )
    print("proxy RSS each second (MiB): " + " ".join(f"{sample / MIB:.0f}" for sample in samples))
    print(
        f"peak proxy RSS {peak / MIB:.1f} MiB; bound: rest {rest / MIB:.1f} + pool "
        f"{pool / MIB:.0f} + one frame {frame / MIB:.1f} + {CONNECTION_BUDGET // 1024} KiB x "
        f"{connections:,} connections + {PRESSURE_READ_BYTES // 1024} KiB x "
        f"{args.trickling:,} sending = {bound / MIB:.1f} MiB: "
        f"{'within' if peak <= bound else 'OVER'}"
    )
    print(
        f"well-behaved producer (acks=all, offered {OFFERED / 1000:.0f} kB/s, "
        f"{RECORD_BYTES} B records): direct {direct / 1000:.1f} kB/s, through the attacked "
        f"proxy {proxied / 1000:.1f} kB/s, ratio {ratio:.2f}; proxy still running: {alive}"
    )
    return peak <= bound and alive and ratio >= KEPT_RATE


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trickling", type=int, default=1000)
    parser.add_argument("--idle", type=int, default=10_000)
    parser.add_argument("--frame-mb", type=int, default=50)
    parser.add_argument("--pool-mb", type=int, default=128)
    parser.add_argument("--trickle-kib-per-s", type=int, default=2048)
    parser.add_argument("--seconds", type=float, default=40.0)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="kqp-hostile-") as tmp:
        ok = asyncio.run(run(args, Path(tmp)))
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
