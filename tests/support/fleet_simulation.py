"""A fleet on a virtual clock: greedy clients of one principal spread over members, each a
real connection core and enforcement of its own, and a simulated bus between them.

The clients, brokers and workloads are the fidelity table's (tests/support/fidelity.py); each member
publishes every sync interval (members staggered over the interval) what its sensors recorded,
and the bus delivers each publication to every member, the publisher included, after a delay,
losing some with a given probability, or none at all once cut; or, through owners
(Bus(owners=True), `--owners`), each contribution to its partition's owner and each owner's
totals to every member, with an owner killed and the group's next generation if asked. What
the principal got, over whole echo periods, is what the fleet held it to; the unit tests
assert it and its bound (tests/unit/proxy/enforcement/test_fleet.py), and `python -m
tests.support.fleet_simulation` prints the table.
"""

from __future__ import annotations

import argparse
import random
from collections.abc import Callable
from dataclasses import dataclass

from localkafka.inprocess.harness import VirtualClock, proxy_context
from protocol.fleet_records import decode, decode_totals, encode, encode_totals
from proxy.enforcement import Enforcement
from proxy.enforcement.fleet import FleetMember
from proxy.enforcement.fleet_owners import FOLDS, PARTITIONS, Owning
from quotas.engine import QuotaEngine
from quotas.entities import DEFAULT, QuotaEntity
from quotas.settings import QuotaConfig, QuotaLimits, QuotaSettings
from quotas.stats import MetricConfig
from quotas.store import FILE, entries_of
from tests.support.fidelity import (
    BEHAVIOURS,
    LONG_RUN_S,
    SECOND,
    WINDOWS,
    WORKLOADS,
    Behaviour,
    SimClient,
    Workload,
    greedy_client,
    whole_periods,
)

MS = 1_000_000


@dataclass(frozen=True)
class Bus:
    sync_interval_ms: int = 250
    delay_ms: int = 20
    #: the chance a publication is not written (its member is told, as a producer is)
    loss: float = 0.0
    #: from this second of the run on, nothing is delivered
    cut_at_s: int | None = None
    #: the members send their use to its owner and read the owners' totals
    #: (proxy/enforcement/fleet_owners.py; the partitions assigned round robin); False for
    #: every publication straight to every member
    owners: bool = False
    #: through owners, (member, second): the member is killed then (it stops publishing,
    #: folding and reading; its clients, if any, go on through it unshared), and the group's
    #: next generation, without it, comes `session_s` later (Kafka's session timeout)
    killed: tuple[int, int] | None = None
    session_s: int = 6


@dataclass(frozen=True)
class FleetResult:
    #: the fleet's rate over whole echo periods from the end of the first windows, to quota
    fleet: float
    #: once the bus is cut: each client's own rate over the rest of the run, to quota
    members_after_cut: tuple[float, ...]
    #: the fleet's use in each second from the clients' start, to quota
    per_second: tuple[float, ...] = ()


def simulate_fleet(
    workload: Workload,
    behaviour: Behaviour,
    windows: tuple[int, int],
    bus: Bus,
    placement: tuple[int, ...] = (1, 1, 1),
    seconds: int = LONG_RUN_S,
    seed: int = 7,
    limits: QuotaLimits | None = None,
    principals: bool = False,
) -> FleetResult:
    """`placement`: how many of the principal's clients each member serves (one member
    each; a member with none still takes part in the fleet). `limits`: other than one
    principal's quota (a topic's); `principals`: each client a principal of its own."""
    members = len(placement)
    samples, window_s = windows
    settings = QuotaSettings(client=MetricConfig(samples=samples, window_ms=window_s * 1000))
    if limits is None:
        limits = {workload.quota_type: {QuotaEntity(client_id=DEFAULT): workload.quota}}
    clock = VirtualClock()
    chance = random.Random(seed)
    contexts, fleet = [], []
    clients: list[SimClient] = []
    for index, served in enumerate(placement):
        context = proxy_context(Enforcement(QuotaEngine(QuotaConfig(settings, limits))), clock)
        context.quota_layers.replace(FILE, entries_of(limits, {}))
        clients += [
            greedy_client(
                context,
                clock,
                workload,
                behaviour,
                f"app-{len(clients) + k}".encode() if principals else b"app",
            )
            for k in range(served)
        ]
        contexts.append(context)
        fleet.append(FleetMember(f"member-{index}", bus.sync_interval_ms))

    def deliver(recipient: int, record: bytes) -> None:
        now_ms = clock.now_ms()
        fleet[recipient].receive(decode(record), contexts[recipient].quotas.engine, now_ms)

    def delivery(recipient: int, record: bytes) -> Callable[[], None]:
        return lambda: deliver(recipient, record)

    def to_member(
        recipient: int, read: Callable[[Owning, QuotaEngine, int], object]
    ) -> Callable[[], None]:
        """A record an owning member reads when it arrives, unless it was killed."""

        def arrive() -> None:
            if recipient not in dead:
                read(owning[recipient], contexts[recipient].quotas.engine, clock.now_ms())

        return arrive

    def broadcast_to(recipient: int, record: bytes) -> Callable[[], None]:
        return to_member(
            recipient, lambda member, engine, now: member.receive(decode(record), engine, now)
        )

    owning = [Owning(member, index) for index, member in enumerate(fleet)]
    #: the group: its members in order, and its generation; the partitions round robin
    group = list(range(members))
    generation = [0]
    dead: set[int] = set()

    def fold(writer: int, partition: int, sent_in: int, record: bytes) -> Callable[[], None]:
        def read() -> None:  # by the partition's owner when the record arrives
            owner = group[partition % len(group)]
            if owner not in dead:
                owning[owner].contribution(writer, partition, sent_in, decode(record))

        return read

    def totalled(recipient: int, record: bytes) -> Callable[[], None]:
        return to_member(
            recipient,
            lambda member, engine, now: member.read_totals(decode_totals(record), engine, now),
        )

    def kill(index: int) -> None:
        dead.add(index)

    def rebalance(index: int) -> None:
        group.remove(index)
        generation[0] += 1

    def sync(index: int) -> None:
        if index in dead:
            return
        now_ms = clock.now_ms()
        member, context = fleet[index], contexts[index]
        if bus.owners:
            publish_to_owners(index, now_ms)
            publish_totals(index)
            for part in range(1, FOLDS):
                clock.call_later(bus.sync_interval_ms * MS * part // FOLDS, totalling(index))
        else:
            publication = member.publish(context.quotas.engine, now_ms, now_ms)
            if bus.cut_at_s is not None and now_ms >= bus.cut_at_s * 1000:
                pass  # cut: written nowhere, and the member is not told (a partition)
            elif chance.random() < bus.loss:
                member.lost(publication, now_ms)
            else:
                record = encode(publication)
                for recipient in range(members):
                    clock.call_later(bus.delay_ms * MS, delivery(recipient, record))
        context.share_budgets(member.membership.share(now_ms))
        clock.call_later(bus.sync_interval_ms * MS, syncing(index))

    def publish_to_owners(index: int, now_ms: int) -> None:
        member = owning[index]
        names = [fleet[each].member for each in group]
        place = group.index(index)
        owned = list(range(place, PARTITIONS, len(group)))
        member.reached(now_ms)  # the cluster answers every member alive: none is cut off
        member.assign(names, owned, generation[0], now_ms)
        broadcast, sends = member.publish(contexts[index].quotas.engine, now_ms, now_ms)
        delay = bus.delay_ms * MS
        if broadcast is not None:
            if chance.random() < bus.loss:
                member.fleet.lost(broadcast, now_ms)
            else:
                record = encode(broadcast)
                for recipient in range(members):
                    clock.call_later(delay, broadcast_to(recipient, record))
        for partition, contribution in sends.items():
            if chance.random() < bus.loss:
                member.routes.lost(partition)
            else:
                # the record names its writer's place in the group and the generation
                place, sent_in = member.routes.member, member.routes.generation
                clock.call_later(delay, fold(place, partition, sent_in, encode(contribution)))

    def publish_totals(index: int) -> None:
        if index in dead:
            return  # its totalling scheduled before it was killed
        member, delay = owning[index], bus.delay_ms * MS
        for each in member.totals():
            if chance.random() < bus.loss:
                member.folds[each.partition].lost(each)
            else:
                record = encode_totals(each)
                for recipient in range(members):
                    clock.call_later(delay, totalled(recipient, record))

    def totalling(index: int) -> Callable[[], None]:
        return lambda: publish_totals(index)

    def syncing(index: int) -> Callable[[], None]:
        return lambda: sync(index)

    for index in range(members):  # staggered over one interval, as independent processes are
        clock.call_later(bus.sync_interval_ms * MS * index // members, syncing(index))
    if bus.killed is not None:
        killed, at_s = bus.killed
        clock.call_later(at_s * SECOND, lambda: kill(killed))
        clock.call_later((at_s + bus.session_s) * SECOND, lambda: rebalance(killed))
    # the clients come once the members have read their own publications back (a proxy
    # serves once its bus is up: proxy/control/fleet_bus.py), on a whole second
    warm_s = -(-(2 * bus.sync_interval_ms + bus.delay_ms) // 1000)
    clock.advance_to(warm_s * SECOND)
    for client in clients:
        client.start()
    start = samples * window_s
    end = warm_s + start + seconds
    clock.advance_to(end * SECOND)
    per_client = [client.per_second(end)[warm_s:] for client in clients]
    used = [sum(second) for second in zip(*per_client, strict=True)]
    span = whole_periods(seconds, windows, at_least=False)
    if bus.cut_at_s is not None:
        span = min(span, bus.cut_at_s - warm_s - start)
    fleet_rate = workload.rate(sum(used[start : start + span]), span) / workload.quota
    after: tuple[float, ...] = ()
    if bus.cut_at_s is not None:
        # a member's share takes effect once it has missed its own publications; from then
        # on each is held to quota / members over whole periods
        settled = bus.cut_at_s - warm_s + 2 * start
        rest = whole_periods(start + seconds - settled, windows, at_least=False)
        after = tuple(
            workload.rate(sum(seconds_used[settled : settled + rest]), rest) / workload.quota
            for seconds_used in per_client
        )
    per_second = tuple(workload.rate(second, 1) / workload.quota for second in used)
    return FleetResult(fleet_rate, after, per_second)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tests.support.fleet_simulation", description=__doc__
    )
    parser.add_argument(
        "--placement", default="1,1,1", help="clients per member, e.g. 2,1,0 (default 1,1,1)"
    )
    parser.add_argument("--sync-ms", type=int, default=250)
    parser.add_argument("--delay-ms", type=int, default=20)
    parser.add_argument("--loss", type=float, default=0.0)
    parser.add_argument(
        "--owners", action="store_true", help="each member's use through its owner's totals"
    )
    args = parser.parse_args(argv)
    bus = Bus(args.sync_ms, args.delay_ms, args.loss, owners=args.owners)
    placement = tuple(int(served) for served in args.placement.split(","))
    print(f"clients per member {args.placement}, sync {args.sync_ms} ms,", end=" ")
    print(f"delay {args.delay_ms} ms, loss {args.loss}, owners {args.owners}")
    print("| quota | windows | client | fleet / quota |")
    print("|---|---|---|---|")
    for workload in WORKLOADS:
        for windows in WINDOWS:
            for behaviour in BEHAVIOURS:
                result = simulate_fleet(workload, behaviour, windows, bus, placement)
                print(
                    f"| {workload.quota_type.key} | {windows[0]} x {windows[1]} s |"
                    f" {behaviour.name} | {result.fleet:.4f} |"
                )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
