"""What a fleet's members tell each other besides use (issue 52): connection counts, whole,
gone with their member; and the failed-login backoff's refusals and successes, counted on
every member as its own (proxy/enforcement/fleet_counts.py)."""

from __future__ import annotations

from collections.abc import Sequence

from config.guards import FailedLoginSettings
from protocol.fleet_records import (
    CEILING_FIXED,
    CEILING_USED,
    CEILING_WEIGHT,
    CONNECTION_CLAIM,
    FAILED_LOGINS,
    OPEN_CONNECTIONS,
    Publication,
    decode,
    encode,
)
from proxy.enforcement.failed_logins import FailedLogins
from proxy.enforcement.fleet import FleetMember
from proxy.enforcement.fleet_counts import FleetCounts
from proxy.enforcement.fleet_membership import GONE_AFTER
from quotas.engine import QuotaEngine
from quotas.entities import DEFAULT, QuotaEntity, QuotaType
from quotas.settings import QuotaConfig, QuotaLimits

SYNC_MS = 250


class Fleet:
    """Members whose every publication reaches every member at once, through the codec."""

    def __init__(self, size: int, limits: QuotaLimits, logins: bool = False) -> None:
        self.members = [FleetMember(f"m{index}", SYNC_MS) for index in range(size)]
        self.engines = [QuotaEngine(QuotaConfig(limits=limits)) for _ in range(size)]
        settings = FailedLoginSettings(first_wait_ms=100, max_wait_ms=2000)
        self.logins = [FailedLogins(settings if logins else None, draw=lambda: 0.0)
                       for _ in range(size)]  # fmt: skip
        self.counts = [FleetCounts(m, b) for m, b in zip(self.members, self.logins, strict=True)]

    def exchange(self, now_ms: int, live: Sequence[int] | None = None) -> list[Publication]:
        """The `live` members (all by default) publish, and each of them hears them all."""
        live = range(len(self.members)) if live is None else live
        publications = []
        for i in live:
            publication = self.members[i].publish(self.engines[i], now_ms, now_ms)
            self.counts[i].publish(publication, self.engines[i], now_ms)
            publications.append(publication)
        for publication in publications:
            for i in live:
                received = decode(encode(publication))
                skipped = self.members[i].receive(received, self.engines[i], now_ms)
                self.counts[i].receive(received, skipped, self.engines[i], now_ms)
        return publications


def test_open_connections_are_counted_across_the_fleet_and_go_with_a_member() -> None:
    """A principal's connections on one member leave the other only the rest of its limit;
    the counts and asks travel whole, as OPEN_CONNECTIONS and CONNECTION_CLAIM, each member's
    own ask is granted as it reads it back, and a member gone takes its own with it."""
    fleet = Fleet(2, {QuotaType.CONNECTIONS: {QuotaEntity(user=DEFAULT): 20.0}})
    fleet.exchange(0)
    fleet.exchange(SYNC_MS)  # each has read its own: its bus is up
    first, second = (each.connections for each in fleet.engines)
    tags = first.tags("alice", "app")

    def fill() -> None:
        while first.room(tags, 20):
            first.connected(("alice", "app"))

    fill()
    assert first.here[tags] == 5  # its floor: half the limit over 2 members, without a word
    (publication, _) = fleet.exchange(2 * SYNC_MS)
    assert (OPEN_CONNECTIONS, "alice", "", 5.5) in publication.uses  # it refused one
    # the room the other's floor leaves, all of it: no other member refused one
    assert (CONNECTION_CLAIM, "alice", "", 15.0) in publication.uses
    assert second.fleet(tags) == 5
    assert second.room(tags, 20)
    second.connected(("alice", "app"))
    for now_ms in range(3 * SYNC_MS, 12 * SYNC_MS, SYNC_MS):
        fill()
        fleet.exchange(now_ms)
    fill()
    assert first.fleet(tags) == 20 and second.fleet(tags) == 20
    # the second member alone publishes from now: the first is gone, its connections with it
    for now_ms in range(12 * SYNC_MS, (13 + GONE_AFTER) * SYNC_MS, SYNC_MS):
        fleet.exchange(now_ms, live=[1])
    assert second.fleet(tags) == 1


def test_a_login_refused_on_one_member_waits_on_every_member() -> None:
    """A client that tries each member in turn waits as long as one that tries one member;
    a success anywhere ends its user's wait everywhere."""
    fleet = Fleet(2, {}, logins=True)
    logins = fleet.logins
    fleet.exchange(SYNC_MS)  # the first publication shares nothing yet
    for _ in range(3):
        logins[0].refused("grace", "10.0.0.7", 2 * SYNC_MS)
    (publication, _) = fleet.exchange(2 * SYNC_MS)
    assert (FAILED_LOGINS, "grace", "10.0.0.7", 3.0) in publication.uses
    # three refusals: the next attempt waits 400 ms, by user and by address, on either member
    assert logins[1].wait_ms("grace", "10.0.0.9", 2 * SYNC_MS) == (400, "user")
    assert logins[1].wait_ms(None, "10.0.0.7", 2 * SYNC_MS) == (400, "address")
    assert logins[1].counts.refused == 0  # the broker refused none through it
    logins[1].accepted("grace", "10.0.0.8")
    fleet.exchange(3 * SYNC_MS)
    assert logins[0].wait_ms("grace", "10.0.0.9", 3 * SYNC_MS) == (0, "")


def test_each_members_load_of_a_ceiling_reaches_the_others_whole() -> None:
    """A member's Load of a broker's ceiling travels as three entries, replaces the last one
    the others heard, is not merged from a lost publication, and leaves with its member."""
    ceiling = {QuotaType.PRODUCE_CEILING: {QuotaEntity(broker="1"): 1000.0}}
    fleet = Fleet(2, ceiling)
    first, second = (engine.produce_ceiling for engine in fleet.engines)
    scope = first.scope("1")
    assert scope is not None
    first.charge(scope, first.standing("alice", "app"), 4000.0, 0)
    publications = fleet.exchange(SYNC_MS)
    parts = (CEILING_USED, CEILING_FIXED, CEILING_WEIGHT)
    assert sorted(u[0] for u in publications[0].uses if u[0] in parts) == sorted(parts)
    heard = second.scope("1")
    assert heard is not None and heard.others == first.load(scope, SYNC_MS)
    assert heard.others.used > 0 and scope.others.used == 0  # its own is not "others"
    fleet.members[0].lost(publications[0], SYNC_MS)
    merged = fleet.members[0].publish(fleet.engines[0], 2 * SYNC_MS, 0).uses
    assert not [use for use in merged if use[0] in parts]
    for step in range(3, 3 + GONE_AFTER + 2):
        fleet.exchange(step * SYNC_MS, live=[1])
    assert heard.others.used == 0
