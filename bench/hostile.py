"""The proxy's memory under hostile clients, and a well-behaved producer's rate beside them.

    python -m bench.hostile [--trickling 1000] [--idle 10000] [--frame-mb 50] [--pool-mb 128]

One broker, the proxy in front of it with queued_max_request_bytes = the pool. The proxy's
resident memory (VmRSS, from /proc) is printed at rest, after `--idle` connections that
never send a byte, and every second while `--trickling` connections each trickle one frame
that claims `--frame-mb` MB; the per-connection cost is measured from the idle phase. At
the same time an aiokafka producer (acks=all) produces at a fixed rate through the proxy;
its rate is printed beside the same producer's rate direct to Kafka, measured in the same
run. The bound checked: peak RSS <= RSS at rest + pool + one frame (the pool is not strict:
like Kafka's, it grants a frame while any memory is left) + 32 KiB per connection, the
per-connection budget README's "Memory" states.
"""

from __future__ import annotations

import argparse
import asyncio
import resource
import struct
import tempfile
import time
from pathlib import Path

from localkafka import KafkaCluster
from localkafka.load import RECORD_BYTES, Timeline, aiokafka_flood
from localkafka.proxy_process import RunningProxy, start_proxy
from tests.integration.scrape import scrape, total

MIB = 2**20
#: the well-behaved producer's offered rate, bytes/s
OFFERED = 500_000.0
TRICKLE_BYTES = 4096
TRICKLE_EVERY_S = 1.0
#: README's "Memory": what to plan per client connection beyond the pool
CONNECTION_BUDGET = 32 * 1024


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for {pid}")


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


async def _trickle(host: str, port: int, frame_bytes: int, deadline: float) -> int:
    """One connection trickling a frame that claims frame_bytes; returns bytes it got out."""
    _, writer = await asyncio.open_connection(host, port)
    # a Produce v7 header (client_id "trickler"), then the body that never ends in time
    header = struct.pack(">ihhih", frame_bytes, 0, 7, 1, 8) + b"trickler"
    writer.write(header)
    sent = len(header)
    chunk = b"\x00" * TRICKLE_BYTES
    try:
        while time.monotonic() < deadline and sent < frame_bytes:
            writer.write(chunk)
            await asyncio.wait_for(writer.drain(), max(deadline - time.monotonic(), 0.01))
            sent += len(chunk)
            await asyncio.sleep(TRICKLE_EVERY_S)
    except (TimeoutError, ConnectionError):
        pass
    writer.close()
    return sent


async def _sample(proxy: RunningProxy, until: float, rss: list[int], waiting: list[float]) -> None:
    """The proxy's RSS, and its connections waiting for pool memory, each second."""
    while time.monotonic() < until:
        rss.append(rss_bytes(proxy.process.pid))
        metrics = await asyncio.to_thread(scrape, proxy.metrics_url)
        waiting.append(total(metrics, "kafka_quota_proxy_memory_pool_waiting_connections"))
        await asyncio.sleep(1.0)


async def run(args: argparse.Namespace, workdir: Path) -> bool:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    needed = args.idle + args.trickling + 200
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(max(soft, needed), hard), hard))
    cluster = KafkaCluster(workdir=workdir / "kafka")
    cluster.start()
    pool = args.pool_mb * MIB
    proxy: RunningProxy = start_proxy(
        workdir, cluster.bootstrap_servers, 1, f"queued_max_request_bytes = {pool}\n"
    )
    try:
        cluster.create_topic("well-behaved", partitions=3)
        host, _, port_text = proxy.bootstrap.rpartition(":")
        port, pid = int(port_text), proxy.process.pid
        direct = await _produce(cluster.bootstrap_servers, "well-behaved", args.seconds)
        await _produce(proxy.bootstrap, "well-behaved", 3.0)  # the proxy's code paths warm
        rest = rss_bytes(pid)
        idle = await _idle(host, port, args.idle)
        await asyncio.sleep(2.0)
        after_idle = rss_bytes(pid)
        per_connection = max(after_idle - rest, 0) / max(args.idle, 1)
        print(
            f"proxy RSS at rest {rest / MIB:.1f} MiB; with {args.idle:,} idle connections "
            f"{after_idle / MIB:.1f} MiB: {per_connection / 1024:.1f} KiB per connection"
        )
        deadline = time.monotonic() + args.seconds + 5.0
        samples: list[int] = []
        waiting: list[float] = []
        trickled, proxied, _ = await asyncio.gather(
            asyncio.gather(
                *(
                    _trickle(host, port, args.frame_mb * 10**6, deadline)
                    for _ in range(args.trickling)
                )
            ),
            _produce(proxy.bootstrap, "well-behaved", args.seconds),
            _sample(proxy, deadline, samples, waiting),
        )
        alive = proxy.process.poll() is None
        for writer in idle:
            writer.close()
    finally:
        proxy.stop()
        cluster.stop()
    peak = max(samples)
    connections = args.idle + args.trickling
    frame = args.frame_mb * 10**6
    bound = rest + pool + frame + CONNECTION_BUDGET * connections
    trickler_cost = max(peak - after_idle, 0) / max(args.trickling, 1)
    print(
        f"{args.trickling:,} connections trickled frames of {args.frame_mb} MB "
        f"({sum(trickled) / MIB:.1f} MiB written in all) beside {args.idle:,} idle ones, "
        f"{args.seconds:.0f} s; at most {max(waiting):.0f} waited for pool memory at once"
    )
    print("proxy RSS each second (MiB): " + " ".join(f"{sample / MIB:.0f}" for sample in samples))
    print(
        f"peak proxy RSS {peak / MIB:.1f} MiB ({trickler_cost / 1024:.1f} KiB per trickling "
        f"connection, its upstream connection included); bound: rest {rest / MIB:.1f} + pool "
        f"{pool / MIB:.0f} + one frame {frame / MIB:.1f} + {CONNECTION_BUDGET // 1024} KiB x "
        f"{connections:,} connections = {bound / MIB:.1f} MiB: "
        f"{'within' if peak <= bound else 'OVER'}"
    )
    print(
        f"well-behaved producer (acks=all, offered {OFFERED / 1000:.0f} kB/s, "
        f"{RECORD_BYTES} B records): direct {direct / 1000:.1f} kB/s, through the attacked "
        f"proxy {proxied / 1000:.1f} kB/s, ratio {proxied / direct:.2f}; proxy still running: "
        f"{alive}"
    )
    return peak <= bound and alive


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trickling", type=int, default=1000)
    parser.add_argument("--idle", type=int, default=10_000)
    parser.add_argument("--frame-mb", type=int, default=50)
    parser.add_argument("--pool-mb", type=int, default=128)
    parser.add_argument("--seconds", type=float, default=20.0)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="kqp-hostile-") as tmp:
        ok = asyncio.run(run(args, Path(tmp)))
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
