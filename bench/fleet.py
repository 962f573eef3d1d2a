"""What a fleet costs (issues 27 and 51): its bus's bytes and CPU, and what workers buy.

1. The bus, in-process on a virtual clock: 1,000 and 10,000 active principals, 3 and 20
   members, every principal spread over every member (the worst case: a principal whose
   connections land on a few members costs the others less), each with a Zipf demand: the
   principal of rank r uses 0.8 x (principals / 10 / r) ** 1.5 of its quota, at most all of
   it, so a tenth of them are near their quota and the rest far below it. Printed per member
   per second: bytes published and read, the CPU of publishing and of reading (a member reads
   every member's publication, its own included), and the entries published (uses and
   standings: a principal published, or its standing named). With
   `--against REV` the same bus and demand run on the fleet of REV (a git worktree), first.
   Through owners, member 0's CPU also alone: replayed in a process of its own on what it
   read beside the others (and checked to write the same), since 20 members' sensors in one
   process share its caches as no real member's do.
2. One worker with 1,000 principals near their quota and, on the bus, two simulated
   members (another process) publishing the same principals' use every interval: the bus's
   own CPU per second with no client, as a share of a worker's core (target: under 5 %); and
   the worker's CPU per request fleet off and on, driven as hard as one driver process can
   (a Produce of each principal in turn, on connections kept full).
3. Requests/s of 1 and 2 workers on loopback, in one run, as a ratio: the same driver, as
   many requests in flight as it keeps.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import ssl
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaProducer

from bench.instructions import checkout
from bench.throughput import cpu_ms
from config.fleet import FLEET_TOPIC_PREFIX
from localkafka.cluster import KafkaCluster
from localkafka.inprocess.wire import produce_request, record_batch
from localkafka.proxy_process import RunningProxy, start_proxy
from protocol.fleet_records import Publication, decode, encode
from proxy.enforcement.fleet import FleetMember
from quotas.engine import QuotaEngine
from quotas.entities import DEFAULT, QuotaEntity, QuotaType
from quotas.settings import QuotaConfig

SYNC_MS = 250
#: the Zipf demand: the principal at a tenth of the ranks uses this share of its quota
ZIPF_AT_TENTH = 0.8
ZIPF_EXPONENT = 1.5
#: a whole window of Kafka's default quota windows (11 x 1 s), before the bus is measured
WARM_INTERVALS = 48
PRINCIPALS = 1_000
TOPIC = "bench-fleet"
TARGET_BUS_SHARE = 0.05
_INT32 = struct.Struct(">i")


# 1. the bus, in-process ---------------------------------------------------------------------


@dataclass(frozen=True)
class BusCost:
    published: float
    read: float
    publish_cpu: float
    read_cpu: float
    #: uses and standings in one member's publication, on average
    uses: float


def demand(rank: int, principals: int) -> float:
    """A principal's use, as a share of its quota: Zipf, a tenth near the quota."""
    share: float = ZIPF_AT_TENTH * (principals / 10 / rank) ** ZIPF_EXPONENT
    return min(1.0, share)


def bus(principals: int, members: int, intervals: int) -> BusCost:
    """Per member per second, after WARM_INTERVALS of warm-up."""
    limit = 1_000_000.0
    limits = {QuotaType.PRODUCE: {QuotaEntity(client_id=DEFAULT): limit}}
    engines = [QuotaEngine(QuotaConfig(limits=limits)) for _ in range(members)]
    fleet = [FleetMember(f"member-{index}", SYNC_MS) for index in range(members)]
    clients = [f"client-{index:05d}" for index in range(principals)]
    # whole bytes, as a Produce's are charged
    per_member = [
        float(round(demand(rank, principals) * limit * SYNC_MS / 1000 / members))
        for rank in range(1, principals + 1)
    ]
    published = publish_cpu = read_cpu = 0.0
    uses = 0
    for interval in range(WARM_INTERVALS + intervals):
        now = (interval + 1) * SYNC_MS
        for each in engines:
            produce = each.produce
            for client, value in zip(clients, per_member, strict=True):
                sensors = produce.sensors_for("", client, now)
                produce.record_and_get_throttle_time_ms(sensors, value, now)
        started = time.process_time()
        publications = [
            member.publish(each, now, now) for member, each in zip(fleet, engines, strict=True)
        ]
        records = [encode(publication) for publication in publications]
        publishing = time.process_time() - started
        for index, (member, each) in enumerate(zip(fleet, engines, strict=True)):
            started = time.process_time()
            for record in records:
                member.receive(decode(record), each, now)
            if index == 0:
                reading = time.process_time() - started
        if interval >= WARM_INTERVALS:
            published += sum(map(len, records))
            publish_cpu += publishing
            read_cpu += reading
            uses += sum(map(_entries, publications))
    seconds = intervals * SYNC_MS / 1000
    return BusCost(
        published / members / seconds,
        published / seconds,
        publish_cpu / members / seconds,
        read_cpu / seconds,
        uses / members / intervals,
    )


@dataclass
class Slot:
    """What member 0 of bus_through_owners reads in one of an interval's FOLDS slots, and
    what it writes (to check that a replay of it alone writes the same)."""

    now: int
    publishes: bool
    broadcasts: list[bytes]
    #: (writer's place, partition, record) of the partitions member 0 owns
    contributions: list[tuple[int, int, bytes]]
    totals: list[bytes]
    #: member 0's contributions and totals
    sent: list[bytes]
    totalled: list[bytes]


def bus_through_owners(
    principals: int, members: int, intervals: int, recording: list[Slot] | None = None
) -> BusCost:
    """bus() with owners (proxy/enforcement/fleet_owners.py): partitions assigned round
    robin; the members publish staggered over FOLDS slots of each interval, and every owner
    publishes its totals at every slot. A member reads what is not a use of every member's,
    its partitions' contributions and every owner's totals. Read is the average member's;
    CPU, member 0's, beside the others' in one process (`recording` takes what member 0
    reads and writes, for owners_alone)."""
    # here, not at the top: the leg of --against runs this file in a tree from before owners
    from protocol.fleet_records import decode_totals, encode_totals
    from proxy.enforcement.fleet_owners import FOLDS, PARTITIONS, Owning

    limit = 1_000_000.0
    limits = {QuotaType.PRODUCE: {QuotaEntity(client_id=DEFAULT): limit}}
    engines = [QuotaEngine(QuotaConfig(limits=limits)) for _ in range(members)]
    names = [f"member-{index}" for index in range(members)]
    fleet = [
        Owning(FleetMember(name, SYNC_MS), index, PARTITIONS) for index, name in enumerate(names)
    ]
    owner_of = [partition % members for partition in range(PARTITIONS)]
    for index, member in enumerate(fleet):
        member.assign(names, [p for p, o in enumerate(owner_of) if o == index], 0, 0)
    clients = [f"client-{index:05d}" for index in range(principals)]
    per_member = [
        float(round(demand(rank, principals) * limit * SYNC_MS / 1000 / members))
        for rank in range(1, principals + 1)
    ]
    published = read = publish_cpu = read_cpu = 0.0
    uses = 0
    for interval in range(WARM_INTERVALS + intervals):
        measured = interval >= WARM_INTERVALS
        now = interval * SYNC_MS + 1
        for each in engines:
            produce = each.produce
            for client, value in zip(clients, per_member, strict=True):
                sensors = produce.sensors_for("", client, now)
                produce.record_and_get_throttle_time_ms(sensors, value, now)
        for slot in range(FOLDS):
            now = interval * SYNC_MS + (slot + 1) * SYNC_MS // FOLDS
            broadcasts, contributions, totals = [], [], []
            sent_by_0: list[bytes] = []
            totalled_by_0: list[bytes] = []
            for index, (member, each) in enumerate(zip(fleet, engines, strict=True)):
                started = time.process_time()
                if index % FOLDS == slot:
                    member.assign(names, list(member.folds), 0, now)
                    broadcast, sends = member.publish(each, now, now)
                    if broadcast is not None:
                        broadcasts.append(encode(broadcast))
                    sent_now = [(index, p, encode(c)) for p, c in sends.items()]
                    contributions += sent_now
                    if index == 0:
                        sent_by_0 = [record for _, _, record in sent_now]
                    if measured:
                        sent = [broadcast] if broadcast is not None else []
                        uses += sum(map(_entries, [*sent, *sends.values()]))
                totalled = [encode_totals(t) for t in member.totals()]
                totals += totalled
                if index == 0:
                    totalled_by_0 = totalled
                    if measured:
                        publish_cpu += time.process_time() - started
            if recording is not None:
                owned = [each for each in contributions if owner_of[each[1]] == 0]
                recording.append(
                    Slot(now, slot == 0, broadcasts, owned, totals, sent_by_0, totalled_by_0)
                )
            everyone = sum(map(len, broadcasts)) + sum(map(len, totals))
            for index, (member, each) in enumerate(zip(fleet, engines, strict=True)):
                started = time.process_time()
                for record in broadcasts:
                    member.receive(decode(record), each, now)
                owned_bytes = 0
                for writer, partition, record in contributions:
                    if owner_of[partition] == index:
                        member.contribution(writer, partition, 0, decode(record))
                        owned_bytes += len(record)
                for record in totals:
                    member.read_totals(decode_totals(record), each, now)
                if measured:
                    if index == 0:
                        read_cpu += time.process_time() - started
                    read += everyone + owned_bytes
            if measured:
                published += everyone + sum(len(record) for _, _, record in contributions)
    seconds = intervals * SYNC_MS / 1000
    return BusCost(
        published / members / seconds,
        read / members / seconds,
        publish_cpu / seconds,
        read_cpu / seconds,
        uses / members / intervals,
    )


def owners_alone(principals: int, members: int, slots: list[Slot], intervals: int) -> float:
    """Member 0 of bus_through_owners replayed alone (run it in a process of its own): its
    demand, and what it read there, slot by slot. Its CPU per second over the measured
    intervals, publish and read, as bus_through_owners counts it; it must write what it
    wrote there, record for record."""
    from protocol.fleet_records import decode_totals, encode_totals
    from proxy.enforcement.fleet_owners import FOLDS, PARTITIONS, Owning

    _collect_as_the_proxy_does()
    limit = 1_000_000.0
    limits = {QuotaType.PRODUCE: {QuotaEntity(client_id=DEFAULT): limit}}
    engine = QuotaEngine(QuotaConfig(limits=limits))
    names = [f"member-{index}" for index in range(members)]
    member = Owning(FleetMember(names[0], SYNC_MS), 0, PARTITIONS)
    member.assign(names, [p for p in range(PARTITIONS) if p % members == 0], 0, 0)
    clients = [f"client-{index:05d}" for index in range(principals)]
    per_member = [
        float(round(demand(rank, principals) * limit * SYNC_MS / 1000 / members))
        for rank in range(1, principals + 1)
    ]
    produce = engine.produce
    cpu = 0.0
    for index, slot in enumerate(slots):
        interval = index // FOLDS
        if index % FOLDS == 0:
            now = interval * SYNC_MS + 1
            for client, value in zip(clients, per_member, strict=True):
                sensors = produce.sensors_for("", client, now)
                produce.record_and_get_throttle_time_ms(sensors, value, now)
        started = time.process_time()
        sent = []
        if slot.publishes:
            member.assign(names, list(member.folds), 0, slot.now)
            _, sends = member.publish(engine, slot.now, slot.now)
            sent = [encode(contribution) for contribution in sends.values()]
        totalled = [encode_totals(totals) for totals in member.totals()]
        for record in slot.broadcasts:
            member.receive(decode(record), engine, slot.now)
        for writer, partition, record in slot.contributions:
            member.contribution(writer, partition, 0, decode(record))
        for record in slot.totals:
            member.read_totals(decode_totals(record), engine, slot.now)
        if interval >= WARM_INTERVALS:
            cpu += time.process_time() - started
        # as sets are ordered by string hashes, which differ from process to process
        same = [_sorted(decode(record)) for record in sent] == [
            _sorted(decode(record)) for record in slot.sent
        ] and [_sorted(decode_totals(record)) for record in totalled] == [
            _sorted(decode_totals(record)) for record in slot.totalled
        ]
        if not same:
            raise AssertionError(f"member 0 alone wrote otherwise at {slot.now} ms")
    return cpu / (intervals * SYNC_MS / 1000)


def _sorted(record: Any) -> Any:
    """A publication's or totals' uses and standings in order."""
    return record._replace(uses=sorted(record.uses), standings=sorted(record.standings or ()))


def owners_table(intervals: int) -> list[tuple[int, int, BusCost, float]]:
    """bus_table through owners, and member 0's CPU per second alone in a process of its
    own, replaying what it read (beside the others, 20 members' sensors share one process's
    caches)."""
    _collect_as_the_proxy_does()
    context = multiprocessing.get_context("spawn")
    rows = []
    with context.Pool(1) as pool:
        for principals in (1_000, 10_000):
            for members in (3, 20):
                slots: list[Slot] = []
                cost = bus_through_owners(principals, members, intervals, slots)
                alone = pool.apply(owners_alone, (principals, members, slots, intervals))
                rows.append((principals, members, cost, alone))
    return rows


def _entries(publication: Publication) -> int:
    """Its uses and standings (a tree of --against may have no standings)."""
    return len(publication.uses) + len(getattr(publication, "standings", None) or ())


def bus_table(intervals: int) -> list[tuple[int, int, BusCost]]:
    _collect_as_the_proxy_does()
    return [
        (principals, members, bus(principals, members, intervals))
        for principals in (1_000, 10_000)
        for members in (3, 20)
    ]


def _collect_as_the_proxy_does() -> None:
    try:
        from proxy.network.garbage import collect_rarely
    except ImportError:
        return  # a tree from before it (--against): CPython's defaults, as its proxy had
    collect_rarely()


def print_bus(intervals: int, against: str | None) -> None:
    print(
        f"1. The bus, per member per second ({SYNC_MS} ms sync; every principal on every"
        " member; a Zipf demand, a tenth near the quota):"
    )
    legs = []
    if against is not None:
        with checkout(against) as tree:
            done = subprocess.run(
                [sys.executable, __file__, "--bus-json", "--intervals", str(intervals)],
                cwd=tree,
                env={**os.environ, "PYTHONPATH": str(tree)},
                capture_output=True,
                text=True,
                check=True,
            )
        legs.append(
            (f"at {against}", [(p, m, BusCost(**c)) for p, m, c in json.loads(done.stdout)])
        )
    legs.append(("this tree", bus_table(intervals)))
    owners = owners_table(intervals)
    legs.append(("owners", [(p, m, cost) for p, m, cost, _ in owners]))
    print("| fleet | principals | members | published | read | CPU publish + read | entries |")
    print("|---|---|---|---|---|---|---|")
    for name, table in legs:
        for principals, members, cost in table:
            print(
                f"| {name} | {principals:,} | {members} | {cost.published / 1e3:,.1f} kB |"
                f" {cost.read / 1e3:,.1f} kB | {cost.publish_cpu * 1e3:.1f} +"
                f" {cost.read_cpu * 1e3:.1f} ms | {cost.uses:,.0f} |"
            )
    print()
    print("Owners, member 0's CPU per second beside the others in one process, and alone:")
    print("| principals | members | beside the others | alone |")
    print("|---|---|---|---|")
    for principals, members, cost, alone in owners:
        beside = (cost.publish_cpu + cost.read_cpu) * 1e3
        print(f"| {principals:,} | {members} | {beside:.1f} ms | {alone * 1e3:.1f} ms |")


# 2 and 3. real processes ----------------------------------------------------------------------


def frames(principals: int) -> list[bytearray]:
    """One Produce frame per principal (client-id), its correlation id patched per send."""
    batch = record_batch(-1, value=b"x" * 100)
    return [
        bytearray(
            produce_request(9, {0: batch}, TOPIC, 0, acks=1, client_id=b"client-%05d" % index)
        )
        for index in range(principals)
    ]


async def _connection(
    host: str,
    port: int,
    frames: list[bytearray],
    start: int,
    deadline: float,
    in_flight: int,
    answered: list[int],
    context: ssl.SSLContext | None,
) -> None:
    reader, writer = await asyncio.open_connection(host, port, ssl=context)
    correlation = 0
    pending = 0
    try:
        while time.monotonic() < deadline:
            while pending < in_flight:
                frame = frames[(start + correlation) % len(frames)]
                struct.pack_into(">i", frame, 8, correlation)
                writer.write(frame)
                correlation += 1
                pending += 1
            size = _INT32.unpack(await reader.readexactly(4))[0]
            await reader.readexactly(size)
            pending -= 1
            answered[0] += 1
        while pending:
            size = _INT32.unpack(await reader.readexactly(4))[0]
            await reader.readexactly(size)
            pending -= 1
    finally:
        writer.close()


async def drive(
    address: str,
    seconds: float,
    connections: int = 8,
    in_flight: int = 8,
    context: ssl.SSLContext | None = None,
) -> int:
    """Produce requests of 1,000 principals in turn for `seconds` (over TLS with a
    `context`): how many were answered."""
    host, port = address.rsplit(":", 1)
    shared = frames(PRINCIPALS)
    answered = [0]
    deadline = time.monotonic() + seconds
    await asyncio.gather(
        *(
            _connection(host, int(port), shared, c * 97, deadline, in_flight, answered, context)
            for c in range(connections)
        )
    )
    return answered[0]


async def simulated_members(servers: str, fleet: str, members: int, stop: asyncio.Event) -> None:
    """Members that publish the same principals' use every interval, as a fleet of
    `members` + 1 would show the measured one: of this release (records with standings,
    none named: use that stops and starts, the bus's most costly)."""
    producer = AIOKafkaProducer(bootstrap_servers=servers)
    await producer.start()
    sequence = 0
    try:
        while not stop.is_set():
            sequence += 1
            for member in range(members):
                uses = [
                    (0, "", f"client-{index:05d}", SIMULATED_RATE * SYNC_MS / 1000)
                    for index in range(PRINCIPALS)
                ]
                record = encode(Publication(f"simulated-{member}", sequence, 0, uses, {}, []))
                await producer.send_and_wait(FLEET_TOPIC_PREFIX + fleet, record, partition=0)
            await asyncio.sleep(SYNC_MS / 1000)
    finally:
        await producer.stop()


#: every principal limited; with what the simulated members report, each is near enough
#: its limit to be published every interval (40 % and up) and never throttled (a driven
#: principal adds at most ~10 kB/s: 50,000 requests/s of 200 bytes over 1,000 principals)
LIMIT = 100_000
SIMULATED_RATE = 20_000.0
QUOTAS = f'[clients."<default>"]\nproducer_byte_rate = {LIMIT}\n'


def cpu_per_request_us(
    proxy: RunningProxy, address: str, seconds: float, context: ssl.SSLContext | None = None
) -> tuple[float, float]:
    """(the proxy's CPU per answered request in us, requests answered per second)."""
    before = cpu_ms(proxy.process.pid)
    answered = asyncio.run(drive(address, seconds, context=context))
    return (cpu_ms(proxy.process.pid) - before) / answered * 1000, answered / seconds


def bus_cpu(cluster: KafkaCluster, work: Path, rounds: int, seconds: float) -> float:
    """The bus's CPU as a share of a saturated worker's; prints it and the driven runs."""
    node = cluster.brokers[0].node_id
    off = start_proxy(work, cluster.bootstrap_servers, 1, QUOTAS, name="off")
    fleet = QUOTAS + '[fleet]\nname = "bench"\n'
    on = start_proxy(work, cluster.bootstrap_servers, 1, fleet, name="on")
    members = multiprocessing.get_context("spawn").Process(
        target=_simulated_members_process, args=(cluster.bootstrap_servers,), daemon=True
    )
    members.start()
    runs: dict[str, list[tuple[float, float]]] = {"off": [], "on": []}
    try:
        asyncio.run(drive(on.broker_address(node), 2))  # every principal's sensors exist
        before = cpu_ms(on.process.pid)
        time.sleep(seconds)  # no client: the bus alone, the shares of 1,000 principals live
        bus_ms = (cpu_ms(on.process.pid) - before) / seconds
        for _ in range(rounds):  # taking turns, so both see the same machine
            runs["off"].append(cpu_per_request_us(off, off.broker_address(node), seconds))
            runs["on"].append(cpu_per_request_us(on, on.broker_address(node), seconds))
    finally:
        members.kill()
        off.stop()
        on.stop()
    median_off = statistics.median(cost for cost, _ in runs["off"])
    median_on = statistics.median(cost for cost, _ in runs["on"])
    share = bus_ms / 1000
    print(
        f"2. One worker, 1,000 principals near their quota, 2 simulated members on the bus:"
        f" the bus alone takes {bus_ms:.0f} ms of CPU per second, {share:.1%} of a saturated"
        f" worker (target under {TARGET_BUS_SHARE:.0%}). Driven as hard as one driver"
        f" process can (median of {rounds}): CPU per request {median_off:.1f} us off,"
        f" {median_on:.1f} us on ({median_on / median_off - 1:+.1%})"
    )
    for name, measured in runs.items():
        print(f"   {name}: " + ", ".join(f"{us:.1f} us at {rate:,.0f}/s" for us, rate in measured))
    return share


def _simulated_members_process(servers: str) -> None:
    asyncio.run(simulated_members(servers, "bench", 2, asyncio.Event()))


def worker_rates(cluster: KafkaCluster, work: Path, rounds: int, seconds: float) -> None:
    node = cluster.brokers[0].node_id
    rates: dict[int, list[float]] = {1: [], 2: []}
    for _ in range(rounds):
        for workers in (1, 2):
            config = f"workers = {workers}\n" + QUOTAS
            proxy = start_proxy(
                work, cluster.bootstrap_servers, 1, config, name=f"workers-{workers}"
            )
            try:
                answered = asyncio.run(drive(proxy.broker_address(node), seconds))
            finally:
                proxy.stop()
            rates[workers].append(answered / seconds)
    one, two = statistics.median(rates[1]), statistics.median(rates[2])
    print(
        f"3. Requests/s on loopback, one driver process (median of {rounds}): 1 worker"
        f" {one:,.0f}, 2 workers {two:,.0f} ({two / one:.2f} x)"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.fleet", description=__doc__)
    parser.add_argument("--intervals", type=int, default=40, help="of the in-process bus")
    parser.add_argument("--seconds", type=float, default=10.0, help="of each driven run")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--skip-bus", action="store_true", help="only the driven runs")
    parser.add_argument("--bus-only", action="store_true", help="only the in-process bus")
    parser.add_argument("--bus-json", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--against", metavar="REV", help="the bus also on the fleet of REV")
    args = parser.parse_args(argv)
    if args.bus_json:  # the --against leg, run in REV's tree
        print(json.dumps([(p, m, asdict(cost)) for p, m, cost in bus_table(args.intervals)]))
        return 0
    if not args.skip_bus:
        print_bus(args.intervals, args.against)
    if args.bus_only:
        return 0
    with tempfile.TemporaryDirectory(prefix="bench-fleet-") as tmp:
        work = Path(tmp)
        cluster = KafkaCluster(brokers_count=1, workdir=work / "kafka")
        cluster.start()
        try:
            cluster.create_topic(TOPIC, partitions=1)
            share = bus_cpu(cluster, work, args.rounds, args.seconds)
            worker_rates(cluster, work, args.rounds, args.seconds)
        finally:
            cluster.stop()
    ok = share < TARGET_BUS_SHARE
    print("target met" if ok else "target missed")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
