"""A fleet's connection guard on a virtual clock: members of quotas/principal_connections.py,
and a bus of one partition between them that every member reads in one order, its own
publications too, each as far as it has got.

`Bus` is what the unit tests drive step by step (tests/unit/quotas/test_principal_connections.py).
`python -m tests.support.connection_simulation` prints what a principal holding a steady
number of connections meets: connections that live LIFETIME_MS arrive at random members at
the rate that holds that many open, a refused one comes back after its client's reconnect
backoff, members publish every sync interval (staggered) and read each publication after a
delay. Each row says how many attempts were refused and the most the fleet held open.
"""

from __future__ import annotations

import argparse
import heapq
import random
from collections.abc import Sequence

from quotas.entities import QuotaEntity
from quotas.principal_connections import PrincipalConnections, Report

#: the principal's connections (user alice, any client-id), as the limits resolve them
TAGS = ("alice", "")
CLIENT = ("alice", "app")
LINE_SHARE = 0.5
LIFETIME_MS = 2000
#: librdkafka's first reconnect backoff
BACKOFF_MS = 100


class Bus:
    """Members of one principal's limit, and their publications in the bus's order (each a
    list of what it says of the principal, maybe none); `read[i]` is how far member i has
    read."""

    def __init__(self, members: int, limit: float, line_share: float | None = LINE_SHARE) -> None:
        self.names = [f"m{i}" for i in range(members)]
        self.gauges = []
        for name in self.names:
            connections = PrincipalConnections()
            connections.update_limits({QuotaEntity(user="alice"): limit})
            connections.place(line_share, name, set(self.names) - {name}, alone=False)
            self.gauges.append(connections)
        self.records: list[tuple[str, int, list[Report]]] = []
        self.read = [0] * members
        self.sequence = 0

    def admit(self, index: int) -> bool:
        connections = self.gauges[index]
        limit = connections.limit(TAGS)
        if limit is not None and not connections.room(TAGS, limit):
            return False
        connections.connected(CLIENT)
        return True

    def publish(self, index: int) -> list[Report]:
        self.sequence += 1
        said = list(self.gauges[index].publish(self.sequence, cool_after=8, repeat=4))
        self.records.append((self.names[index], self.sequence, said))
        return said

    def follow(self, index: int, upto: int | None = None) -> None:
        """Member `index` reads the publications up to `upto` (all by default)."""
        connections = self.gauges[index]
        end = len(self.records) if upto is None else upto
        for member, sequence, said in self.records[self.read[index] : end]:
            for each in said:
                if member != self.names[index]:
                    connections.receive(member, each.tags, each.connections)
                connections.receive_claim(member, sequence, each.tags, each.ask)
            if member != self.names[index]:
                connections.heard(member, {each.tags for each in said})
        self.read[index] = max(self.read[index], end)

    def skip(self, index: int) -> None:
        """Member `index`'s bus opened again at the end of the topic."""
        self.read[index] = len(self.records)
        self.gauges[index].resync()

    def sync(self) -> None:
        """Every member publishes, then reads everything."""
        for index in range(len(self.gauges)):
            self.publish(index)
        for index in range(len(self.gauges)):
            self.follow(index)

    def total(self) -> int:
        return sum(connections.here[TAGS] for connections in self.gauges)


def steady(
    members: int, limit: int, holding: int, sync_ms: int, delay_ms: int, seconds: int, seed: int
) -> tuple[float, int]:
    """Refused attempts (a fraction of all) and the most open, for a principal whose
    connections arrive at the rate that holds `holding` of them open; one member holds the
    whole limit alone (no fleet)."""
    rng = random.Random(seed)
    bus = Bus(members, limit, LINE_SHARE if members > 1 else None)
    # (time, order made, kind, member, how far a "read" reads the bus)
    events: list[tuple[int, int, str, int, int]] = []
    order = 0

    def at(time_ms: int, kind: str, member: int, upto: int = 0) -> None:
        nonlocal order
        order += 1
        heapq.heappush(events, (time_ms, order, kind, member, upto))

    for index in range(members):
        at(index * sync_ms // members, "publish", index)
    arrival_ms = LIFETIME_MS / holding
    time_ms = 0.0
    while time_ms < seconds * 1000:
        time_ms += rng.expovariate(1 / arrival_ms)
        at(int(time_ms), "connect", rng.randrange(members))
    attempts = refused = most = 0
    end_ms = seconds * 1000
    while events:
        now, _, kind, index, upto = heapq.heappop(events)
        if now > end_ms + LIFETIME_MS:
            break
        if kind == "connect":
            attempts += 1
            if bus.admit(index):
                most = max(most, bus.total())
                at(now + LIFETIME_MS, "close", index)
            else:
                refused += 1
                at(now + BACKOFF_MS, "connect", rng.randrange(members))
        elif kind == "close":
            bus.gauges[index].closed(CLIENT)
        elif kind == "publish":
            bus.publish(index)
            for reader in range(members):
                at(now + delay_ms, "read", reader, len(bus.records))
            if now <= end_ms:
                at(now + sync_ms, "publish", index)
        else:
            bus.follow(index, max(bus.read[index], upto))
    return refused / max(1, attempts), most


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--members", type=int, default=2)
    parser.add_argument("--limit", type=int, default=50)
    parser.add_argument("--sync-ms", type=int, default=250)
    parser.add_argument("--delay-ms", type=int, default=20)
    parser.add_argument("--seconds", type=int, default=300)
    args = parser.parse_args(argv)
    print(
        f"{args.members} members, limit {args.limit}, sync {args.sync_ms} ms, bus delay "
        f"{args.delay_ms} ms, connections live {LIFETIME_MS} ms, backoff {BACKOFF_MS} ms, "
        f"{args.seconds} s"
    )
    print("| holding | refused: one proxy | refused: the fleet | most open: the fleet |")
    print("|---|---|---|---|")
    for holding in (20, 30, 40, 46, 48):
        alone, _ = steady(1, args.limit, holding, args.sync_ms, args.delay_ms, args.seconds, 1)
        refused, most = steady(
            args.members, args.limit, holding, args.sync_ms, args.delay_ms, args.seconds, 1
        )
        print(
            f"| {holding} of {args.limit} | {alone * 100:.1f} % | {refused * 100:.1f} % | {most} |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
