"""The sizing table: what one worker (one core) of the proxy carries, plain and TLS.

    python -m bench.sizing [--records 300000] [--seconds 10] [--connections 2000]
                           [--principals 10000] [--plain-only]

One broker and one proxy of one worker in front of it, quotas on for every client and never
reached (so every request goes through enforcement, as in production), usage samples on; a
topic of six partitions; 1 KiB records. For plain, then TLS (every hop SSL):

- Kafka's ProducerPerformance and ConsumerPerformance at full speed through the proxy, and
  straight to the broker in the same run: the proxy's CPU per MB moved (from /proc), and from
  it the MB/s one worker carries at 50 % and 90 % of a core.
- ProducerPerformance (linger.ms 5) at a quarter and at half of the direct full-speed rate,
  through the proxy and straight to the broker: the p50/p99 the proxy adds there, and the
  share of a core the proxy used.
- Small requests (one 100-byte record each, 1,000 principals in turn, 8 connections of 8 in
  flight): the proxy's CPU per request, as requests/s per core.
- Memory: the proxy's RSS after `--principals` principals (client-ids) each sent one
  Produce, over its RSS at rest, per principal; then with `--connections` idle connections
  (TLS ones handshaken) on top, per connection.
- The fleet's bus, per member, at 1,000 and 10,000 active principals (bench.fleet's own
  in-process run, 3 members): bytes published and read per second and their CPU.

The broker, the perf tools and the proxy share this machine's cores, so the full-speed rates
are the machine's, not the proxy's, and a proxy at 50 % or 90 % of a core cannot be offered
that load here: the proxy's CPU per MB is its own, measured, and the rates at 50 % and 90 %
of a core follow from it; the latency is measured at the loads this machine sustains. The
docs' sizing table (docs/performance.md) is this command's output with the machine and
commit named.
"""

from __future__ import annotations

import argparse
import asyncio
import ssl
import struct
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from bench.fleet import TOPIC as FLEET_TOPIC
from bench.fleet import bus, cpu_per_request_us, frames
from bench.throughput import consume, cpu_ms, produce
from localkafka.cluster import KafkaCluster
from localkafka.ports import LOOPBACK
from localkafka.proxy_process import RunningProxy, start_proxy, tls_sections

TOPIC = "bench-sizing"
PARTITIONS = 6
MB = 1_000_000
RECORD = 1024
#: the produce rates latency is measured at, as shares of the direct full-speed rate
LOADS = (0.25, 0.5)
#: quotas on for every client, never reached
QUOTAS = (
    '[clients."<default>"]\nproducer_byte_rate = 1e12\nconsumer_byte_rate = 1e12\n'
    "request_percentage = 1e6\n"
)
_INT32 = struct.Struct(">i")


@dataclass
class Mode:
    name: str
    cluster: KafkaCluster
    proxy: RunningProxy
    direct: str
    context: ssl.SSLContext | None


def _client_context(cluster: KafkaCluster) -> ssl.SSLContext | None:
    if cluster.ca is None:
        return None
    context = ssl.create_default_context(cafile=str(cluster.ca_certificate))
    context.check_hostname = False
    return context


async def _send_each(address: str, sent: list[bytearray], context: ssl.SSLContext | None) -> int:
    """Each frame once, 8 in flight, on one connection: how many were answered."""
    host, port = address.rsplit(":", 1)
    reader, writer = await asyncio.open_connection(host, int(port), ssl=context)
    answered = pending = 0
    for correlation, frame in enumerate(sent):
        struct.pack_into(">i", frame, 8, correlation)
        writer.write(frame)
        pending += 1
        if pending == 8:
            await reader.readexactly(_INT32.unpack(await reader.readexactly(4))[0])
            pending -= 1
            answered += 1
    while pending:
        await reader.readexactly(_INT32.unpack(await reader.readexactly(4))[0])
        pending -= 1
        answered += 1
    writer.close()
    return answered


async def _idle(
    address: str, count: int, context: ssl.SSLContext | None
) -> list[asyncio.StreamWriter]:
    host, port = address.rsplit(":", 1)
    writers: list[asyncio.StreamWriter] = []
    for start in range(0, count, 200):
        opened = await asyncio.gather(
            *(
                asyncio.open_connection(host, int(port), ssl=context)
                for _ in range(min(200, count - start))
            )
        )
        writers += [writer for _, writer in opened]
    return writers


def measure(mode: Mode, args: argparse.Namespace) -> dict[str, float]:
    cluster, proxy = mode.cluster, mode.proxy
    pid = proxy.process.pid
    out: dict[str, float] = {}
    # full speed: the proxy's CPU per MB, beside the direct rate
    for target, bootstrap in (("direct", mode.direct), ("proxy", proxy.bootstrap)):
        topic = f"{TOPIC}-{mode.name}-{target}"
        cluster.create_topic(topic, PARTITIONS)
        before = cpu_ms(pid)
        produced = produce(cluster, bootstrap, topic, args.records, -1, 5)
        produce_cpu = cpu_ms(pid) - before
        before = cpu_ms(pid)
        consumed = consume(cluster, bootstrap, topic, args.records)
        consume_cpu = cpu_ms(pid) - before
        out[f"produce_mb_s_{target}"] = produced.mb_per_s
        out[f"consume_mb_s_{target}"] = consumed.mb_per_s
        if target == "proxy":
            moved = args.records * RECORD / MB
            out["produce_cpu_ms_per_mb"] = produce_cpu / moved
            out["consume_cpu_ms_per_mb"] = consume_cpu / moved
    # latency at loads this machine sustains (a quarter and a half of the direct full-speed
    # rate): what the proxy adds, and the share of a core it used there
    for share in LOADS:
        mb_s = share * out["produce_mb_s_direct"]
        rate = int(mb_s * MB / RECORD)
        records = int(rate * args.seconds)
        label = f"load{int(share * 100)}"
        for target, bootstrap in (("direct", mode.direct), ("proxy", proxy.bootstrap)):
            topic = f"{TOPIC}-{mode.name}-{target}-{label}"
            cluster.create_topic(topic, PARTITIONS)
            before, started = cpu_ms(pid), time.monotonic()
            result = produce(cluster, bootstrap, topic, records, rate, 5)
            elapsed = time.monotonic() - started
            out[f"{label}_p50_{target}"] = result.p50_ms
            out[f"{label}_p99_{target}"] = result.p99_ms
            out[f"{label}_mb_s_{target}"] = result.mb_per_s
            if target == "proxy":
                out[f"{label}_core"] = (cpu_ms(pid) - before) / 1000 / elapsed
    # small requests: bench.fleet's, 1,000 principals' Produce in turn
    cluster.create_topic(FLEET_TOPIC, 1)
    out["small_us_per_request"] = cpu_per_request_us(
        proxy, proxy.bootstrap, args.seconds, mode.context
    )[0]
    # memory
    out.update(asyncio.run(_memory(mode, args)))
    return out


async def _memory(mode: Mode, args: argparse.Namespace) -> dict[str, float]:
    """Principals first: memory freed by closed connections would be reused by them."""
    proxy = mode.proxy
    await asyncio.sleep(1)
    at_rest = proxy.rss_bytes()
    answered = await _send_each(proxy.bootstrap, frames(args.principals), mode.context)
    assert answered == args.principals
    await asyncio.sleep(1)
    with_principals = proxy.rss_bytes()
    writers = await _idle(proxy.bootstrap, args.connections, mode.context)
    await asyncio.sleep(2)
    with_connections = proxy.rss_bytes()
    for writer in writers:
        writer.close()
    return {
        "rss_at_rest_mb": at_rest / 2**20,
        "bytes_per_principal": (with_principals - at_rest) / args.principals,
        "bytes_per_connection": (with_connections - with_principals) / args.connections,
    }


def run_mode(tls: bool, args: argparse.Namespace, work: Path) -> dict[str, float]:
    cluster = KafkaCluster(brokers_count=1, heap="2g", tls=tls, workdir=work / "kafka").start()
    direct = cluster.brokers[0].ssl_address if tls else cluster.bootstrap_servers
    proxy = None
    try:
        extra = QUOTAS
        if cluster.ca is not None:
            keystore = cluster.ca.server("proxy", LOOPBACK)
            extra += tls_sections(keystore, cluster.ca_certificate)
        proxy = start_proxy(work, direct, brokers=1, extra=extra, name="sizing")
        mode = Mode("tls" if tls else "plain", cluster, proxy, direct, _client_context(cluster))
        return measure(mode, args)
    finally:
        if proxy is not None:
            proxy.stop()
        cluster.stop()


def cells(r: dict[str, float], args: argparse.Namespace) -> dict[str, str]:
    """One mode's column of the table, by row label."""
    column = {
        "proxy CPU per MB produced / consumed": (
            f"{r['produce_cpu_ms_per_mb']:.1f} / {r['consume_cpu_ms_per_mb']:.1f} ms"
        ),
    }
    per_core = {"produced": r["produce_cpu_ms_per_mb"], "consumed": r["consume_cpu_ms_per_mb"]}
    for share in (0.5, 0.9):
        for kind, ms_per_mb in per_core.items():
            column[f"MB/s {kind} at {share:.0%} of a core"] = f"{share * 1000 / ms_per_mb:,.0f}"
    for share in LOADS:
        label = f"load{int(share * 100)}"
        column[f"producing at {share:.0%} of direct's full speed: MB/s, core used"] = (
            f"{r[f'{label}_mb_s_proxy']:.1f} MB/s, {r[f'{label}_core']:.0%} of a core"
        )
        column[f"added p50 / p99 at {share:.0%} of direct's full speed (direct's)"] = (
            f"{r[f'{label}_p50_proxy'] - r[f'{label}_p50_direct']:+.0f} /"
            f" {r[f'{label}_p99_proxy'] - r[f'{label}_p99_direct']:+.0f} ms"
            f" ({r[f'{label}_p50_direct']:.0f} / {r[f'{label}_p99_direct']:.0f} ms)"
        )
    column["small requests per second per core"] = (
        f"{1e6 / r['small_us_per_request']:,.0f} ({r['small_us_per_request']:.0f} us each)"
    )
    for kind in ("produce", "consume"):
        proxied, direct = r[f"{kind}_mb_s_proxy"], r[f"{kind}_mb_s_direct"]
        column[f"full speed, {kind}: through the proxy / direct"] = (
            f"{proxied:.1f} / {direct:.1f} MB/s ({proxied / direct:.2f} x)"
        )
    column["memory at rest"] = f"{r['rss_at_rest_mb']:.0f} MiB"
    column[f"memory per connection ({args.connections:,} idle)"] = (
        f"{r['bytes_per_connection'] / 1024:.1f} KiB"
    )
    column[f"memory per active principal ({args.principals:,})"] = (
        f"{r['bytes_per_principal'] / 1024:.2f} KiB"
    )
    return column


def report(results: dict[str, dict[str, float]], args: argparse.Namespace) -> None:
    columns = {name: cells(r, args) for name, r in results.items()}
    print()
    print(f"One worker (one core), 1 KiB records, {PARTITIONS} partitions, one broker")
    print(f"| | {' | '.join(columns)} |")
    print(f"|---|{'---|' * len(columns)}")
    for label in next(iter(columns.values())):
        print(f"| {label} | {' | '.join(column[label] for column in columns.values())} |")
    print()
    print("The fleet's bus, per member per second (3 members, every principal on each):")
    for principals in (1_000, 10_000):
        cost = bus(principals, 3, 20)
        cpu = cost.publish_cpu + cost.read_cpu
        print(
            f"  {principals:>6,} principals: {cost.published / 1e3:,.1f} kB published,"
            f" {cost.read / 1e3:,.1f} kB read, {cpu * 1e3:.1f} ms CPU ({cpu:.1%} of a core)"
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.sizing", description=__doc__)
    parser.add_argument("--records", type=int, default=300_000)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--connections", type=int, default=2000)
    parser.add_argument("--principals", type=int, default=10_000)
    parser.add_argument("--plain-only", action="store_true")
    args = parser.parse_args(argv)
    results: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for tls in (False,) if args.plain_only else (False, True):
            name = "TLS" if tls else "plain"
            work = Path(tmp) / name
            work.mkdir()
            results[name] = run_mode(tls, args, work)
            print(f"{name} done", file=sys.stderr, flush=True)
    report(results, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
