"""A fleet against a real cluster (issue 51): three proxies of one fleet in front of three
brokers, PRINCIPALS client-ids from LOADERS load processes, HEAVY of them asking twice their
quota and the rest a tenth to two fifths of it.

Each principal has a connection through every proxy, each to the broker leading the
partition it writes, and paces its Produce requests (acks=1, one record of RECORD bytes) to
its demand, split over the three; a throttled response holds that connection for its
throttle_time_ms, as Kafka's clients do. A connection that breaks is made again through the
next proxy, as a client's bootstrap list would.

Printed per leg: each member's bus bytes per second, its process CPU and (where the fleet has
the metric) the bus's own CPU, over the measured span; the HEAVY principals' acknowledged
rate over that span against their quota (median and worst); then one member killed -9 under
the same load: how long the survivors took to count two members, and the HEAVY principals'
rate together, second by second and over every span of Kafka's default quota windows (11 x
1 s), before and after the kill. With `--against REV` the same run on REV's proxies (a git
worktree), first, on the same cluster. With `--owners`, this tree's proxies through owners
([fleet] owners = true) as well, and REV's too with `--against`. With `--mixed REV`, a fleet
mid-roll as well: member 0 on REV, the others on this tree, and what their logs said of the
record versions (member 0 is the one killed, and the others are then alone on this tree's).
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import os
import signal
import statistics
import struct
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from multiprocessing.queues import Queue
from pathlib import Path

from confluent_kafka.admin import AdminClient

from bench.instructions import checkout
from bench.throughput import cpu_ms
from localkafka.cluster import KafkaCluster
from localkafka.inprocess.wire import produce_request, record_batch
from localkafka.proxy_process import RunningProxy, start_proxy
from localkafka.scrape import scrape, total, value
from proxy.cli.main import raise_open_file_limit

PRINCIPALS = 2_000
HEAVY = 200
LOADERS = 4
#: producer_byte_rate of every client-id (its <default>), B/s
LIMIT = 10_000
RECORD = 5_000
WARM_S, MEASURED_S, AFTER_KILL_S = 15, 30, 30
#: Kafka's default quota windows: 11 samples of 1 s
WINDOWS_S = 11
MEMBERS = 3
_I32 = struct.Struct(">i")


def demand(principal: int) -> float:
    """B/s: the HEAVY first ask twice their quota; the rest 0.1 to 0.4 of it."""
    if principal < HEAVY:
        return 2.0 * LIMIT
    return LIMIT * (0.1 + 0.3 * (principal % 97) / 96)


@dataclass(frozen=True)
class Route:
    #: each proxy's address for the broker that leads the partition, in the proxies' order
    addresses: tuple[str, ...]
    partition: int


async def _connection(
    principal: int,
    topic: str,
    route: Route,
    first: int,
    start: float,
    end: float,
    acked: list[int],
) -> None:
    """One principal's connection: paced to a third of its demand, through proxy `first`
    and, once that one breaks, the next."""
    client_id = b"p-%05d" % principal
    batch = record_batch(-1, value=b"x" * RECORD)
    frame = bytearray(produce_request(9, {route.partition: batch}, topic, 0, 1, client_id))
    # v9's response: correlation id, header tags, one topic (its name compact), one partition
    # (its index), then that partition's error code; throttle_time_ms just before the tags
    error_at = 4 + 1 + 1 + 1 + len(topic) + 1 + 4
    every_s = RECORD / (demand(principal) / MEMBERS)
    due = start + (principal % 97) / 97 * every_s  # spread over the first interval
    proxy, correlation = first, 0
    while time.time() < end:
        host, port = route.addresses[proxy].rsplit(":", 1)
        try:
            reader, writer = await asyncio.open_connection(host, int(port))
        except OSError:
            proxy = (proxy + 1) % len(route.addresses)
            await asyncio.sleep(0.1)
            continue
        try:
            while time.time() < end:
                await asyncio.sleep(max(0.0, due - time.time()))
                due = max(due + every_s, time.time() - every_s)
                correlation += 1
                struct.pack_into(">i", frame, 8, correlation)
                writer.write(frame)
                (size,) = _I32.unpack(await reader.readexactly(4))
                response = await reader.readexactly(size)
                # v9: ... error_code of the one partition, then throttle_time_ms, tags
                (throttle_ms,) = _I32.unpack_from(response, size - 5)
                second = int(time.time() - start)
                if response[error_at : error_at + 2] == b"\x00\x00" and 0 <= second < len(acked):
                    acked[second] += RECORD
                if throttle_ms > 0:
                    due = max(due, time.time() + throttle_ms / 1000)
        except (OSError, asyncio.IncompleteReadError):
            proxy = (proxy + 1) % len(route.addresses)
        finally:
            writer.close()


def _load(
    principals: range,
    topic: str,
    routes: Sequence[Route],
    start: float,
    end: float,
    out: Queue[dict[int, list[int]]],
) -> None:
    """A load process: its principals' acknowledged bytes per second, put on `out`."""
    raise_open_file_limit()  # a connection per principal and proxy
    seconds = int(end - start) + 1
    acked = {principal: [0] * seconds for principal in principals}

    async def run() -> None:
        await asyncio.gather(
            *(
                _connection(p, topic, routes[p % len(routes)], m, start, end, acked[p])
                for p in principals
                for m in range(MEMBERS)
            ),
            return_exceptions=True,
        )

    asyncio.run(run())
    out.put(acked)


def routes(cluster: KafkaCluster, topic: str, proxies: Sequence[RunningProxy]) -> list[Route]:
    """A route per partition: through each proxy to the broker leading it."""
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    partitions = admin.list_topics(topic, timeout=10).topics[topic].partitions
    return [
        Route(tuple(proxy.broker_address(part.leader) for proxy in proxies), index)
        for index, part in sorted(partitions.items())
    ]


@dataclass(frozen=True)
class Member:
    published: float
    read: float
    process_cpu: float
    #: None where the fleet has no kafka_quota_proxy_fleet_cpu_seconds_total
    bus_cpu: float | None


def _reading(proxy: RunningProxy) -> tuple[float, float, float, float | None]:
    samples = scrape(proxy.metrics_url)
    bus_cpu = value(samples, "kafka_quota_proxy_fleet_cpu_seconds_total")
    return (
        total(samples, "kafka_quota_proxy_fleet_bytes_published_total"),
        total(samples, "kafka_quota_proxy_fleet_bytes_read_total"),
        cpu_ms(proxy.process.pid) / 1000,
        bus_cpu,
    )


@contextmanager
def fleet(
    cluster: KafkaCluster, work: Path, trees: Sequence[Path], name: str, owners: bool
) -> Iterator[list[RunningProxy]]:
    """A member per tree, each running that tree's code."""
    quotas = f'[clients."<default>"]\nproducer_byte_rate = {LIMIT}\n[fleet]\nname = "{name}"\n' + (
        "owners = true\n" if owners else ""
    )
    proxies = []
    try:
        for index, tree in enumerate(trees):
            env = {"PYTHONPATH": str(tree)}
            proxies.append(
                start_proxy(work, cluster.bootstrap_servers, 3, quotas, f"{name}-{index}", env)
            )
        yield proxies
    finally:
        for proxy in proxies:
            proxy.stop()


def leg(
    cluster: KafkaCluster, work: Path, trees: Sequence[Path], name: str, owners: bool = False
) -> None:
    topic = f"bench-fleet-cluster-{name}"
    cluster.create_topic(topic, partitions=MEMBERS)
    with fleet(cluster, work, trees, name, owners) as proxies:
        paths = routes(cluster, topic, proxies)
        start = time.time() + 5  # the load processes are spawned meanwhile
        measured_end = start + WARM_S + MEASURED_S
        end = measured_end + AFTER_KILL_S
        context = multiprocessing.get_context("spawn")
        out: Queue[dict[int, list[int]]] = context.Queue()
        share = -(-PRINCIPALS // LOADERS)
        loaders = [
            context.Process(
                target=_load,
                args=(
                    range(i * share, min(PRINCIPALS, (i + 1) * share)),
                    topic,
                    paths,
                    start,
                    end,
                    out,
                ),
                daemon=True,
            )
            for i in range(LOADERS)
        ]
        for loader in loaders:
            loader.start()
        time.sleep(max(0.0, start + WARM_S - time.time()))
        before = [_reading(proxy) for proxy in proxies]
        time.sleep(max(0.0, measured_end - time.time()))
        after = [_reading(proxy) for proxy in proxies]
        victim = proxies[0]
        os.kill(victim.process.pid, signal.SIGKILL)
        killed = time.monotonic()
        victim.process.wait()
        while not all(map(_converged, proxies[1:])):
            time.sleep(0.1)
        converged_s = time.monotonic() - killed
        acked: dict[int, list[int]] = {}
        for _ in loaders:
            acked.update(out.get(timeout=end - time.time() + 120))
        for loader in loaders:
            loader.join(30)
    members = [
        Member(
            (a[0] - b[0]) / MEASURED_S,
            (a[1] - b[1]) / MEASURED_S,
            (a[2] - b[2]) / MEASURED_S,
            None if a[3] is None or b[3] is None else (a[3] - b[3]) / MEASURED_S,
        )
        for b, a in zip(before, after, strict=True)
    ]
    report(name, members, acked, converged_s)
    if len(set(trees)) > 1:
        for index, proxy in enumerate(proxies):
            lines = proxy.log_path.read_text().splitlines()
            said = [
                line.strip() for line in lines if "record version" in line or "of version" in line
            ]
            skipped = sum("skipped" in line for line in lines)
            print(
                f"  member {index}'s log: {skipped} bus records skipped; on record versions:",
                *said or ["nothing"],
                sep="\n    ",
            )


def _converged(survivor: RunningProxy) -> bool:
    """It counts the members left, with its bus up (through owners, once the group's next
    generation gave the partitions the killed member owned to the others)."""
    samples = scrape(survivor.metrics_url)
    return (
        value(samples, "kafka_quota_proxy_fleet_members") == MEMBERS - 1
        and value(samples, "kafka_quota_proxy_fleet_bus_up") == 1.0
    )


def report(
    name: str, members: Sequence[Member], acked: dict[int, list[int]], converged_s: float
) -> None:
    print(f"\n{name}: per member, over {MEASURED_S} s after {WARM_S} s of load")
    for index, member in enumerate(members):
        bus = "n/a" if member.bus_cpu is None else f"{member.bus_cpu * 1000:.1f} ms/s"
        print(
            f"  member {index}: published {member.published / 1e3:,.1f} kB/s, read"
            f" {member.read / 1e3:,.1f} kB/s; process CPU {member.process_cpu * 1000:,.0f}"
            f" ms/s, bus CPU {bus}"
        )
    span = slice(WARM_S, WARM_S + MEASURED_S)
    heavy = [sum(acked[p][span]) / MEASURED_S / LIMIT for p in range(HEAVY)]
    print(
        f"  the {HEAVY} principals asking 2 x their quota: acknowledged"
        f" {statistics.median(heavy):.3f} x their quota (median), {max(heavy):.3f} x (worst),"
        f" {min(heavy):.3f} x (least)"
    )
    together = [
        sum(acked[p][s] for p in range(HEAVY)) / (HEAVY * LIMIT)
        for s in range(WARM_S, WARM_S + MEASURED_S + AFTER_KILL_S)
    ]
    before, after = together[:MEASURED_S], together[MEASURED_S:]
    print(
        f"  member 0 killed -9: the survivors counted {MEMBERS - 1} members, bus up,"
        f" {converged_s:.1f} s later; the {HEAVY} together, x their quotas, each second after:"
        f" {', '.join(f'{x:.2f}' for x in after)}"
    )
    for when, rates in (("before", before), ("after", after)):
        means = [
            sum(rates[s : s + WINDOWS_S]) / WINDOWS_S for s in range(len(rates) - WINDOWS_S + 1)
        ]
        print(
            f"  {when} the kill, over every {WINDOWS_S} s: {min(means):.3f} to {max(means):.3f}"
            f" x their quotas; over all {len(rates)} s: {sum(rates) / len(rates):.3f} x"
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.fleet_cluster", description=__doc__)
    parser.add_argument("--against", metavar="REV", help="the same run on REV's proxies, first")
    parser.add_argument("--mixed", metavar="REV", help="and a run with member 0 on REV")
    parser.add_argument(
        "--owners", action="store_true", help="and a run through owners ([fleet] owners)"
    )
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-fleet-cluster-") as tmp:
        work = Path(tmp)
        cluster = KafkaCluster(brokers_count=3, workdir=work / "kafka")
        cluster.start()
        try:
            if args.against is not None:
                with checkout(args.against) as tree:
                    leg(cluster, work, [tree] * MEMBERS, f"at-{args.against}")
                    if args.owners:
                        trees = [tree] * MEMBERS
                        leg(cluster, work, trees, f"owners-at-{args.against}", owners=True)
            with checkout(None) as tree:
                leg(cluster, work, [tree] * MEMBERS, "this-tree")
                if args.owners:
                    leg(cluster, work, [tree] * MEMBERS, "owners", owners=True)
                if args.mixed is not None:
                    with checkout(args.mixed) as old:
                        trees = [old, *[tree] * (MEMBERS - 1)]
                        leg(cluster, work, trees, f"mixed-{args.mixed}")
        finally:
            cluster.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
